#include "options.hpp"

#include <algorithm>

#include <CLI/CLI.hpp>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::cli {

OptionRef OptionRef::group(const std::string& heading) const {
  m_option->group(heading);
  return *this;
}

OptionRef OptionRef::type_name(const std::string& name) const {
  m_option->type_name(name);
  return *this;
}

OptionRef OptionRef::required() const {
  m_option->required();
  return *this;
}

OptionRef OptionRef::description(const std::string& help) const {
  m_option->description(help);
  return *this;
}

OptionRef OptionRef::delimiter(char separator) const {
  m_option->delimiter(separator);
  return *this;
}

OptionRef OptionRef::each(std::function<void(const std::string&)> each) const {
  m_option->each(std::move(each));
  return *this;
}

OptionRef OptionRef::check(const Choice& choice) const {
  m_option->check(CLI::Validator(choice.check, choice.names));
  return *this;
}

Options Options::subcommand(const std::string& name, const std::string& help) const {
  return Options(m_app->add_subcommand(name, help));
}

OptionRef Options::option(const std::string& flags, std::string& target,
                          const std::string& help) const {
  return OptionRef(m_app->add_option(flags, target, help));
}

OptionRef Options::option(const std::string& flags, std::vector<std::string>& target,
                          const std::string& help) const {
  return OptionRef(m_app->add_option(flags, target, help));
}

OptionRef Options::flag(const std::string& flags, bool& target, const std::string& help) const {
  return OptionRef(m_app->add_flag(flags, target, help));
}

OptionRef Options::text(const std::string& flags, std::function<void(const std::string&)> apply,
                        const std::string& help) const {
  return OptionRef(m_app->add_option_function<std::string>(flags, std::move(apply), help));
}

OptionRef Options::texts(const std::string& flags,
                         std::function<void(const std::vector<std::string>&)> apply,
                         const std::string& help) const {
  return OptionRef(
      m_app->add_option_function<std::vector<std::string>>(flags, std::move(apply), help));
}

OptionRef Options::find(const std::string& flags) const {
  return OptionRef(m_app->get_option(flags));
}

std::string flag_name(const std::string& flags) {
  std::size_t start = 0;
  while (start < flags.size()) {
    std::size_t comma = flags.find(',', start);
    std::string name = flags.substr(start, comma - start);
    if (name.starts_with("--") || comma == std::string::npos) {
      return name;
    }
    start = comma + 1;
  }
  return flags;
}

OptionRef add_count(const Options& cmd, const std::string& flags, u64& target,
                    const std::string& help) {
  return add_parsed(cmd, flags, target, parse_count, help).type_name("N");
}

OptionRef add_count(const Options& cmd, const std::string& flags, std::optional<u64>& target,
                    const std::string& help) {
  return add_parsed(cmd, flags, target, parse_count, help).type_name("N");
}

OptionRef add_counts(const Options& cmd, const std::string& flags, std::vector<u64>& target,
                     const std::string& help) {
  return add_parsed(cmd, flags, target, parse_count_list, help).type_name("N,...");
}

OptionRef add_bytes(const Options& cmd, const std::string& flags, std::optional<u64>& target,
                    const std::string& help) {
  return add_parsed(cmd, flags, target, parse_bytes, help).type_name("BYTES");
}

void add_output_options(const Options& cmd, OutputOptions& o, ScaledBytes scaled) {
  add_choice(cmd, "--format", o.format, k_formats, "Output format").group(k_group_output);
  if (scaled == ScaledBytes::yes) {
    add_choice(cmd, "--units", o.units, k_byte_units,
               "Byte units for people: iec (KiB, MiB, GiB: powers of 1024) or si (kB, MB, GB: "
               "powers of 1000); JSON and CSV always carry exact bytes")
        .group(k_group_output);
  }
  cmd.option("-o,--output", o.file, "Write the result to FILE instead of stdout")
      .type_name("FILE")
      .group(k_group_output);
}

std::optional<DType> dtype_option(const std::string& text, const std::string& flag) {
  return parse_dtype_or_auto(text, flag);
}

