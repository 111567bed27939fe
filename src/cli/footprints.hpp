#pragma once
// Models with their exact KV bytes, shared by `footprint` and `compare`.

#include <optional>
#include <string>
#include <vector>

#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/report/record.hpp>

#include "command.hpp"

namespace kvcalc::cli {

struct Entry {
  Model model;
  Footprint footprint;
  std::optional<CapacityResult> capacity; ///< compare --gpu
};

/// Each model of `specs` loaded, with its footprint; their notes join `warnings`.
std::vector<Entry> footprint_entries(const std::vector<std::string>& specs,
                                     const FootprintOptions& options,
                                     std::vector<std::string>& warnings);
/// The options `footprint` and `compare` share: the contexts, the cache, paging.
void add_footprint_options(const Options& cmd, std::vector<u64>& contexts, CacheRequest& cache,
                           std::optional<u64>& block_size);
/// --explain, the first of their output options.
void add_explain_option(const Options& cmd, bool& explain);
/// One model's description: its cache, layer groups and contexts; ratios to `base` when given;
/// its capacity (compare --gpu); the derivation with `explain`. The JSON is its record's, the
/// tables and the CSV are views of it.
Record describe_footprint(const Entry& e, const Entry* base, bool explain);
/// `footprint`'s tables of one model for people: the layer groups (with the layers that store
/// nothing and the total), then the contexts.
void footprint_tables(const Entry& e, const Record& described, Output& out);
/// `compare`'s table: the models side by side against `base`, a column per context (and per
/// context the sequences that fit, with a GPU).
std::vector<ColumnRef> compare_columns(const Entry& base);
/// The lines under `compare`'s table: the deployment, and each model's headline against `base`.
std::vector<std::string> compare_notes(const std::vector<Entry>& entries, const Entry& base);
/// The flat CSV of both: one row per model and context (joined on "contexts").
std::vector<ColumnRef> flat_columns(bool baseline, bool paged);
/// A blank line, then the model's derivation (--explain), after the tables.
void explain_lines(const Entry& e, Output& out);

} // namespace kvcalc::cli
