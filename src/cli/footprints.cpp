// The footprints of `footprint` and `compare`: models loaded with their exact KV bytes, and one
// description of each that their JSON, tables and flat CSV show.

#include "footprints.hpp"

#include <kvcalc/core/units.hpp>

namespace kvcalc::cli {

namespace {

double ratio(u64 a, u64 b) {
  return static_cast<double>(a) / static_cast<double>(b);
}

void describe_group(Record& r, const CacheGroup& g) {
  const CacheSpec& spec = g.spec;
  bool windowed = spec.kind == CacheKind::sliding || spec.kind == CacheKind::chunked;
  bool state = spec.kind == CacheKind::state;
  r.value("type", "layers", Cell::text(g.name));
  r.value("layers", "count", Cell::count(g.layers));
  r.value("window", "window", windowed ? Cell::count(spec.window) : Cell::empty());
  r.value("kv_bytes_per_token_per_layer", "KV/token/layer",
          Cell::bytes_exact(spec.bytes_per_token).shown_as(state ? "-" : ""));
  r.value("kv_bytes_per_token", "KV/token",
          state ? Cell::empty() : Cell::bytes_exact(spec.bytes_per_token * g.layers),
          k_tables_only);
  r.value("state_bytes_per_layer", Cell::bytes_exact(spec.state_bytes));
  r.value("state_bytes_per_sequence", "state/sequence",
          state ? Cell::bytes_exact(spec.state_bytes * g.layers) : Cell::empty(), k_tables_only);
  if (state) {
    r.value("state_kind", Cell::text(std::string(k_state_kinds.name(spec.state_kind))));
    auto& tensors = r.list("state");
    for (const auto& t : spec.state) {
      Record& tensor = tensors.emplace_back();
      tensor.value("name", Cell::text(t.name));
      std::vector<Cell> shape;
      for (u64 axis : t.shape) {
        shape.push_back(Cell::count(axis));
      }
      tensor.values("shape", std::move(shape));
      tensor.value("dtype", Cell::text(std::string(dtype_name(t.dtype))));
      tensor.value("bytes", Cell::bytes_exact(t.bytes()));
    }
  }
}

/// A row of the layer table that no group is: layers reading another's cache, layers without a
/// token mixer, and the total.
Record layer_row(const std::string& type, u64 layers, u64 per_token, u64 state) {
  Record r;
  r.value("type", Cell::text(type));
  r.value("layers", Cell::count(layers));
  r.value("kv_bytes_per_token", Cell::bytes_exact(per_token));
  r.value("state_bytes_per_sequence", state ? Cell::bytes_exact(state) : Cell::empty());
  return r;
}

/// How `value` compares with `reference` in words: "as much", "2.00x less", "1.50x more".
std::string factor(u64 value, u64 reference) {
  if (value == reference) {
    return "as much";
  }
  if (value < reference) {
    return format_cell(Cell::ratio(ratio(reference, value)), ByteUnits::iec) + " less";
  }
  return format_cell(Cell::ratio(ratio(value, reference)), ByteUnits::iec) + " more";
}

} // namespace

Record describe_footprint(const Entry& e, const Entry* base, bool explain) {
  const Model& m = e.model;
  const Footprint& f = e.footprint;
  Record r;
  r.value("name", "model", Cell::text(m.name));
  r.value("display_name", Cell::text(m.display_name));
  r.value("source", Cell::text(m.source));
  r.value("attention", Cell::text(attention_label(m)));
  r.value("attention_detail", "attention", Cell::text(attention_detail(m)), k_tables_only);
  r.value("attention_kind", Cell::text(std::string(attention_kind_name(m.attention.kind))));
  r.value("layers", "layers", Cell::count(m.layers));
  Record& cache = r.object("kv_cache");
  cache.value("dtype", Cell::text(std::string(dtype_name(f.format.dtype))));
  cache.value("scale", Cell::text(scale_name(f.format.scale)));
  if (f.format.scale.granularity != ScaleGranularity::none) {
    cache.value("scale_dtype", Cell::text(std::string(dtype_name(f.format.scale.dtype))));
  }
  cache.value("mla_format", f.format.mla
                                ? Cell::text(std::string(mla_format_name(f.format.mla_format)))
                                : Cell::empty());
  r.value("kv_dtype", "KV cache", Cell::text(describe(f.format)), k_tables_only);
  r.value("kv_bytes_per_token_per_layer", "KV/token/layer",
          Cell::bytes_exact(f.bytes_per_token_per_layer));
  if (base) {
    r.value(
        "layer_change", "vs base/layer",
        Cell::percent(
            ratio(f.bytes_per_token_per_layer, base->footprint.bytes_per_token_per_layer) - 1.0),
        k_tables_only);
  }
  r.value("kv_bytes_per_token", "KV/token", Cell::bytes_exact(f.bytes_per_token));
  if (base) {
    r.value("token_change", "vs base/token",
            Cell::percent(ratio(f.bytes_per_token, base->footprint.bytes_per_token) - 1.0),
            k_tables_only);
  }
  r.value("state_bytes_per_sequence", Cell::bytes_exact(f.state_bytes_per_sequence));
  auto& groups = r.list("layer_groups");
  for (const auto& g : f.groups) {
    describe_group(groups.emplace_back(), g);
  }
  r.value("block_size", f.block_size ? Cell::count(f.block_size) : Cell::empty());
  auto& contexts = r.list("contexts");
  for (const auto& c : f.contexts) {
    Record& x = contexts.emplace_back();
    x.value("context", "context", Cell::tokens(c.tokens), k_tables_only);
    x.value("tokens", "tokens", Cell::count(c.tokens));
    x.value("kv_bytes", "KV bytes", Cell::count(c.kv_bytes));
    x.value("kv", "KV", Cell::bytes(c.kv_bytes), k_tables_only);
    if (f.block_size) {
      x.value("paged_kv_bytes", "paged KV (block " + group_digits(f.block_size) + ")",
              Cell::bytes(c.paged_kv_bytes));
      x.value("paging_waste_bytes", "waste", Cell::bytes(c.paged_kv_bytes - c.kv_bytes));
    }
    if (base) { // compare's columns, one per context
      r.value("kv@" + std::to_string(c.tokens), "KV @ " + context_label(c.tokens),
              Cell::bytes(c.kv_bytes), k_tables_only);
    }
  }
  if (base) {
    Record& ratios = r.object("ratio_to_baseline");
    ratios.value("per_layer", Cell::ratio(ratio(f.bytes_per_token_per_layer,
                                                base->footprint.bytes_per_token_per_layer)));
    ratios.value("per_token",
                 Cell::ratio(ratio(f.bytes_per_token, base->footprint.bytes_per_token)));
  }
  if (e.capacity) {
    const CapacityResult& c = *e.capacity;
    Record& cj = r.object("capacity");
    cj.value("gpu", Cell::text(c.gpu));
    cj.value("gpus", Cell::count(c.parallel.gpus));
    cj.value("tp", Cell::count(c.parallel.tp));
    cj.value("engine", Cell::text(std::string(engine_name(c.engine))));
    cj.value("fits", Cell::flag(c.fits));
    cj.value("kv_pool_bytes_per_gpu", Cell::bytes(c.kv_pool_bytes_per_gpu));
    cj.value("kv_tokens", Cell::count(c.kv_tokens));
    cj.value("max_model_len", c.max_model_len ? Cell::count(c.max_model_len) : Cell::empty());
    cj.value("longest_request",
             c.longest_request ? Cell::count(*c.longest_request) : Cell::empty());
    auto& at = cj.list("contexts");
    for (const auto& x : c.contexts) {
      Record& one = at.emplace_back();
      one.value("tokens", Cell::count(x.tokens));
      one.value("max_sequences", Cell::count(x.max_sequences));
      one.value("max_concurrency", Cell::concurrency(x.max_concurrency));
      Cell seqs = Cell::count(x.max_sequences);
      r.value("seqs@" + std::to_string(x.tokens), "seqs @ " + context_label(x.tokens),
              c.fits ? seqs : seqs.shown_as("no fit"), k_tables_only);
    }
  }
  if (explain) {
    r.strings("derivation", render_derivation(f.derivation));
  }
  return r;
}

void footprint_tables(const Entry& e, const Record& described, Output& out) {
  const Model& m = e.model;
  const Footprint& f = e.footprint;
  bool windowed = false;
  bool state = false;
  u64 stored = 0;
  u64 shared = 0;
  for (const auto& g : f.groups) {
    windowed = windowed || g.spec.window > 0;
    state = state || g.spec.kind == CacheKind::state;
    stored += g.spec.kind == CacheKind::indexer ? 0 : g.layers; // beside its layers' own cache
    shared += g.shared_layers;
  }
  std::vector<const Record*> rows;
  for (const Record& g : described.records("layer_groups")) {
    rows.push_back(&g);
  }
  // Layers that store nothing, and the total where there is more than one row.
  std::vector<Record> extra;
  if (shared > 0) {
    extra.push_back(layer_row("shared", shared, 0, 0));
  }
  if (m.layers > stored + shared) {
    extra.push_back(layer_row("none", m.layers - stored - shared, 0, 0));
  }
  if (rows.size() + extra.size() > 1) {
    extra.push_back(layer_row("total", m.layers, f.bytes_per_token, f.state_bytes_per_sequence));
  }
  for (const Record& x : extra) {
    rows.push_back(&x);
  }
  std::vector<ColumnRef> columns{{"type"}, {"layers"}};
  if (windowed) {
    columns.push_back({"window"});
  }
  columns.push_back({"kv_bytes_per_token_per_layer"});
  columns.push_back({"kv_bytes_per_token"});
  if (state) {
    columns.push_back({"state_bytes_per_sequence"});
  }
  out.table(m.display_name + " (" + m.name + "): " + attention_detail(m) + ", " +
                group_digits(m.layers) + " layers, KV cache " + describe(f.format),
            rows, columns);

  columns = {{"context"}, {"tokens"}, {"kv_bytes"}, {"kv"}};
  if (f.block_size) {
    columns.push_back({"paged_kv_bytes"});
    columns.push_back({"paging_waste_bytes"});
  }
  std::vector<const Record*> contexts;
  for (const Record& c : described.records("contexts")) {
    contexts.push_back(&c);
  }
  out.table("", contexts, columns);
}

std::vector<ColumnRef> flat_columns(bool baseline, bool paged) {
  std::vector<ColumnRef> columns{{"name"},
                                 {"attention"},
                                 {"layers"},
                                 {"kv_dtype"},
                                 {"kv_bytes_per_token_per_layer"},
                                 {"kv_bytes_per_token"},
                                 {"state_bytes_per_sequence"}};
  if (baseline) {
    columns.push_back({"ratio_to_baseline.per_token", "", "ratio_to_baseline"});
  }
  columns.push_back({"tokens"});
  columns.push_back({"kv_bytes"});
  if (paged) {
    columns.push_back({"paged_kv_bytes"});
  }
  return columns;
}

std::vector<ColumnRef> compare_columns(const Entry& base) {
  std::vector<ColumnRef> columns{{"name"},
                                 {"attention_detail"},
                                 {"layers"},
                                 {"kv_dtype"},
                                 {"kv_bytes_per_token_per_layer"},
                                 {"layer_change"},
                                 {"kv_bytes_per_token"},
                                 {"token_change"}};
  for (const auto& c : base.footprint.contexts) {
    columns.push_back({"kv@" + std::to_string(c.tokens)});
  }
  if (base.capacity) {
    for (const auto& c : base.footprint.contexts) {
      columns.push_back({"seqs@" + std::to_string(c.tokens)});
    }
  }
  return columns;
}

std::vector<std::string> compare_notes(const std::vector<Entry>& entries, const Entry& base) {
  std::vector<std::string> notes;
  if (base.capacity) {
    const CapacityResult& c = *base.capacity;
    notes.push_back("max sequences on " + group_digits(c.parallel.gpus) + " × " + c.gpu + ", tp " +
                    group_digits(c.parallel.tp) + ", engine " + std::string(engine_name(c.engine)) +
                    " (kvcalc capacity for the budget of each)");
  }
  // The headline compares what each model holds at the table's longest context, windows and
  // states included; the per-layer and full per-token rates follow.
  std::size_t longest = 0;
  for (std::size_t i = 0; i < base.footprint.contexts.size(); ++i) {
    if (base.footprint.contexts[i].tokens > base.footprint.contexts[longest].tokens) {
      longest = i;
    }
  }
  for (const auto& e : entries) {
    if (&e == &base || e.footprint.contexts.empty()) {
      continue;
    }
    const ContextFootprint& mine = e.footprint.contexts[longest];
    const ContextFootprint& theirs = base.footprint.contexts[longest];
    if (mine.kv_bytes == 0 || theirs.kv_bytes == 0) {
      continue;
    }
    std::string line = e.model.name + " holds " + factor(mine.kv_bytes, theirs.kv_bytes) +
                       (mine.kv_bytes == theirs.kv_bytes ? " as " : " than ") + base.model.name +
                       " at " + context_label(mine.tokens);
    std::vector<std::string> rates;
    const u64 layer = e.footprint.bytes_per_token_per_layer;
    const u64 base_layer = base.footprint.bytes_per_token_per_layer;
    if (layer > 0 && base_layer > 0) {
      rates.push_back("per layer " + factor(layer, base_layer));
    }
    if (e.footprint.bytes_per_token > 0 && base.footprint.bytes_per_token > 0) {
      rates.push_back("per token at the full rate " +
                      factor(e.footprint.bytes_per_token, base.footprint.bytes_per_token));
    }
    for (std::size_t i = 0; i < rates.size(); ++i) {
      line += (i == 0 ? "; " : ", ") + rates[i];
    }
    notes.push_back(line);
  }
  return notes;
}

std::vector<Entry> footprint_entries(const std::vector<std::string>& specs,
                                     const FootprintOptions& options,
                                     std::vector<std::string>& warnings) {
  std::vector<Entry> entries;
  bool any_mla = false;
  for (Model& m : load_models(specs, warnings)) {
    any_mla = any_mla || m.attention.kind == AttentionKind::mla;
    Footprint f = compute_footprint(m, options);
    warnings.insert(warnings.end(), f.notes.begin(), f.notes.end());
    entries.push_back({std::move(m), std::move(f), std::nullopt});
  }
  if (!any_mla && options.cache.mla_format != MlaCacheFormat::latent) {
    warnings.push_back("--mla-cache applies only to MLA models; none was given");
  }
  return entries;
}

void explain_lines(const Entry& e, Output& out) {
  out.text_after("");
  for (std::string& line : render_derivation(e.footprint.derivation)) {
    out.text_after(std::move(line));
  }
}

void add_footprint_options(const Options& cmd, std::vector<u64>& contexts, CacheRequest& cache,
                           std::optional<u64>& block_size) {
  add_counts(cmd, "--context", contexts,
             "Context lengths in tokens, comma-separated: 4096, 4k (= 4,096), 128k (= 131,072), "
             "1M (= 1,048,576) [default: 4k,32k,128k]")
      .type_name("TOKENS,...")
      .group(k_group_model);
  add_cache_options(cmd, cache);
  add_count(cmd, "--block-size", block_size,
            "Page size in tokens: round each layer's tokens up to whole blocks and report the "
            "waste [default: no paging]")
      .type_name("TOKENS")
      .group(k_group_model);
}

void add_explain_option(const Options& cmd, bool& explain) {
  cmd.flag("--explain", explain, "Print the derivation of every number, term by term")
      .group(k_group_output);
}

} // namespace kvcalc::cli