void add_cache_options(const Options& cmd, CacheRequest& c) {
  add_parsed(cmd, "--kv-dtype", c.dtype, dtype_option,
             "KV cache element type: fp32, fp16, bf16, fp8 (= fp8_e4m3), fp8_e5m2, int8, int4, "
             "nvfp4 [default: the model's dtype]")
      .type_name("DTYPE")
      .group(k_group_model);
  add_parsed(
      cmd, "--kv-scale", c.scale,
      [&c](const std::string& text, const std::string&) {
        auto [granularity, group] = parse_scale(text);
        if (granularity == ScaleGranularity::per_group) {
          c.scale_group = group;
        }
        return std::optional<ScaleGranularity>(granularity);
      },
      "Scale metadata of a quantized cache: none, tensor (one per layer: no bytes per token), "
      "token-head (one per token per head), group:G (one per G elements) [default: fp8 tensor, "
      "int8 token-head, int4 group:32, nvfp4 group:16]")
      .type_name("SCALE")
      .group(k_group_model);
  add_parsed(cmd, "--kv-scale-dtype", c.scale_dtype, dtype_option,
             "Type of each scale: fp32, fp16, bf16, fp8_e4m3 [default: fp32; int4 fp16; nvfp4 "
             "fp8_e4m3]")
      .type_name("DTYPE")
      .group(k_group_model);
  add_choice(cmd, "--mla-cache", c.mla_format, k_mla_formats,
             "MLA cache layout: latent (d_c + d_R per token per layer), expanded (per-head K and "
             "V, as HF eager code), fp8_ds_mla (656 B per token per layer at DeepSeek dims)")
      .group(k_group_model);
  add_parsed(cmd, "--mamba-cache-dtype", c.state_dtype, parse_state_dtype,
             "Recurrent layers' state (vLLM --mamba-cache-dtype): fp32, fp16, bf16 or auto "
             "[default: auto: the model's own, else the engine's rule: vLLM and plain the model "
             "dtype, SGLang conv bf16 and SSM fp32]")
      .type_name("DTYPE")
      .group(k_group_model);
  add_parsed(cmd, "--mamba-ssm-cache-dtype", c.ssm_state_dtype, parse_state_dtype,
             "The SSM / recurrent part of that state alone (vLLM --mamba-ssm-cache-dtype): fp32, "
             "fp16, bf16 or auto [default: auto, as --mamba-cache-dtype]")
      .type_name("DTYPE")
      .group(k_group_model);
}

std::optional<u64> ParallelOptions::deployment_gpus() const {
  if (!nodes) {
    return gpu_count;
  }
  u64 per_node = gpus_per_node.value_or(8);
  if (*nodes == 0 || per_node == 0) {
    throw InputError("--nodes and --gpus-per-node must be at least 1");
  }
  u64 total = checked_mul(*nodes, per_node, "--nodes × --gpus-per-node");
  if (gpu_count && *gpu_count != total) {
    throw InputError("--gpus " + group_digits(*gpu_count) + " and --nodes " + group_digits(*nodes) +
                     " × --gpus-per-node " + group_digits(per_node) + " = " + group_digits(total) +
                     " disagree; give one of them");
  }
  return total;
}

std::vector<u64> ParallelOptions::tp_sweep() const {
  auto total = deployment_gpus();
  if (tp_given || !(dp_attention || dp > 1) || !total) {
    return tps;
  }
  if (pp == 0 || *total % pp != 0) {
    throw InputError("--gpus " + group_digits(*total) + " is not a multiple of --pp " +
                     group_digits(pp));
  }
  return {*total / pp};
}

