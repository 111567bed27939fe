#include <kvcalc/kv/weights.hpp>

using namespace kvcalc::model;

namespace kvcalc::kv {

u64 tensor_bytes(const TensorGroup& t, const WeightFormat& format) {
  return checked_mul(format.bytes(t.rows, t.cols), t.count, "weight bytes");
}

u64 tensor_bytes(const TensorGroup& t, DType dtype) {
  return tensor_bytes(t, WeightFormat::of(dtype));
}

WeightFormat tensor_format(const Model& m, const TensorGroup& t, std::optional<DType> asked) {
  if (!m.weight_formats.empty()) {
    auto it = m.weight_formats.find(format_key(t));
    if (it == m.weight_formats.end()) {
      return WeightFormat::of(m.dtype);
    }
    return asked ? WeightFormat::of(*asked) : it->second;
  }
  bool covered = t.linear && (m.quantized_weights == QuantizedWeights::linear ||
                              t.place == TensorPlace::expert);
  return WeightFormat::of(covered ? asked.value_or(m.weight_dtype.value_or(m.dtype)) : m.dtype);
}

WeightSharding weight_sharding(const Deployment& d, bool mtp) {
  WeightSharding s;
  s.dense_tp = d.attention_tp;
  s.pp = d.parallel.pp;
  s.experts_per_rank = d.experts_per_rank;
  s.expert_tp = d.expert_tp;
  s.mtp = mtp;
  return s;
}

WeightBytes weight_bytes(const Model& m, const ParamCount& params,
                         std::optional<DType> weight_dtype, const WeightSharding& s) {
  WeightBytes out;
  u64 layer_bytes = 0; // per GPU, all layers of one copy, before the pipeline split
  u64 embedding = 0;
  u64 head = 0;
  u64 mtp = 0;
  for (const TensorGroup& t : params.tensors) {
    if (t.mtp && !s.mtp) {
      continue;
    }
    u64 bytes = tensor_bytes(t, tensor_format(m, t, weight_dtype));
    out.total = checked_add(out.total, bytes, "weight bytes");
    // Vectors (norms, biases) are replicated; matrices are split. An expert-parallel rank
    // holds its whole experts, each split over expert_tp GPUs.
    u64 share = bytes;
    if (t.rows > 1) {
      if (t.place == TensorPlace::expert) {
        u64 experts = m.moe ? m.moe->routed_experts : 1;
        u64 held = s.experts_per_rank == 0 ? experts : s.experts_per_rank;
        share = ceil_div(checked_mul(bytes / experts, held, "weight bytes"), s.expert_tp);
      } else {
        share = ceil_div(bytes, s.dense_tp);
      }
    }
    if (t.place == TensorPlace::expert) {
      out.experts = checked_add(out.experts, bytes);
    }
    if (t.mtp) {
      mtp += share;
    } else if (t.place == TensorPlace::embedding) {
      embedding += share;
    } else if (t.place == TensorPlace::lm_head) {
      head += share;
    } else {
      layer_bytes += share;
    }
  }
  // Pipeline: the busiest stage holds ⌈layers / pp⌉ layers; the first stage also holds the
  // embedding, the last the head (and MTP). One stage holds them all when pp = 1.
  u64 stage_layers = ceil_div(m.layers, s.pp);
  u64 stage = ceil_div(checked_mul(layer_bytes, stage_layers), m.layers);
  out.per_gpu =
      s.pp == 1 ? stage + embedding + head + mtp : stage + std::max(embedding, head + mtp);
  return out;
}

} // namespace kvcalc::kv
