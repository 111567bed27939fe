#include <kvcalc/kv/cache_spec.hpp>

#include <algorithm>
#include <numeric>

#include <kvcalc/core/units.hpp>

using namespace kvcalc::model;

namespace kvcalc::kv {

u64 StateTensor::elements() const {
  u64 n = 1;
  for (u64 axis : shape) {
    n = checked_mul(n, axis, "state elements");
  }
  return n;
}

u64 StateTensor::bytes() const {
  return dtype_storage_bytes(dtype, elements());
}

u64 CacheSpec::held_tokens(u64 context) const {
  switch (kind) {
  case CacheKind::full:
  case CacheKind::indexer:
    return context;
  case CacheKind::sliding:
  case CacheKind::chunked:
    return std::min(context, window);
  case CacheKind::state:
    return 0;
  }
  return context;
}

u64 CacheSpec::bytes_at(u64 context) const {
  if (kind == CacheKind::state) {
    return state_bytes;
  }
  return checked_mul(held_tokens(context), bytes_per_token, "cache bytes at this context");
}

namespace {

/// `value` split over `tp` GPUs, which must divide it as the engines' `divide()` asserts.
u64 split(u64 value, u64 tp, std::string_view what, const StateSpec& s) {
  if (value % tp != 0) {
    throw InputError(std::string(what) + " (" + std::to_string(value) + ") of the " +
                     std::string(k_state_kinds.name(s.kind)) +
                     " layers cannot be split over tensor parallel " + std::to_string(tp) +
                     " (engines need tp to divide it); use a tp that divides it");
  }
  return value / tp;
}

} // namespace

std::vector<StateTensor> state_tensors(const StateSpec& s, u64 tp, DType conv, DType ssm) {
  // Shapes as vLLM's MambaStateShapeCalculator allocates them (docs/formulas.md, "Per-sequence
  // state"); a conv tail keeps kernel − 1 past inputs of every convolved channel.
  switch (s.kind) {
  case StateKind::mamba1: {
    u64 inner = split(s.inner, tp, "d_inner", s);
    return {{"conv", {s.conv_kernel - 1, inner}, conv}, {"ssm", {inner, s.state_size}, ssm}};
  }
  case StateKind::mamba2: {
    // B and C of a group go with the heads that read them: groups not divisible by tp are
    // replicated up to tp (a single group on every GPU).
    u64 groups = s.groups;
    if (groups % tp != 0) {
      if (groups != 1) {
        throw InputError("the mamba2 layers' " + std::to_string(groups) +
                         " groups cannot be split over tensor parallel " + std::to_string(tp) +
                         " (engines need tp to divide n_groups, or n_groups = 1)");
      }
      groups = tp;
    }
    u64 conv_dim = checked_add(s.inner, checked_mul(checked_mul(2, groups), s.state_size));
    return {{"conv", {s.conv_kernel - 1, split(conv_dim, tp, "conv width", s)}, conv},
            {"ssm", {split(s.heads, tp, "SSM heads", s), s.head_dim, s.state_size}, ssm}};
  }
  case StateKind::gated_deltanet: {
    u64 conv_dim = checked_add(checked_mul(checked_mul(2, s.key_heads), s.key_head_dim),
                               checked_mul(s.heads, s.head_dim));
    (void)split(s.key_heads, tp, "key heads", s);
    return {{"conv", {s.conv_kernel - 1, split(conv_dim, tp, "conv width", s)}, conv},
            {"recurrent", {split(s.heads, tp, "value heads", s), s.head_dim, s.key_head_dim}, ssm}};
  }
  case StateKind::kda: {
    // Kimi Delta Attention convolves q, k and v (one conv state of their widths together) and
    // keeps its recurrence in fp32 whatever is asked (vLLM's kda_state_dtype).
    u64 width = checked_mul(checked_mul(3, s.heads), s.head_dim);
    return {{"conv", {s.conv_kernel - 1, split(width, tp, "conv width", s)}, conv},
            {"recurrent", {split(s.heads, tp, "heads", s), s.head_dim, s.head_dim}, DType::fp32}};
  }
  case StateKind::lightning:
    return {{"kv", {split(s.heads, tp, "heads", s), s.head_dim, s.head_dim}, ssm}};
  case StateKind::custom:
    return {{"state", {ceil_div(s.elements, tp)}, ssm}};
  }
  return {};
}

namespace {

/// The per-token spec of attention `a` for layers of `kind`, on one GPU.
CacheSpec attention_spec(const Model& m, const Attention& a, CacheKind kind,
                         const CacheLayout& layout) {
  CacheSpec spec;
  spec.kind = kind;
  spec.window = kind == CacheKind::sliding   ? m.sliding_window
                : kind == CacheKind::chunked ? m.attention_chunk
                                             : 0;
  spec.format = resolve_cache_format(layout.cache, m);
  spec.mla = a.kind == AttentionKind::mla;
  const CacheFormat& f = spec.format;
  if (spec.mla && f.mla_format == MlaCacheFormat::fp8_ds_mla) {
    // FlashMLA's fp8 layout: fp8 latent, an fp32 scale per 128 latent values, bf16 RoPE part.
    u64 d_c = a.mla.kv_lora_rank;
    u64 d_r = a.mla.qk_rope_head_dim;
    spec.kv_heads = 1;
    spec.k_width = d_c + d_r;
    spec.rope_width = d_r;
    spec.bytes_per_token =
        checked_add(checked_add(d_c, checked_mul(d_c / 128, 4)), checked_mul(d_r, 2));
    return spec;
  }
  if (spec.mla && f.mla_format == MlaCacheFormat::latent) {
    // One stream, whole on every GPU: V is the first d_c columns of the same row.
    spec.kv_heads = 1;
    spec.k_width = checked_add(a.mla.kv_lora_rank, a.mla.qk_rope_head_dim);
    spec.rope_width = a.mla.qk_rope_head_dim;
    spec.bytes_per_token = vector_bytes(f, spec.k_width);
    return spec;
  }
  u64 tp = layout.attention_tp;
  u64 kv = a.kv_heads;
  if (kv % tp != 0 && tp % kv != 0) {
    throw InputError(m.name + ": " + std::to_string(kv) +
                     " KV heads cannot be split over tensor parallel " + std::to_string(tp) +
                     "; use a tp that divides the KV heads or a multiple of them");
  }
  spec.kv_heads =
      layout.head_split == HeadSplit::ceiling ? ceil_div(kv, tp) : std::max<u64>(1, kv / tp);
  spec.k_width = a.head_dim;
  spec.v_width = a.v_head_dim;
  spec.bytes_per_token = checked_mul(
      spec.kv_heads, checked_add(vector_bytes(f, a.head_dim), vector_bytes(f, a.v_head_dim)),
      "KV bytes per token per layer");
  return spec;
}

/// The DSA indexer key: head_dim fp8 values and an fp32 scale per 128 of them, one per token.
CacheSpec indexer_spec(const Indexer& x) {
  CacheSpec spec;
  spec.kind = CacheKind::indexer;
  spec.kv_heads = 1;
  spec.k_width = x.head_dim;
  spec.format.dtype = DType::fp8_e4m3;
  spec.format.scale = {ScaleGranularity::per_group, 128, DType::fp32};
  spec.bytes_per_token = vector_bytes(spec.format, x.head_dim);
  return spec;
}

CacheSpec state_spec(const Model& m, const CacheLayout& layout) {
  const StateSpec& s = *m.state;
  const StateDtypeDefaults& engine = layout.state_defaults;
  // The user's dtypes first, then the model's own where the engine keeps it, then the engine's,
  // then the model dtype.
  std::optional<DType> own_conv = s.conv_dtype;
  std::optional<DType> own_ssm = engine.model_ssm ? s.ssm_dtype : std::nullopt;
  DType conv = layout.cache.state_dtype.value_or(own_conv.value_or(engine.conv.value_or(m.dtype)));
  DType ssm = layout.cache.ssm_state_dtype.value_or(
      layout.cache.state_dtype.value_or(own_ssm.value_or(engine.ssm.value_or(conv))));
  if (s.kind == StateKind::custom || s.kind == StateKind::lightning) {
    // One tensor: the conv dtype does not apply.
    ssm = layout.cache.ssm_state_dtype.value_or(layout.cache.state_dtype.value_or(
        own_ssm.value_or(engine.ssm.value_or(engine.conv.value_or(m.dtype)))));
  }
  CacheSpec spec;
  spec.kind = CacheKind::state;
  spec.state_kind = s.kind;
  spec.state = state_tensors(s, layout.attention_tp, conv, ssm);
  for (const auto& t : spec.state) {
    spec.state_bytes = checked_add(spec.state_bytes, t.bytes(), "state bytes per layer");
  }
  return spec;
}

} // namespace

std::vector<CacheGroup> cache_groups(const Model& m, const CacheLayout& layout) {
  if (layout.attention_tp == 0 || layout.pp == 0) {
    throw InputError("tensor and pipeline parallelism must be at least 1");
  }
  // The layers of this GPU: the first ⌈(layers + MTP) / pp⌉ of the model's own followed by the
  // MTP draft layers (full attention).
  std::vector<LayerType> types = m.layer_types;
  types.insert(types.end(), layout.mtp_layers, LayerType::full);
  u64 stage = ceil_div(types.size(), layout.pp);
  types.resize(stage);
  // KV-shared layers are the last attention layers of the model (not of the MTP module).
  std::vector<bool> shared(types.size(), false);
  u64 to_share = m.kv_shared_layers;
  for (u64 i = std::min<u64>(m.layers, types.size()); i-- > 0 && to_share > 0;) {
    if (is_attention(m.layer_types[i])) {
      shared[i] = true;
      --to_share;
    }
  }

  std::vector<CacheGroup> out;
  auto group = [&](std::string name, CacheSpec spec, auto belongs) {
    CacheGroup g{std::move(name), std::move(spec), 0, {}, 0};
    for (u64 i = 0; i < types.size(); ++i) {
      if (belongs(types[i])) {
        if (shared[i]) {
          ++g.shared_layers;
        } else {
          g.layer_ids.push_back(i);
        }
      }
    }
    g.layers = g.layer_ids.size();
    if (g.layers > 0) {
      out.push_back(std::move(g));
    }
  };
  for (const auto& [layer_type, kind] : {std::pair{LayerType::full, CacheKind::full},
                                         std::pair{LayerType::sliding, CacheKind::sliding},
                                         std::pair{LayerType::chunked, CacheKind::chunked}}) {
    LayerType type = layer_type; // a copy: lambdas cannot capture a structured binding in C++17
    if (std::find(types.begin(), types.end(), type) == types.end()) {
      continue;
    }
    group(std::string(k_cache_kinds.name(kind)),
          attention_spec(m, attention_of(m, type), kind, layout),
          [type](LayerType t) { return t == type; });
  }
  if (m.indexer) {
    group("indexer", indexer_spec(*m.indexer), is_attention);
  }
  if (m.state && std::find(types.begin(), types.end(), LayerType::state) != types.end()) {
    group("state", state_spec(m, layout), [](LayerType t) { return t == LayerType::state; });
  }
  return out;
}

u64 bytes_per_token(const std::vector<CacheGroup>& groups) {
  u64 total = 0;
  for (const auto& g : groups) {
    total = checked_add(total, checked_mul(g.layers, g.spec.bytes_per_token), "bytes per token");
  }
  return total;
}

u64 state_bytes(const std::vector<CacheGroup>& groups) {
  u64 total = 0;
  for (const auto& g : groups) {
    total = checked_add(total, checked_mul(g.layers, g.spec.state_bytes), "state bytes");
  }
  return total;
}

u64 bytes_at(const std::vector<CacheGroup>& groups, u64 context) {
  u64 total = 0;
  for (const auto& g : groups) {
    total = checked_add(total, checked_mul(g.layers, g.spec.bytes_at(context)),
                        "cache bytes at this context");
  }
  return total;
}

namespace {

/// "128 × 1 B (fp8_e4m3) + 1 × 4 B (fp32 scale)" — one stored vector.
DerivationLine vector_terms(const CacheFormat& f, u64 elements) {
  DerivationLine out;
  unsigned bits = dtype_bits(f.dtype);
  u64 scales = scales_per_vector(f.scale, elements);
  if (scales > 0) {
    out.emplace_back("(");
  }
  if (bits % 8 == 0) {
    out.insert(out.end(), {num(elements), " × ", bytes(bits / 8)});
  } else {
    out.insert(out.end(), {"⌈", num(elements), " × " + std::to_string(bits) + " bit / 8⌉ B"});
  }
  out.emplace_back(" (" + std::string(dtype_name(f.dtype)) + ")");
  if (scales > 0) {
    out.insert(out.end(), {" + ", num(scales), " × ", bytes(dtype_bits(f.scale.dtype) / 8),
                           " (" + std::string(dtype_name(f.scale.dtype)) + " scale" +
                               (scales > 1 ? "s" : "") + "))"});
  }
  return out;
}

void append(DerivationLine& line, DerivationLine more) {
  line.insert(line.end(), std::make_move_iterator(more.begin()),
              std::make_move_iterator(more.end()));
}

} // namespace

void explain_groups(const std::vector<CacheGroup>& groups, Derivation& why) {
  if (!why.enabled()) {
    return;
  }
  for (const auto& g : groups) {
    const CacheSpec& s = g.spec;
    DerivationLine line{g.name + ": ", num(g.layers), " layers"};
    if (s.kind == CacheKind::sliding || s.kind == CacheKind::chunked) {
      append(line,
             {s.kind == CacheKind::sliding ? " (window " : " (chunk ", num(s.window), " tokens)"});
    }
    switch (s.kind) {
    case CacheKind::state: {
      append(line, {", " + std::string(k_state_kinds.name(s.state_kind)) +
                    " state per layer per sequence: "});
      for (std::size_t i = 0; i < s.state.size(); ++i) {
        const StateTensor& t = s.state[i];
        std::string dims;
        for (u64 axis : t.shape) {
          dims += (dims.empty() ? "" : " × ") + group_digits(axis);
        }
        append(line, {i ? " + " : "", t.name + " " + dims + " × ", bytes(dtype_bits(t.dtype) / 8),
                      " (" + std::string(dtype_name(t.dtype)) + ")"});
      }
      append(line, {" = ", bytes(s.state_bytes), ", whatever the context"});
      break;
    }
    case CacheKind::indexer:
      append(line, {", indexer key per layer per token: "});
      append(line, vector_terms(s.format, s.k_width));
      append(line, {" = ", bytes(s.bytes_per_token)});
      break;
    default:
      if (s.mla && s.format.mla_format == MlaCacheFormat::fp8_ds_mla) {
        u64 d_c = s.k_width - s.rope_width;
        append(line, {", per layer per token (fp8_ds_mla): kv_lora_rank ", num(d_c), " × ",
                      bytes(1), " (fp8_e4m3) + ", num(d_c / 128), " × ", bytes(4),
                      " (fp32 scale per 128) + qk_rope_head_dim ", num(s.rope_width), " × ",
                      bytes(2), " (bf16) = ", bytes(s.bytes_per_token)});
      } else if (s.mla && s.format.mla_format == MlaCacheFormat::latent) {
        append(line,
               {", per layer per token (MLA latent, one stream, no factor 2): (kv_lora_rank ",
                num(s.k_width - s.rope_width), " + qk_rope_head_dim ", num(s.rope_width), ") = "});
        append(line, vector_terms(s.format, s.k_width));
        append(line, {" = ", bytes(s.bytes_per_token)});
      } else {
        append(line, {", per layer per token: ", num(s.kv_heads),
                      s.mla ? " heads (MLA expanded) × " : " KV heads × "});
        if (s.k_width == s.v_width) {
          append(line, {"2 (K and V) × "});
          append(line, vector_terms(s.format, s.k_width));
        } else {
          append(line, {"(K "});
          append(line, vector_terms(s.format, s.k_width));
          append(line, {" + V "});
          append(line, vector_terms(s.format, s.v_width));
          append(line, {")"});
        }
        append(line, {" = ", bytes(s.bytes_per_token)});
      }
      break;
    }
    why.add_line(std::move(line));
  }
}

} // namespace kvcalc::kv