void add_parallel_options(const Options& cmd, ParallelOptions& p, ParallelScope scope,
                          bool measured) {
  std::string defaults;
  for (const auto& g : p.gpus) {
    defaults += (defaults.empty() ? "" : ",") + g;
  }
  std::string gpu_help = "GPU from the catalog (`kvcalc gpus`), any case, aliases accepted; a "
                         "comma-separated list sweeps";
  if (measured) {
    gpu_help += "; `auto`: the device a --device-profile measured, which is also the default "
                "when a profile is given";
  }
  gpu_help += defaults.empty() ? " [default: none]" : " [default: " + defaults + "]";
  cmd.texts(
         "--gpu",
         [&p](const std::vector<std::string>& names) {
           p.gpus = names;
           p.gpu_given = true;
         },
         gpu_help)
      .delimiter(',')
      .type_name("GPU,...")
      .group(k_group_deployment);
  cmd.option("--gpu-file", p.gpu_file,
             "A GPU catalog YAML of your own, added to the bundled one (docs/gpu-catalog.md)")
      .type_name("FILE")
      .group(k_group_deployment);
  add_count(cmd, "--gpus", p.gpu_count,
            "GPUs in the deployment: model copies = gpus / (tp × pp) [default: tp × pp]")
      .group(k_group_deployment);
  add_count(cmd, "--nodes", p.nodes, "Nodes of the deployment: --gpus = nodes × --gpus-per-node")
      .group(k_group_deployment);
  add_count(cmd, "--gpus-per-node", p.gpus_per_node,
            "GPUs per node: with --nodes the deployment is nodes × this [default: 8]; a node "
            "of fewer GPUs than the catalog's scale-up domain is its own domain, unless the "
            "domain spans nodes (NVL72)")
      .group(k_group_deployment);
  add_parsed(
      cmd, "--tp", p.tps,
      [&p](const std::string& text, const std::string& flag) {
        p.tp_given = true;
        return parse_count_list(text, flag);
      },
      "Tensor parallel size; a comma-separated list sweeps [default: 1]")
      .type_name("N,...")
      .group(k_group_deployment);
  add_count(cmd, "--pp", p.pp,
            "Pipeline parallel size: layers split over stages, each holding ⌈layers / pp⌉ "
            "[default: 1]")
      .group(k_group_deployment);
  add_count(cmd, "--ep", p.ep,
            "Expert parallel ranks: each holds whole experts; below tp each expert splits over "
            "tp / ep GPUs, above tp the expert group spans ep / tp copies [default: tp with "
            "--dp-attention, else 1: every expert split over tp]")
      .group(k_group_deployment);
  add_count(cmd, "--redundant-experts", p.redundant_experts,
            "Extra copies of hot experts spread over the ep ranks (EPLB); they take memory on "
            "each rank [default: 0]")
      .group(k_group_deployment);
  if (scope == ParallelScope::deployment) {
    add_count(cmd, "--dcp", p.dcp,
              "Decode context parallel (MLA): each of dcp TP ranks holds 1/dcp of every "
              "sequence's latent cache instead of a full copy [default: 1]")
        .group(k_group_deployment);
  }
  cmd.flag("--dp-attention", p.dp_attention,
           "Attention data parallel over the tp ranks (SGLang --enable-dp-attention): each "
           "rank holds its own sequences, attention weights are replicated")
      .group(k_group_deployment);
  add_count(cmd, "--dp", p.dp,
            "Attention data-parallel groups per copy, each of tp / dp GPUs with its own "
            "sequences (SGLang --dp with --enable-dp-attention); implies --dp-attention "
            "[default: tp with --dp-attention]")
      .group(k_group_deployment);
  add_parsed(cmd, "--weight-dtype", p.weight_dtype, dtype_option,
             "Weight storage: bf16, fp16, fp8 (128x128 block scales), int8, int4, nvfp4, mxfp4 "
             "[default: the model's checkpoint]")
      .type_name("DTYPE")
      .group(k_group_deployment);
  if (scope == ParallelScope::deployment) {
    cmd.flag("--mtp", p.mtp,
             "Load the multi-token-prediction module (speculative decoding): its weights and "
             "its layer's KV cache")
        .group(k_group_deployment);
  }
}

void check_plot_path(const std::string& path) {
  if (path.empty()) {
    return;
  }
  std::string lower = ascii_lower(path);
  if (!lower.ends_with(".svg")) {
    std::size_t dot = lower.rfind('.');
    throw InputError("--plot writes SVG; '" + path + "'" +
                     (dot != std::string::npos && lower.find('/', dot) == std::string::npos
                          ? " names a " + lower.substr(dot + 1) + " file"
                          : " has no .svg ending") +
                     ": give a .svg name (a browser, or `chromium --headless --screenshot`, "
                     "turns it into PNG)");
  }
}

