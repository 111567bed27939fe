#pragma once
// Options and entry points of each command; app.cpp binds them to CLI11.

#include <iosfwd>
#include <string>
#include <vector>

#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/report/json.hpp>
#include <kvcalc/report/table.hpp>
#include <kvcalc/roofline/roofline.hpp>

namespace kvcalc::cli {

enum class Format { table, md, json, csv };

struct OutputOptions {
  std::string format = "table";
  std::string units = "iec";
  std::string file; ///< -o; empty: stdout
};

struct CacheOptions {
  std::string kv_dtype;       ///< empty: the model's dtype
  std::string kv_scale;       ///< empty: the dtype's default
  std::string kv_scale_dtype; ///< empty: the dtype's default
  std::string mla_cache = "latent";
  std::string mamba_cache_dtype;     ///< empty or auto: the engine's rule
  std::string mamba_ssm_cache_dtype; ///< empty or auto: the engine's rule
  std::string block_size;            ///< empty: no paging
};

/// Where and how a model is served: GPU, parallelism, engine and its budget knobs.
struct DeploymentOptions {
  std::vector<std::string> gpus{"h100-sxm"}; ///< --gpu, a list for sweeps
  bool gpu_given = false; ///< --gpu on the command line; else a device profile's own device
  std::string gpu_file;
  std::string gpu_count;   ///< --gpus; empty: tp × pp
  std::vector<u64> tps{1}; ///< --tp, a list for sweeps
  u64 pp = 1;
  u64 ep = 0;
  u64 dcp = 1;
  bool dp_attention = false;
  std::string engine = "plain";
  std::string gpu_memory_utilization;   ///< vLLM
  std::string mem_fraction_static;      ///< SGLang
  std::string free_gpu_memory_fraction; ///< TensorRT-LLM
  std::string max_batched_tokens;
  std::string max_seqs;
  std::string reserve;
  std::string non_kv_memory;
  std::string kv_cache_memory;
  std::string mamba_cache_mode = "none"; ///< vLLM
  std::string weight_dtype;
  bool mtp = false;
};

struct FootprintArgs {
  std::vector<std::string> models;
  std::string contexts = "4k,32k,128k";
  std::string baseline;         ///< compare only; empty: the first model
  DeploymentOptions deployment; ///< compare only: with a --gpu, max sequences per model
  bool explain = false;
  CacheOptions cache;
  OutputOptions output;
};

struct CapacityArgs {
  std::vector<std::string> models;
  std::string contexts; ///< empty: 4k,32k,128k unless --max-context-at is given
  std::string max_context_at;
  bool explain = false;
  std::string device_profile; ///< measured ceilings: adds the decode step at full load
  CacheOptions cache;
  DeploymentOptions deployment;
  OutputOptions output;
};

struct RooflineArgs {
  std::vector<std::string> models;
  std::string batches = "1";   ///< list or range a-b (powers of two)
  std::string contexts = "4k"; ///< cached tokens (decode), prompt (prefill), prefix (extend)
  std::string prompt;          ///< prefill: the prompt, same as --context
  std::string phase = "decode";
  std::string query = "1"; ///< decode: tokens per request per step; extend: chunk
  std::vector<std::string> mla{"auto"};
  std::string naive_kv = "fused";
  std::string efficiency;     ///< "bw=0.85,flops=0.7"
  std::string device_profile; ///< measured ceilings (docs/device-profile.md)
  bool measure = false;       ///< measure this machine first and use its ceilings
  bool no_communication = false;
  bool mla_crossover = false;
  bool ops = false; ///< print every op of every scenario
  std::string plot; ///< SVG file
  CacheOptions cache;
  DeploymentOptions deployment;
  OutputOptions output;
};

struct SimulateArgs {
  std::vector<std::string> models;
  std::string workload; ///< workload YAML (docs/simulate.md)
  std::string trace;    ///< CSV or JSONL requests
  std::string arrival;  ///< overrides the workload's; empty: poisson
  std::string rates;    ///< requests per second, a list sweeps
  std::string prompt;   ///< length distribution
  std::string output_tokens;
  std::string duration;
  std::string requests;
  std::string seed;
  std::string preemption = "recompute";
  std::string swap_bandwidth = "25GB"; ///< bytes per second, one GPU's host link
  bool no_prefix_sharing = false;
  std::string mla = "auto";
  std::string efficiency;
  std::string device_profile;
  std::string timeline;  ///< per-step CSV file
  std::string plot;      ///< SVG file
  bool tp_given = false; ///< --tp on the command line (else tp = gpus / pp)
  CacheOptions cache;
  DeploymentOptions deployment;
  OutputOptions output;
};

struct MeasureArgs {
  std::string backend = "auto";
  std::string profile; ///< --out: the device profile YAML
  std::string heads;   ///< empty: the defaults (1,16; quick 1,8)
  std::string batch;
  std::string context;
  std::string query = "1";
  bool quick = false;
  OutputOptions output;
};

struct PlanArgs {
  std::string file;
  std::string report; ///< markdown report file
  std::string json;   ///< JSON result file
  OutputOptions output;
};

struct GpusArgs {
  std::string gpu_file;
  OutputOptions output;
};

struct ModelsArgs {
  OutputOptions output;
};

struct ImportArgs {
  std::string config;
  std::string name; ///< overrides the registry name derived from the config
  std::string file; ///< -o; empty: stdout
};

/// What a command produced: human tables, the JSON document, and the flat CSV table.
struct Rendered {
  std::vector<Table> tables;
  Json json;
  Table csv;
  std::vector<std::string> text_after; ///< plain lines after the tables (--explain), for people
};

void emit(const Rendered& result, const OutputOptions& options, std::ostream& out);
/// {"fp32": …, "tf32": …, …}: every dtype, null where unset.
Json peak_flops_json(const PeakFlops& flops);
/// ["a", "b"]
Json string_array(const std::vector<std::string>& items);
/// Writes `text` to `path`; an unwritable path is an Error naming it.
void write_text_file(const std::string& path, const std::string& text);
/// Short label for a context: "128k" when a whole number of k, "1M", else the grouped count.
std::string context_label(u64 tokens);

/// "gqa-8", "mla dsa", "hybrid gqa-2 + gated_deltanet", "ssm mamba2": a model's attention and
/// state in a few words.
std::string attention_detail(const Model& m);
/// "bw=0.85,flops=0.7" → bandwidth and FLOP/s efficiencies (1 when unset).
std::pair<double, double> parse_efficiency(const std::string& text);
/// Prints warnings as "kvcalc: warning: ..." lines, each once.
void warn(std::ostream& err, const std::vector<std::string>& warnings);
/// {"kvcalc": {"version", "schema"}, "command": name}
Json json_header(const std::string& command);

int run_footprint(const FootprintArgs& args, bool compare, std::ostream& out, std::ostream& err);
/// The devices of a deployment: each --gpu from the catalog, `auto` the device `profile`
/// measured, and without --gpu, that device when there is a profile (docs/device-profile.md).
/// A profile set on a GPU it did not measure gets a warning. `how_to_measure` ends the error
/// of `auto` without a profile.
std::vector<Gpu> deployment_devices(const DeploymentOptions& d,
                                    const std::optional<DeviceProfile>& profile,
                                    const GpuCatalog& catalog, const std::string& how_to_measure,
                                    Diagnostics& diagnostics);
/// One capacity request per model × device × tp of the options.
std::vector<CapacityRequest>
capacity_requests(const std::vector<Model>& models, const CacheOptions& cache,
                  const DeploymentOptions& d, const std::vector<Gpu>& devices,
                  std::vector<u64> contexts, std::optional<u64> max_context_at);
int run_capacity(const CapacityArgs& args, std::ostream& out, std::ostream& err);
int run_roofline(const RooflineArgs& args, std::ostream& out, std::ostream& err);
int run_simulate(const SimulateArgs& args, std::ostream& out, std::ostream& err);
int run_measure_command(const MeasureArgs& args, std::ostream& out, std::ostream& err);
int run_plan(const PlanArgs& args, std::ostream& out, std::ostream& err);
int run_gpus(const GpusArgs& args, std::ostream& out, std::ostream& err);
/// The cache request of the cache options (shared by footprint, compare, capacity).
CacheRequest cache_request(const CacheOptions& options);
int run_models(const ModelsArgs& args, std::ostream& out, std::ostream& err);
int run_import(const ImportArgs& args, std::ostream& out, std::ostream& err);

} // namespace kvcalc::cli
