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
  p.ep = p.ep == 0 ? p.tp : p.ep;
  if (p.ep > p.gpus) {
    throw InputError("--ep " + group_digits(p.ep) + " shards the experts over more GPUs than the " +
                     group_digits(p.gpus) + (p.gpus == 1 ? " GPU" : " GPUs") +
                     " of the deployment (--gpus, else tp × pp)");
  }
  u64 attention_tp = p.dp_attention ? 1 : p.tp;
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
  d.kv_pools = checked_mul(d.replicas, p.dp_attention ? p.tp : 1);
  d.weight_dtype = weight_dtype.value_or(m.weight_dtype.value_or(m.dtype));
  return d;
}

} // namespace kvcalc::kv