void add_ceiling_options(const Options& cmd, CeilingOptions& c, const std::string& profile_help) {
  cmd.option("--device-profile", c.device_profile, profile_help)
      .type_name("FILE")
      .group(k_group_ceilings);
  cmd.flag("--measure", c.measure,
           "Measure this machine's ceilings first (kvcalc measure's probes) and use them; "
           "without --gpu (or with --gpu auto) the measured device is the device")
      .group(k_group_ceilings);
  cmd.option("--save-profile", c.save_profile,
             "With --measure: also write what was measured as a device profile FILE, for "
             "--device-profile next time")
      .type_name("FILE")
      .group(k_group_ceilings);
}

void add_step_pricing_options(const Options& cmd, roofline::Overlap& overlap,
                              std::string& imbalance) {
  add_choice(cmd, "--overlap", overlap, roofline::k_overlaps,
             "none, or two-batch: two half batches, the compute of one hiding the communication "
             "of the other (DeepSeek's dual-batch overlap, SGLang --enable-two-batch-overlap)")
      .group(k_group_deployment);
  cmd.option("--expert-imbalance", imbalance,
             "Token-expert pairs on the busiest GPU over the mean, from 1 (balanced) to 64 "
             "[default: 1]")
      .type_name("F")
      .group(k_group_deployment);
}

namespace {

/// An engine-specific fraction: recorded so that a knob of another engine is refused.
OptionRef add_fraction_knob(const Options& cmd, const std::string& flag, EngineOptions& e,
                            Engine engine, const std::string& help) {
  return add_parsed(
             cmd, flag, e.settings.memory_fraction,
             [&e, engine](const std::string& text, const std::string& name) {
               e.knobs.emplace_back(name, engine);
               double v = parse_fraction(text, name, 0.0, 1.0);
               if (v <= 0) {
                 throw InputError(name + " must be above 0");
               }
               return std::optional<double>(v);
             },
             help)
      .type_name("FRACTION")
      .group(k_group_engine);
}

} // namespace

void add_engine_options(const Options& cmd, EngineOptions& e) {
  add_choice(cmd, "--engine", e.settings.engine, k_engines,
             "Budget rules: vllm, sglang, trtllm as each engine sizes its pool, or plain "
             "(usable memory − weights − reserve, no engine's rules)")
      .group(k_group_engine);
  add_fraction_knob(cmd, "--gpu-memory-utilization", e, Engine::vllm,
                    "vLLM: fraction of total GPU memory it may use [default: 0.9]");
  add_fraction_knob(cmd, "--mem-fraction-static", e, Engine::sglang,
                    "SGLang: fraction for weights and KV pool [default: SGLang's rule from GPU "
                    "memory and tp]");
  add_fraction_knob(cmd, "--free-gpu-memory-fraction", e, Engine::trtllm,
                    "TensorRT-LLM: fraction of the memory left after weights and activations "
                    "[default: 0.9]");
  add_count(cmd, "--max-batched-tokens", e.settings.max_batched_tokens,
            "Tokens per scheduler step (sizes the activation reserve and vLLM's sliding window "
            "blocks) [default: the engine's]")
      .type_name("TOKENS")
      .group(k_group_engine);
  add_count(cmd, "--max-seqs", e.settings.max_seqs,
            "Sequences per step (sizes the logits reserve) [default: the engine's]")
      .group(k_group_engine);
  add_bytes(cmd, "--reserve", e.settings.reserve_bytes,
            "Activation/workspace memory per GPU besides weights, e.g. 2GiB [default: kvcalc's "
            "estimate]")
      .group(k_group_engine);
  add_bytes(cmd, "--non-kv-memory", e.settings.non_kv_bytes,
            "All non-KV memory per GPU as the engine measured it (weights included), e.g. "
            "18.4GiB")
      .group(k_group_engine);
  add_bytes(cmd, "--kv-cache-memory", e.settings.kv_cache_bytes,
            "The KV pool per GPU as the engine reported it, e.g. 3.81GiB (vLLM 'Available KV "
            "cache memory')")
      .group(k_group_engine);
  add_parsed(
      cmd, "--max-model-len", e.settings.max_model_len,
      [&e](const std::string& text, const std::string& name) -> std::optional<u64> {
        if (iequals(text, "auto") || text == "-1") {
          e.settings.max_model_len_auto = true;
          return std::nullopt;
        }
        return parse_count(text, name);
      },
      "The longest request the engine is started for (vLLM --max-model-len, SGLang "
      "--context-length, TensorRT-LLM max_seq_len): vLLM refuses to start when one such "
      "request does not fit, and says the longest that would; auto (or -1): that longest, as "
      "vLLM's auto-fit [default: the model's max_context]")
      .type_name("TOKENS")
      .group(k_group_engine);
  add_parsed(
      cmd, "--num-gpu-blocks-override", e.settings.num_gpu_blocks,
      [&e](const std::string& text, const std::string& name) {
        e.knobs.emplace_back(name, Engine::vllm);
        u64 n = parse_count(text, name);
        if (n == 0) {
          throw InputError(name + " must be at least 1 block");
        }
        return std::optional<u64>(n);
      },
      "vLLM: the pool's block count, instead of what the memory budget gives")
      .type_name("N")
      .group(k_group_engine);
  add_parsed(
      cmd, "--mamba-cache-mode", e.settings.mamba_cache_mode,
      [&e](const std::string& text, const std::string& name) {
        e.knobs.emplace_back(name, Engine::vllm);
        return *k_mamba_cache_modes.find_any_case(text);
      },
      "vLLM, hybrid models: state blocks per sequence, none (one, prefix caching off) or align "
      "(two: the running state and the last block-aligned one) [default: none]")
      .check(choice_of(k_mamba_cache_modes))
      .group(k_group_engine);
}

