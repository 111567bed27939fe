#pragma once
// The option groups commands share, typed as the command line is read: a command's file adds
// the groups it reads, with its own defaults, and help shows each group under its heading.
// Commands declare options through Options and OptionRef: only options.cpp, app.cpp and
// generated_docs.cpp include CLI11, a header-only library that costs each file including it
// seconds to compile.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/names.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/report/output.hpp>
#include <kvcalc/report/table.hpp>
#include <kvcalc/roofline/roofline.hpp>

namespace CLI {
class App;
class Option;
} // namespace CLI

namespace kvcalc::cli {

// The command layer computes with the model, device and kv modules and describes its results with
// the report module's records, cells and tables.
using namespace kvcalc::device;
using namespace kvcalc::model;
using namespace kvcalc::kv;
using namespace kvcalc::report;

/// Help headings, in the order help lists them.
inline constexpr const char* k_group_model = "Model and cache";
inline constexpr const char* k_group_deployment = "Deployment";
inline constexpr const char* k_group_engine = "Engine budget";
inline constexpr const char* k_group_workload = "Workload";
inline constexpr const char* k_group_ceilings = "Ceilings";
inline constexpr const char* k_group_output = "Output";

inline constexpr NameTable<Format, 4> k_formats{
    "format",
    {{{Format::table, "table"}, {Format::md, "md"}, {Format::json, "json"}, {Format::csv, "csv"}}}};
inline constexpr NameTable<ByteUnits, 2> k_byte_units{
    "byte units", {{{ByteUnits::iec, "iec"}, {ByteUnits::si, "si"}}}};

/// The first long spelling of an option's flags ("-o,--output" → "--output"), for messages.
[[nodiscard]] std::string flag_name(const std::string& flags);

/// The values an option accepts: `check(text)` says why one is refused ("" when it is
/// accepted); `names` is what help, the man page and completion list ("{a,b,c}").
struct Choice {
  std::function<std::string(std::string&)> check;
  std::string names;
};

/// One option of a command, as its file declares it.
class OptionRef {
public:
  explicit OptionRef(CLI::Option* option) : m_option(option) {}
  /// Listed under `heading` in help ("" hides it).
  OptionRef group(const std::string& heading) const;
  /// The value's placeholder in help ("TOKENS,...").
  OptionRef type_name(const std::string& name) const;
  OptionRef required() const;
  OptionRef description(const std::string& help) const;
  /// Splits one value into several at `separator`.
  OptionRef delimiter(char separator) const;
  /// Calls `each` with every value given.
  OptionRef each(std::function<void(const std::string&)> each) const;
  OptionRef check(const Choice& choice) const;

private:
  CLI::Option* m_option;
};

/// A command's options, as its file declares them.
class Options {
public:
  explicit Options(CLI::App* app) : m_app(app) {}
  /// A subcommand of this one, with its one-line help.
  [[nodiscard]] Options subcommand(const std::string& name, const std::string& help) const;
  /// An option (or positional) whose text is kept as given.
  OptionRef option(const std::string& flags, std::string& target, const std::string& help) const;
  OptionRef option(const std::string& flags, std::vector<std::string>& target,
                   const std::string& help) const;
  OptionRef flag(const std::string& flags, bool& target, const std::string& help) const;
  /// An option whose text `apply` takes when the command line is read.
  OptionRef text(const std::string& flags, std::function<void(const std::string&)> apply,
                 const std::string& help) const;
  /// An option of several values (a list) that `apply` takes.
  OptionRef texts(const std::string& flags,
                  std::function<void(const std::vector<std::string>&)> apply,
                  const std::string& help) const;
  /// The option `flags` declared before (by a shared group), to change its help.
  [[nodiscard]] OptionRef find(const std::string& flags) const;
  [[nodiscard]] CLI::App* app() const { return m_app; }

private:
  CLI::App* m_app;
};

/// An option whose text `parse(text, flag)` turns into `target` when the command line is read;
/// `parse` throws an InputError that names the flag.
template <class T, class Parse>
OptionRef add_parsed(const Options& cmd, const std::string& flags, T& target, Parse parse,
                     const std::string& help) {
  std::string flag = flag_name(flags);
  return cmd.text(
      flags, [&target, parse, flag](const std::string& text) { target = parse(text, flag); }, help);
}

/// The values of a choice: the names of `table` in any case, with a did-you-mean for others.
template <class E, std::size_t N> Choice choice_of(const NameTable<E, N>& table) {
  std::string names;
  for (const auto& n : table.names()) {
    names += (names.empty() ? "" : ",") + n;
  }
  return {[&table](std::string& text) {
            return table.find_any_case(text) ? std::string() : table.unknown(text);
          },
          "{" + names + "}"};
}

/// An option naming one value of `table`; help says the default, the current `target`.
template <class E, std::size_t N>
OptionRef add_choice(const Options& cmd, const std::string& flags, E& target,
                     const NameTable<E, N>& table, const std::string& help) {
  std::string text = help + " [default: " + std::string(table.name(target)) + "]";
  return cmd
      .text(
          flags, [&target, &table](const std::string& s) { target = *table.find_any_case(s); },
          text)
      .check(choice_of(table));
}

/// A comma-separated list of values of `table` ("absorbed,naive").
template <class E, std::size_t N>
OptionRef add_choice_list(const Options& cmd, const std::string& flags, std::vector<E>& target,
                          const NameTable<E, N>& table, const std::string& help) {
  std::string defaults;
  for (E e : target) {
    defaults += (defaults.empty() ? "" : ",") + std::string(table.name(e));
  }
  return cmd
      .texts(
          flags,
          [&target, &table](const std::vector<std::string>& items) {
            target.clear();
            for (const auto& s : items) {
              target.push_back(*table.find_any_case(s));
            }
          },
          help + " [default: " + defaults + "]")
      .delimiter(',')
      .check(choice_of(table));
}

/// Where a command's ceilings come from: a profile file, or this machine measured now (and
/// where to keep what was measured).
struct CeilingOptions {
  std::string device_profile;
  bool measure = false;
  std::string save_profile;
};

/// --device-profile (`profile_help` says what the command does with it), --measure and
/// --save-profile.
void add_ceiling_options(const Options& cmd, CeilingOptions& c, const std::string& profile_help);

/// A --plot FILE: kvcalc draws SVG, so a name ending in another image type is refused rather
/// than written as SVG under a misleading name.
void check_plot_path(const std::string& path);

/// A dtype option's text, parsed (aliases and did-you-mean included).
[[nodiscard]] std::optional<DType> dtype_option(const std::string& text, const std::string& flag);

/// A token count ("4k"), a list of them, a byte size ("3.81GiB"), a fraction in [0, 1].
OptionRef add_count(const Options& cmd, const std::string& flags, u64& target,
                    const std::string& help);
OptionRef add_count(const Options& cmd, const std::string& flags, std::optional<u64>& target,
                    const std::string& help);
OptionRef add_counts(const Options& cmd, const std::string& flags, std::vector<u64>& target,
                     const std::string& help);
OptionRef add_bytes(const Options& cmd, const std::string& flags, std::optional<u64>& target,
                    const std::string& help);

/// Where a command's result goes and how it looks.
struct OutputOptions {
  Format format = Format::table;
  ByteUnits units = ByteUnits::iec;
  std::string file; ///< -o; empty: stdout
};
/// Whether a command's tables show bytes scaled for people, which --units chooses.
enum class ScaledBytes { no, yes };
void add_output_options(const Options& cmd, OutputOptions& o, ScaledBytes scaled);

/// The cache format asked for: dtype and scales, MLA layout, recurrent state dtypes.
void add_cache_options(const Options& cmd, CacheRequest& c);

/// GPUs and how a model is split over them.
struct ParallelOptions {
  std::vector<std::string> gpus; ///< --gpu, a list sweeps; `auto`: a profile's device
  bool gpu_given = false;        ///< --gpu on the command line (else a profile's own device)
  std::string gpu_file;
  std::optional<u64> gpu_count;     ///< --gpus; unset: tp × pp
  std::optional<u64> nodes;         ///< --nodes: gpus = nodes × gpus_per_node
  std::optional<u64> gpus_per_node; ///< --gpus-per-node: 8 for --nodes; shapes the domain

