#include <kvcalc/cli/app.hpp>

#include <ostream>

#include <CLI/CLI.hpp>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/version.hpp>

#include "commands.hpp"
#include "generated_docs.hpp"

namespace kvcalc {

namespace {

void add_output_options(CLI::App* cmd, cli::OutputOptions& o, bool long_name = true) {
  cmd->add_option("--format", o.format, "Output format: table, md, json or csv")
      ->check(CLI::IsMember({"table", "md", "json", "csv"}))
      ->capture_default_str();
  cmd->add_option("--units", o.units,
                  "Byte units for people: iec (KiB, MiB, GiB: powers of 1024) or si (kB, MB, "
                  "GB: powers of 1000); JSON and CSV always carry exact bytes")
      ->check(CLI::IsMember({"iec", "si"}))
      ->capture_default_str();
  cmd->add_option(long_name ? "-o,--output" : "-o", o.file,
                  "Write the output to FILE instead of stdout")
      ->type_name("FILE");
}

void add_cache_options(CLI::App* cmd, cli::CacheOptions& c) {
  cmd->add_option("--kv-dtype", c.kv_dtype,
                  "KV cache element type: fp32, fp16, bf16, fp8 (= fp8_e4m3), fp8_e5m2, int8, "
                  "int4, nvfp4 [default: the model's dtype]")
      ->type_name("DTYPE");
  cmd->add_option("--kv-scale", c.kv_scale,
                  "Scale metadata of a quantized cache: none, tensor (one per layer: no bytes "
                  "per token), token-head (one per token per head), group:G (one per G "
                  "elements) [default: fp8 tensor, int8 token-head, int4 group:32, nvfp4 "
                  "group:16]")
      ->type_name("SCALE");
  cmd->add_option("--kv-scale-dtype", c.kv_scale_dtype,
                  "Type of each scale: fp32, fp16, bf16, fp8_e4m3 [default: fp32; int4 fp16; "
                  "nvfp4 fp8_e4m3]")
      ->type_name("DTYPE");
  cmd->add_option("--mla-cache", c.mla_cache,
                  "MLA cache layout: latent (d_c + d_R per token per layer), expanded (per-head "
                  "K and V, as HF eager code), fp8_ds_mla (656 B per token per layer at "
                  "DeepSeek dims)")
      ->check(CLI::IsMember({"latent", "expanded", "fp8_ds_mla"}))
      ->capture_default_str();
  cmd->add_option("--mamba-cache-dtype", c.mamba_cache_dtype,
                  "Recurrent layers' state (vLLM --mamba-cache-dtype): fp32, fp16, bf16 or auto "
                  "[default: auto: the model's own, else the engine's rule: vLLM and plain the "
                  "model dtype, SGLang conv bf16 and SSM fp32]")
      ->type_name("DTYPE");
  cmd->add_option("--mamba-ssm-cache-dtype", c.mamba_ssm_cache_dtype,
                  "The SSM / recurrent part of that state alone (vLLM --mamba-ssm-cache-dtype): "
                  "fp32, fp16, bf16 or auto [default: auto, as --mamba-cache-dtype]")
      ->type_name("DTYPE");
}

void add_footprint_options(CLI::App* cmd, cli::FootprintArgs& a) {
  cmd->add_option("--context", a.contexts,
                  "Context lengths in tokens, comma-separated: 4096, 4k (= 4,096), 128k "
                  "(= 131,072), 1M (= 1,048,576)")
      ->type_name("TOKENS,...")
      ->capture_default_str();
  add_cache_options(cmd, a.cache);
  cmd->add_option("--block-size", a.cache.block_size,
                  "Page size in tokens: round each layer's tokens up to whole blocks and report "
                  "the waste [default: no paging]")
      ->type_name("TOKENS");
  cmd->add_flag("--explain", a.explain, "Print the derivation of every number, term by term");
  add_output_options(cmd, a.output);
}

/// `measured`: the command takes a --device-profile, so `--gpu auto` (its device) applies.
void add_deployment_options(CLI::App* cmd, cli::DeploymentOptions& d, bool measured = true) {
  std::string gpu_help = "GPU from the catalog (`kvcalc gpus`), any case, aliases accepted; a "
                         "comma-separated list sweeps";
  if (measured) {
    gpu_help += "; `auto`: the device a --device-profile measured, which is also the default "
                "when a profile is given";
  }
  cmd->add_option("--gpu", d.gpus, gpu_help)
      ->delimiter(',')
      ->type_name("GPU,...")
      ->capture_default_str();
  cmd->add_option("--gpu-file", d.gpu_file,
                  "A GPU catalog YAML of your own, added to the bundled one "
                  "(docs/gpu-catalog.md)")
      ->type_name("FILE");
  cmd->add_option("--gpus", d.gpu_count,
                  "GPUs in the deployment: model copies = gpus / (tp × pp) [default: tp × pp]")
      ->type_name("N");
  cmd->add_option("--tp", d.tps, "Tensor parallel size; a comma-separated list sweeps")
      ->delimiter(',')
      ->type_name("N,...")
      ->capture_default_str();
  cmd->add_option("--pp", d.pp, "Pipeline parallel size: layers split over stages")
      ->capture_default_str();
  cmd->add_option("--ep", d.ep,
                  "Expert parallel size: routed experts split over this many GPUs "
                  "[default: tp]");
  cmd->add_option("--dcp", d.dcp,
                  "Decode context parallel (MLA): each of dcp TP ranks holds 1/dcp of every "
                  "sequence's latent cache instead of a full copy")
      ->capture_default_str();
  cmd->add_flag("--dp-attention", d.dp_attention,
                "Attention data parallel over the tp ranks (SGLang --enable-dp-attention): each "
                "rank holds its own sequences, attention weights are replicated");
  cmd->add_option("--engine", d.engine,
                  "Budget rules: plain (usable memory − weights − reserve), vllm, sglang, trtllm")
      ->check(CLI::IsMember({"plain", "vllm", "sglang", "trtllm"}))
      ->capture_default_str();
  cmd->add_option("--gpu-memory-utilization", d.gpu_memory_utilization,
                  "vLLM: fraction of total GPU memory it may use [default: 0.9]")
      ->type_name("FRACTION");
  cmd->add_option("--mem-fraction-static", d.mem_fraction_static,
                  "SGLang: fraction for weights and KV pool [default: SGLang's rule from GPU "
                  "memory and tp]")
      ->type_name("FRACTION");
  cmd->add_option("--free-gpu-memory-fraction", d.free_gpu_memory_fraction,
                  "TensorRT-LLM: fraction of the memory left after weights and activations "
                  "[default: 0.9]")
      ->type_name("FRACTION");
  cmd->add_option("--max-batched-tokens", d.max_batched_tokens,
                  "Tokens per scheduler step (sizes the activation reserve and vLLM's sliding "
                  "window blocks) [default: the engine's]")
      ->type_name("TOKENS");
  cmd->add_option("--max-seqs", d.max_seqs,
                  "Sequences per step (sizes the logits reserve) [default: the engine's]")
      ->type_name("N");
  cmd->add_option("--reserve", d.reserve,
                  "Activation/workspace memory per GPU besides weights, e.g. 2GiB [default: "
                  "kvcalc's estimate]")
      ->type_name("BYTES");
  cmd->add_option("--non-kv-memory", d.non_kv_memory,
                  "All non-KV memory per GPU as the engine measured it (weights included), e.g. "
                  "18.4GiB")
      ->type_name("BYTES");
  cmd->add_option("--kv-cache-memory", d.kv_cache_memory,
                  "The KV pool per GPU as the engine reported it, e.g. 3.81GiB (vLLM "
                  "'Available KV cache memory')")
      ->type_name("BYTES");
  cmd->add_option("--mamba-cache-mode", d.mamba_cache_mode,
                  "vLLM, hybrid models: state blocks per sequence, none (one, prefix caching off) "
                  "or align (two: the running state and the last block-aligned one)")
      ->check(CLI::IsMember({"none", "align"}))
      ->capture_default_str();
  cmd->add_option("--weight-dtype", d.weight_dtype,
                  "Weight storage: bf16, fp16, fp8 (128x128 block scales), int8, int4, nvfp4, "
                  "mxfp4 [default: the model's checkpoint]")
      ->type_name("DTYPE");
  cmd->add_flag("--mtp", d.mtp,
                "Load the multi-token-prediction module (speculative decoding): its weights and "
                "its layer's KV cache");
}

} // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"kvcalc: KV-cache footprint, engine capacity, roofline, serving simulation and "
               "measured ceilings for LLM attention (MHA, MQA, GQA, MLA, sliding-window and "
               "hybrid layers)",
               "kvcalc"};
  app.set_version_flag(
      "--version", std::string("kvcalc ") + std::string(version()) +
                       " (CUDA support: " + (built_with_cuda() ? "built in" : "not built") + ")");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 error, 2 bad input or usage, 3 a plan requirement failed.\n"
             "MODEL is a bundled name (`kvcalc models`), a kvcalc YAML file, or a HuggingFace "
             "config.json.");

  cli::FootprintArgs footprint;
  auto* footprint_cmd = app.add_subcommand(
      "footprint", "KV bytes per token, per layer kind and at each context length");
  footprint_cmd->add_option("model", footprint.models, "MODEL: name, kvcalc YAML or config.json")
      ->type_name("MODEL")
      ->required();
  add_footprint_options(footprint_cmd, footprint);

  cli::FootprintArgs compare;
  auto* compare_cmd = app.add_subcommand(
      "compare", "Models side by side: KV per token and per layer, ratio to a baseline");
  compare_cmd->add_option("models", compare.models, "MODEL names, YAML files or config.json")
      ->type_name("MODEL")
      ->required();
  compare_cmd
      ->add_option("--baseline", compare.baseline,
                   "The model ratios are taken against [default: the first]")
      ->type_name("MODEL");
  add_footprint_options(compare_cmd, compare);
  compare.deployment.gpus.clear();
  add_deployment_options(compare_cmd, compare.deployment, false);

  cli::CapacityArgs capacity;
  auto* capacity_cmd = app.add_subcommand(
      "capacity", "Sequences that fit per GPU and deployment, with engine-exact budgets");
  capacity_cmd->add_option("models", capacity.models, "MODEL names, YAML files or config.json")
      ->type_name("MODEL")
      ->required();
  capacity_cmd
      ->add_option("--context", capacity.contexts,
                   "Context lengths in tokens, comma-separated: 4096, 4k, 128k, 1M [default: "
                   "4k,32k,128k]")
      ->type_name("TOKENS,...");
  capacity_cmd
      ->add_option("--max-context-at", capacity.max_context_at,
                   "Also find the longest context at which this many sequences fit")
      ->type_name("N");
  capacity_cmd
      ->add_option("--block-size", capacity.cache.block_size,
                   "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on "
                   "Blackwell), TensorRT-LLM 32, SGLang 1, plain none]")
      ->type_name("TOKENS");
  capacity_cmd->add_flag("--explain", capacity.explain, "Print the budget, step by step");
  capacity_cmd
      ->add_option("--device-profile", capacity.device_profile,
                   "Measured ceilings (kvcalc measure --out): adds the decode step time and "
                   "tokens/s with every sequence that fits running (docs/device-profile.md)")
      ->type_name("FILE");
  add_cache_options(capacity_cmd, capacity.cache);
  add_deployment_options(capacity_cmd, capacity.deployment);
  add_output_options(capacity_cmd, capacity.output);

  cli::RooflineArgs roofline;
  auto* roofline_cmd = app.add_subcommand(
      "roofline",
      "One prefill or decode step, op by op, on a GPU's roofline (MLA absorbed vs naive)");
  roofline_cmd->add_option("models", roofline.models, "MODEL names, YAML files or config.json")
      ->type_name("MODEL")
      ->required();
  roofline_cmd
      ->add_option("--batch", roofline.batches,
                   "Sequences per step: a list (1,16,128) or a range of powers of two (1-256)")
      ->type_name("N,...|A-B")
      ->capture_default_str();
  roofline_cmd
      ->add_option("--context", roofline.contexts,
                   "Tokens: in the cache (decode), the prompt (prefill), the cached prefix "
                   "(extend); a list sweeps")
      ->type_name("TOKENS,...")
      ->capture_default_str();
  roofline_cmd->add_option("--prompt", roofline.prompt, "Prefill: the prompt length (= --context)")
      ->type_name("TOKENS,...");
  roofline_cmd
      ->add_option("--phase", roofline.phase,
                   "decode (s new tokens per request), prefill (a prompt, no prefix) or extend "
                   "(a chunk of s tokens over a cached prefix)")
      ->check(CLI::IsMember({"decode", "prefill", "extend"}))
      ->capture_default_str();
  roofline_cmd
      ->add_option("--query", roofline.query,
                   "s: decode tokens per request per step (2+ for MTP/speculative), or the "
                   "extend chunk")
      ->type_name("TOKENS")
      ->capture_default_str();
  roofline_cmd
      ->add_option("--mla", roofline.mla,
                   "MLA mode: absorbed, naive, auto (absorbed for chunks of ≤ 128 tokens, naive "
                   "for prefill); a comma-separated list compares")
      ->delimiter(',')
      ->check(CLI::IsMember({"absorbed", "naive", "auto"}))
      ->capture_default_str();
  roofline_cmd
      ->add_option("--naive-kv", roofline.naive_kv,
                   "Naive MLA: fused (decompressed K/V stay on chip) or materialized (written "
                   "and read back)")
      ->check(CLI::IsMember({"fused", "materialized"}))
      ->capture_default_str();
  roofline_cmd->add_flag("--mla-crossover", roofline.mla_crossover,
                         "Report where absorbed MLA stops paying: the FLOP and the time "
                         "crossover in chunk length over each --context prefix");
  roofline_cmd
      ->add_option("--efficiency", roofline.efficiency,
                   "Scale the datasheet ceilings: bw=F,flops=F (e.g. bw=0.85,flops=0.7) "
                   "[default: 1, the datasheet]")
      ->type_name("bw=F,flops=F");
  roofline_cmd
      ->add_option("--device-profile", roofline.device_profile,
                   "Measured ceilings (a profile `kvcalc measure` writes) instead of the "
                   "datasheet's")
      ->type_name("FILE");
  roofline_cmd->add_flag("--measure", roofline.measure,
                         "Measure this machine's ceilings first (kvcalc measure's probes) and use "
                         "them; without --gpu (or with --gpu auto) the measured device is the "
                         "device");
  roofline_cmd->add_flag("--no-comm", roofline.no_communication,
                         "Leave out TP all-reduce and EP all-to-all time");
  roofline_cmd->add_flag("--ops", roofline.ops, "Print the op table of every scenario");
  roofline_cmd
      ->add_option("--plot", roofline.plot,
                   "Write an SVG: the roofline with every op, and for a batch sweep "
                   "throughput and time per token against batch")
      ->type_name("FILE.svg");
  add_cache_options(roofline_cmd, roofline.cache);
  add_deployment_options(roofline_cmd, roofline.deployment);
  add_output_options(roofline_cmd, roofline.output);

  cli::SimulateArgs simulate;
  auto* simulate_cmd = app.add_subcommand(
      "simulate", "A serving instance over time: KV occupancy, preemptions, throughput and "
                  "latency on a workload or a trace (docs/simulate.md)");
  simulate_cmd->add_option("models", simulate.models, "MODEL names, YAML files or config.json")
      ->type_name("MODEL")
      ->required();
  simulate_cmd
      ->add_option("--workload", simulate.workload,
                   "Synthetic workload YAML (docs/simulate.md); options below override its keys")
      ->type_name("FILE.yaml");
  simulate_cmd
      ->add_option("--trace", simulate.trace,
                   "Requests to replay: CSV (arrival_s,prompt_tokens,output_tokens[,prefix_id,"
                   "prefix_tokens]) or JSONL with the same keys")
      ->type_name("FILE");
  simulate_cmd
      ->add_option("--arrival", simulate.arrival,
                   "Arrivals: poisson, constant (every 1/rate s) or burst (--requests at t = 0) "
                   "[default: poisson]")
      ->check(CLI::IsMember({"poisson", "constant", "burst"}));
  simulate_cmd
      ->add_option("--rate", simulate.rates,
                   "Requests per second; a comma-separated list sweeps [default: the "
                   "workload's, else 10]")
      ->type_name("R,...");
  simulate_cmd
      ->add_option("--prompt", simulate.prompt,
                   "Prompt tokens: N, uniform:LOW,HIGH, normal:MEAN,STD, lognormal:MEAN,SIGMA "
                   "or cdf:TOKENS=P,...,TOKENS=1 [default: the workload's, else 1024]")
      ->type_name("DIST");
  simulate_cmd
      ->add_option("--output", simulate.output_tokens,
                   "Output tokens, as --prompt [default: the workload's, else 256]")
      ->type_name("DIST");
  simulate_cmd
      ->add_option("--duration", simulate.duration,
                   "Seconds of arrivals; the run then drains what arrived")
      ->type_name("SECONDS");
  simulate_cmd
      ->add_option("--requests", simulate.requests,
                   "At most this many requests [default: 1000 when neither this nor --duration "
                   "nor a workload is given]")
      ->type_name("N");
  simulate_cmd->add_option("--seed", simulate.seed, "Random seed [default: the workload's, else 1]")
      ->type_name("N");
  simulate_cmd
      ->add_option("--preemption", simulate.preemption,
                   "When a sequence needs a block and none is free, the latest-arrived running "
                   "sequence is preempted: recompute (vLLM's default) or swap (to host memory)")
      ->check(CLI::IsMember({"recompute", "swap"}))
      ->capture_default_str();
  simulate_cmd
      ->add_option("--swap-bandwidth", simulate.swap_bandwidth,
                   "Host link of one GPU, one direction, in bytes per second (PCIe 4.0 x16 "
                   "≈ 25GB, 5.0 ≈ 50GB), for --preemption swap")
      ->type_name("BYTES/S")
      ->capture_default_str();
  simulate_cmd->add_flag("--no-prefix-sharing", simulate.no_prefix_sharing,
                         "Compute every prompt in full, shared prefixes included");
  simulate_cmd
      ->add_option("--mla", simulate.mla,
                   "MLA mode of each step: auto (absorbed for decode and chunks of ≤ 128 tokens "
                   "over a prefix, naive for prompts), absorbed or naive")
      ->check(CLI::IsMember({"absorbed", "naive", "auto"}))
      ->capture_default_str();
  simulate_cmd
      ->add_option("--efficiency", simulate.efficiency,
                   "Scale the datasheet ceilings: bw=F,flops=F [default: 1, the datasheet]")
      ->type_name("bw=F,flops=F");
  simulate_cmd
      ->add_option("--device-profile", simulate.device_profile,
                   "Measured ceilings (a profile `kvcalc measure` writes)")
      ->type_name("FILE");
  simulate_cmd
      ->add_option("--timeline", simulate.timeline,
                   "Write every step as CSV: time, running, waiting, tokens, KV blocks")
      ->type_name("FILE.csv");
  simulate_cmd
      ->add_option("--plot", simulate.plot, "Write an SVG of KV occupancy and throughput over time")
      ->type_name("FILE.svg");
  simulate_cmd
      ->add_option("--block-size", simulate.cache.block_size,
                   "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on "
                   "Blackwell), TensorRT-LLM 32, SGLang and plain 1]")
      ->type_name("TOKENS");
  add_cache_options(simulate_cmd, simulate.cache);
  simulate.deployment.engine = "vllm";
  add_deployment_options(simulate_cmd, simulate.deployment);
  simulate_cmd->get_option("--tp")->description(
      "Tensor parallel size; a comma-separated list sweeps [default: --gpus / --pp, else 1]");
  simulate_cmd->get_option("--max-batched-tokens")
      ->description("Tokens per scheduler step (chunked prefill budget) [default: the engine's: "
                    "vLLM 8192 (2048 below 70 GiB or on A100), SGLang by GPU memory, else 8192]");
  simulate_cmd->get_option("--max-seqs")
      ->description("Running sequences at most [default: vLLM 1024 (256 below 70 GiB or on "
                    "A100), else 256]");
  add_output_options(simulate_cmd, simulate.output, false);

  cli::MeasureArgs measure;
  auto* measure_cmd = app.add_subcommand(
      "measure", "Measure this machine: bandwidth and compute probes, MLA decode both ways");
  measure_cmd
      ->add_option("--backend", measure.backend,
                   "auto (cuda when a GPU is present, else cpu), cpu, cuda, or fake (fixed "
                   "figures, for tests)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda", "fake"}))
      ->capture_default_str();
  measure_cmd->add_option("--out", measure.profile, "Write the device profile YAML to FILE")
      ->type_name("FILE");
  measure_cmd
      ->add_option("--heads", measure.heads,
                   "Query heads of the MLA kernels, comma-separated [default: 1,16; --quick 1,8]")
      ->type_name("N,...");
  measure_cmd->add_option("--batch", measure.batch, "Sequences [default: 4; --quick 2]")
      ->type_name("N,...");
  measure_cmd->add_option("--context", measure.context, "Cached tokens [default: 2k; --quick 1k]")
      ->type_name("TOKENS,...");
  measure_cmd->add_option("--query", measure.query, "New tokens per sequence (s)")
      ->type_name("TOKENS")
      ->capture_default_str();
  measure_cmd->add_flag("--quick", measure.quick, "Smaller probes and kernels: a few seconds");
  add_output_options(measure_cmd, measure.output);

  cli::PlanArgs plan;
  auto* plan_cmd = app.add_subcommand(
      "plan", "Check a capacity plan's requirements; exit 3 when any fails (for CI)");
  plan_cmd->add_option("file", plan.file, "Plan YAML (docs/capacity-plans.md)")
      ->type_name("PLAN")
      ->required();
  plan_cmd->add_option("--report", plan.report, "Also write a Markdown report to FILE")
      ->type_name("FILE");
  plan_cmd->add_option("--json", plan.json, "Also write the JSON result to FILE")
      ->type_name("FILE");
  add_output_options(plan_cmd, plan.output);

  cli::GpusArgs gpus;
  auto* gpus_cmd = app.add_subcommand("gpus", "List the GPU catalog");
  gpus_cmd->add_option("--gpu-file", gpus.gpu_file, "Add the GPUs of your own catalog YAML")
      ->type_name("FILE");
  add_output_options(gpus_cmd, gpus.output);

  cli::ModelsArgs models;
  auto* models_cmd = app.add_subcommand("models", "List the bundled models, one line each");
  add_output_options(models_cmd, models.output);

  cli::ImportArgs import;
  auto* import_cmd =
      app.add_subcommand("import", "Convert a HuggingFace config.json into a kvcalc model YAML");
  import_cmd->add_option("config", import.config, "Path to config.json")
      ->type_name("CONFIG")
      ->required();
  import_cmd
      ->add_option("--name", import.name,
                   "Registry name to give the model [default: from _name_or_path or the "
                   "file's folder]")
      ->type_name("NAME");
  import_cmd->add_option("-o,--output", import.file, "Write the YAML to FILE instead of stdout")
      ->type_name("FILE");

  std::string shell;
  std::string generated_file;
  auto* completion_cmd = app.add_subcommand(
      "completion", "Print a shell completion script generated from these options");
  completion_cmd->add_option("shell", shell, "The shell")
      ->check(CLI::IsMember({"bash"}))
      ->required();
  completion_cmd->add_option("-o,--output", generated_file, "Write it to FILE instead of stdout")
      ->type_name("FILE");
  auto* man_cmd =
      app.add_subcommand("man", "Print the man page (roff) generated from these options");
  man_cmd->add_option("-o,--output", generated_file, "Write it to FILE instead of stdout")
      ->type_name("FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e, out, err);
    }
    throw InputError(std::string(e.what()) + " (run 'kvcalc --help' for usage)");
  }

  if (footprint_cmd->parsed()) {
    return cli::run_footprint(footprint, false, out, err);
  }
  if (compare_cmd->parsed()) {
    return cli::run_footprint(compare, true, out, err);
  }
  auto gpu_given = [](CLI::App* cmd) { return cmd->get_option("--gpu")->count() > 0; };
  if (capacity_cmd->parsed()) {
    capacity.deployment.gpu_given = gpu_given(capacity_cmd);
    return cli::run_capacity(capacity, out, err);
  }
  if (roofline_cmd->parsed()) {
    roofline.deployment.gpu_given = gpu_given(roofline_cmd);
    return cli::run_roofline(roofline, out, err);
  }
  if (simulate_cmd->parsed()) {
    simulate.deployment.gpu_given = gpu_given(simulate_cmd);
    simulate.tp_given = simulate_cmd->get_option("--tp")->count() > 0;
    return cli::run_simulate(simulate, out, err);
  }
  if (measure_cmd->parsed()) {
    return cli::run_measure_command(measure, out, err);
  }
  if (plan_cmd->parsed()) {
    return cli::run_plan(plan, out, err);
  }
  if (gpus_cmd->parsed()) {
    return cli::run_gpus(gpus, out, err);
  }
  if (models_cmd->parsed()) {
    return cli::run_models(models, out, err);
  }
  if (completion_cmd->parsed() || man_cmd->parsed()) {
    std::string text = completion_cmd->parsed() ? cli::bash_completion(app) : cli::man_page(app);
    if (generated_file.empty()) {
      out << text;
    } else {
      cli::write_text_file(generated_file, text);
    }
    return 0;
  }
  return cli::run_import(import, out, err);
}

} // namespace kvcalc