EngineSettings engine_settings(const EngineOptions& e, std::optional<u64> block_size) {
  EngineSettings s = e.settings;
  std::string engine(engine_name(s.engine));
  for (const auto& [flag, owner] : e.knobs) {
    if (owner != s.engine) {
      throw InputError(flag + " belongs to --engine " + std::string(engine_name(owner)) + ", not " +
                       engine);
    }
  }
  s.block_size = block_size;
  if (s.reserve_bytes && s.non_kv_bytes) {
    throw InputError("--reserve and --non-kv-memory both set the non-KV memory; give one");
  }
  if (s.kv_cache_bytes && (s.reserve_bytes || s.non_kv_bytes)) {
    throw InputError("--kv-cache-memory gives the pool itself; drop --reserve/--non-kv-memory");
  }
  return s;
}

Efficiency parse_efficiency(const std::string& text, const std::string& flag) {
  Efficiency e;
  if (text.empty()) {
    return e;
  }
  e.given = true;
  std::size_t start = 0;
  std::vector<std::string> seen;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma - start);
    auto eq = item.find('=');
    std::string key = item.substr(0, eq);
    if (eq == std::string::npos || (key != "bw" && key != "flops")) {
      throw InputError("invalid " + flag + " '" + text +
                       "': expected bw=F and/or flops=F, e.g. bw=0.85,flops=0.7");
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw InputError(flag + " gives " + key + " twice ('" + text + "'); give it once");
    }
    seen.push_back(key);
    double v = parse_fraction(item.substr(eq + 1), flag + " " + key, 0.0, 1.0);
    if (v < 0.01) {
      throw InputError(flag + " " + key + " must be at least 0.01 (1% of the datasheet), got " +
                       item.substr(eq + 1));
    }
    (key == "bw" ? e.bandwidth : e.flops) = v;
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  return e;
}

void check_sweep(std::initializer_list<SweepAxis> axes) {
  u64 rows = 1;
  std::string product;
  for (const SweepAxis& a : axes) {
    // Saturated past the limit, so the product never wraps.
    u64 count = std::min<u64>(std::max<std::size_t>(a.count, 1), k_max_sweep_rows + 1);
    rows = std::min(rows * count, k_max_sweep_rows + 1);
    product += (product.empty() ? "" : " × ") + group_digits(a.count) + " " + std::string(a.option);
  }
  if (rows > k_max_sweep_rows) {
    throw InputError("the sweep makes more than " + group_digits(k_max_sweep_rows) + " rows (" +
                     product + "); split it into several runs");
  }
}

} // namespace kvcalc::cli