  /// GPUs of a node where the options say (a node shapes the scale-up domain); 0: not said.
  [[nodiscard]] u64 node_gpus() const { return gpus_per_node.value_or(0); }
  std::vector<u64> tps{1}; ///< --tp, a list sweeps
  bool tp_given = false;
  u64 pp = 1;
  u64 ep = 0; ///< 0: tp
  u64 dcp = 1;
  bool dp_attention = false;
  u64 dp = 0; ///< --dp: attention data-parallel groups (implies dp_attention)
  u64 redundant_experts = 0;
  std::optional<DType> weight_dtype;
  bool mtp = false;

  /// GPUs of the deployment: --gpus, or --nodes × --gpus-per-node; unset: tp × pp.
  [[nodiscard]] std::optional<u64> deployment_gpus() const;
  /// The tp sweep: --tp, or under --dp-attention without --tp, every GPU of a stage.
  [[nodiscard]] std::vector<u64> tp_sweep() const;

  /// The options of a command whose default --gpu is `gpus` (none: no deployment).
  [[nodiscard]] static ParallelOptions on(std::vector<std::string> gpus) {
    ParallelOptions p;
    p.gpus = std::move(gpus);
    return p;
  }
};

/// The most rows one command's sweep may make (models × GPUs × tp × contexts × ...): 100,000.
/// Beyond, a run takes minutes and its report is more than anyone reads; split the sweep.
inline constexpr u64 k_max_sweep_rows = 100'000;

/// One axis of a sweep, by the option that gives it.
struct SweepAxis {
  std::string_view option;
  std::size_t count;
};

/// An InputError naming every axis when their product exceeds k_max_sweep_rows.
void check_sweep(std::initializer_list<SweepAxis> axes);

/// What a command models: one step on each GPU (the roofline) or a whole deployment, with
/// decode context parallel and the MTP module.
enum class ParallelScope { step, deployment };

/// `measured`: the command takes a --device-profile, so `--gpu auto` (its device) applies.
void add_parallel_options(const Options& cmd, ParallelOptions& p, ParallelScope scope,
                          bool measured);

/// How a step is priced beyond its ops: overlap of communication and the busiest GPU's share of
/// the experts' pairs (`imbalance` as typed, parsed by the command).
void add_step_pricing_options(const Options& cmd, roofline::Overlap& overlap,
                              std::string& imbalance);

/// The engine whose budget rules apply and its knobs.
struct EngineOptions {
  EngineSettings settings;
  std::vector<std::pair<std::string, Engine>> knobs; ///< engine-specific flags given

  /// The options of a command whose default engine is `engine`.
  [[nodiscard]] static EngineOptions of(Engine engine) {
    EngineOptions e;
    e.settings.engine = engine;
    return e;
  }
};
void add_engine_options(const Options& cmd, EngineOptions& e);
/// The engine settings, refusing a knob of another engine or knobs that contradict each other.
[[nodiscard]] EngineSettings engine_settings(const EngineOptions& e, std::optional<u64> block_size);

/// "bw=0.85,flops=0.7" → bandwidth and FLOP/s efficiencies (1 when unset).
struct Efficiency {
  double bandwidth = 1;
  double flops = 1;
  bool given = false;
};
[[nodiscard]] Efficiency parse_efficiency(const std::string& text, const std::string& flag);

} // namespace kvcalc::cli
