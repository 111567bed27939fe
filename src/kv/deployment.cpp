#include <kvcalc/kv/deployment.hpp>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>

using namespace kvcalc::model;

namespace kvcalc::kv {

Deployment resolve_deployment(const Model& m, const Parallelism& asked,
                              std::optional<DType> weight_dtype) {
  Parallelism p = asked;
  if (p.tp == 0 || p.pp == 0 || p.dcp == 0) {
    throw InputError("--tp, --pp and --dcp must be at least 1");
  }
  if (p.dp > 1) {
    if (p.tp % p.dp != 0) {
      throw InputError("--dp " + group_digits(p.dp) + " must divide --tp " + group_digits(p.tp) +
                       ": each attention group takes tp / dp of a copy's GPUs");
    }
    p.dp_attention = true;
  }
  p.dp = p.dp_attention ? (p.dp > 1 ? p.dp : p.tp) : 1;
  u64 copy = checked_mul(p.tp, p.pp);
  p.gpus = p.gpus == 0 ? copy : p.gpus;
  if (p.gpus % copy != 0) {
    throw InputError("--gpus " + group_digits(p.gpus) + " is not a multiple of tp × pp = " +
                     group_digits(copy) + "; each model copy needs tp × pp GPUs");
  }
  if (p.dcp > 1) {
    if (p.tp % p.dcp != 0) {
      throw InputError("--dcp " + group_digits(p.dcp) + " must divide --tp " + group_digits(p.tp) +
                       " (decode context parallel reuses the TP group)");
    }
    if (!has_attention(m) || m.attention.kind != AttentionKind::mla) {
      throw InputError("--dcp applies to MLA models; " + m.name + " is " + attention_label(m));
    }
    if (p.dp_attention) {
      throw InputError("--dcp and --dp-attention are two ways to stop replicating the MLA "
                       "cache; choose one");
    }
    if (count_layers(m, LayerType::sliding) + count_layers(m, LayerType::chunked) +
            count_layers(m, LayerType::state) >
        0) {
      throw InputError("--dcp applies to models whose every cache grows with the context; " +
                       m.name + " has sliding, chunked or state layers");
    }
  }
  if (p.pp > m.layers) {
    throw InputError("--pp " + group_digits(p.pp) + " is more pipeline stages than " + m.name +
                     "'s " + group_digits(m.layers) + " layers; each stage needs at least one");
  }
  // Experts: ep ranks per pipeline stage; below tp each expert is split over tp / ep of them
  // (expert TP); above tp they span several copies, which send them their tokens.
  u64 stage_gpus = p.gpus / p.pp;
  p.ep = p.ep == 0 ? (p.dp_attention ? p.tp : 1) : p.ep;
  if (p.ep > stage_gpus) {
    throw InputError("--ep " + group_digits(p.ep) + " shards the experts over more GPUs than the " +
                     group_digits(stage_gpus) + (stage_gpus == 1 ? " GPU" : " GPUs") +
                     " of a pipeline stage (--gpus, else tp × pp, over pp)");
  }
  u64 expert_tp = 1;
  if (p.ep < p.tp) {
    if (p.tp % p.ep != 0) {
      throw InputError("--ep " + group_digits(p.ep) + " must divide --tp " + group_digits(p.tp) +
                       " (each expert is split over tp / ep GPUs), or be a multiple of it");
    }
    if (p.dp_attention) {
      throw InputError("--dp-attention sends each rank's tokens to its experts: --ep must be at "
                       "least --tp " +
                       group_digits(p.tp) +
                       " (kvcalc does not model experts split over tp "
                       "under attention data parallel)");
    }
    expert_tp = p.tp / p.ep;
  } else if (p.ep % p.tp != 0 || stage_gpus % p.ep != 0) {
    throw InputError("--ep " + group_digits(p.ep) + " above --tp " + group_digits(p.tp) +
                     " must be a multiple of it that divides the " + group_digits(stage_gpus) +
                     " GPUs of a pipeline stage, so that expert groups are whole copies");
  }
  if (p.redundant_experts > 0) {
    if (!m.moe) {
      throw InputError("--redundant-experts: " + m.name + " has no routed experts");
    }
    if (p.ep == 1) {
      throw InputError("--redundant-experts copies experts across expert-parallel ranks; give "
                       "--ep above 1");
    }
  }
  u64 attention_tp = p.tp / p.dp;
  if (has_attention(m)) {
    for (const Attention* a :
         {&m.attention, m.sliding_attention ? &*m.sliding_attention : nullptr}) {
      if (a != nullptr && a->heads % attention_tp != 0) {
        throw InputError(m.name + ": " + group_digits(a->heads) +
                         " query heads cannot be split over tensor parallel " +
                         group_digits(attention_tp) +
                         " (engines need tp to divide them); use a tp that divides them");
      }
    }
  }
  Deployment d;
  d.parallel = p;
  d.replicas = p.gpus / copy;
  d.attention_tp = attention_tp;
  d.attention_dp = p.dp;
  d.kv_pools = checked_mul(d.replicas, p.dp);
  d.expert_tp = expert_tp;
  d.expert_all_to_all = p.dp_attention || p.ep > p.tp;
  if (m.moe) {
    d.experts_per_rank = ceil_div(checked_add(m.moe->routed_experts, p.redundant_experts), p.ep);
  }
  d.weight_dtype = weight_dtype.value_or(m.weight_dtype.value_or(m.dtype));
  return d;
}

} // namespace kvcalc::kv
