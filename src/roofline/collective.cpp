#include <kvcalc/roofline/collective.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::roofline {

namespace {

double d(u64 v) {
  return static_cast<double>(v);
}

void need_network(const Topology& t, u64 group, u64 local) {
  if (t.out_bytes_per_s <= 0) {
    throw InputError("a collective over " + group_digits(group) + " GPUs leaves the " +
                     group_digits(local) + "-GPU interconnect domain of " + t.gpu +
                     ", and the catalog states no scale_out link for it; give one in a "
                     "--gpu-file (docs/gpu-catalog.md), or a deployment inside one domain");
  }
}

/// The faster of one-shot and two-shot all-reduce of `bytes` over `g` peers of one link.
Collective flat_all_reduce(u64 g, double bytes, double beta, double alpha) {
  Collective c;
  c.group = g;
  if (g <= 1 || bytes <= 0) {
    c.algorithm = "none";
    return c;
  }
  double one_bytes = d(g - 1) * bytes;
  double two_bytes = 2 * d(g - 1) / d(g) * bytes;
  double one = alpha + one_bytes / beta;
  double two = 2 * alpha + two_bytes / beta;
  bool one_shot = one < two;
  c.algorithm = one_shot ? "one-shot" : "two-shot";
  c.up_bytes = one_shot ? one_bytes : two_bytes;
  c.latency_s = one_shot ? alpha : 2 * alpha;
  c.time_s = one_shot ? one : two;
  return c;
}

} // namespace

std::string Collective::link() const {
  if (up_bytes > 0 && out_bytes > 0) {
    return "scale-up+out";
  }
  return out_bytes > 0 ? "scale-out" : "scale-up";
}

u64 group_in_domain(const Topology& t, u64 group) {
  if (t.domain == 0 || group <= t.domain) {
    return group;
  }
  return std::gcd(group, t.domain);
}

Collective all_reduce(const Topology& t, u64 group, double bytes) {
  u64 local = group_in_domain(t, group);
  if (local == group) {
    Collective c = flat_all_reduce(group, bytes, t.up_bytes_per_s, t.up_latency_s);
    c.kind = CollectiveKind::all_reduce;
    c.message_bytes = bytes;
    return c;
  }
  need_network(t, group, local);
  u64 domains = group / local;
  // Reduce-scatter inside the domain, all-reduce of each GPU's 1/L slice across domains over
  // its own NIC, all-gather inside the domain.
  double inside =
      local > 1 ? t.up_latency_s + d(local - 1) / d(local) * bytes / t.up_bytes_per_s : 0;
  Collective across =
      flat_all_reduce(domains, bytes / d(local), t.out_bytes_per_s, t.out_latency_s);
  Collective c;
  c.kind = CollectiveKind::all_reduce;
  c.message_bytes = bytes;
  bool one_shot = across.algorithm == "one-shot";
  c.algorithm = local == 1 ? across.algorithm
                : one_shot ? "hierarchical, one-shot across domains"
                           : "hierarchical, two-shot across domains";
  c.group = group;
  c.domains = domains;
  c.up_bytes = local > 1 ? 2 * d(local - 1) / d(local) * bytes : 0;
  c.out_bytes = across.up_bytes;
  c.latency_s = (local > 1 ? 2 * t.up_latency_s : 0) + across.latency_s;
  c.time_s = 2 * inside + across.time_s;
  return c;
}

Collective expert_exchange(const Topology& t, u64 group, double tokens, double k, double bytes,
                           u64 local) {
  Collective c;
  c.kind = CollectiveKind::dispatch;
  c.message_bytes = tokens * bytes;
  c.group = group;
  c.algorithm = "deduplicated by domain";
  if (group <= 1 || tokens <= 0 || bytes <= 0) {
    c.algorithm = "none";
    return c;
  }
  local = local == 0 ? group_in_domain(t, group) : local;
  c.domains = group / local;
  double n = d(c.domains);
  double g = d(group);
  double l = d(local);
  // Copies to the other GPUs of its own domain; over the NIC one per remote domain hit; each
  // copy that lands on a remote domain's NIC is forwarded to the domain's other experts.
  double direct = k * (l - 1) / g;
  double remote_domains = c.domains > 1 ? (n - 1) * (1 - std::pow(1 - 1 / n, k)) : 0;
  double forwarded = k * (g - l) / g * (l - 1) / l;
  c.up_bytes = tokens * (direct + forwarded) * bytes;
  c.out_bytes = tokens * remote_domains * bytes;
  if (c.out_bytes > 0) {
    need_network(t, group, local);
  }
  // Both links work at once; the NIC's α where anything leaves the domain.
  c.latency_s = c.out_bytes > 0 ? t.out_latency_s : t.up_latency_s;
  double up = c.up_bytes / t.up_bytes_per_s;
  double out = c.out_bytes > 0 ? c.out_bytes / t.out_bytes_per_s : 0;
  c.time_s = c.latency_s + std::max(up, out);
  return c;
}

Collective send(const Topology& t, bool crosses_domain, double bytes) {
  Collective c;
  c.kind = CollectiveKind::send;
  c.message_bytes = bytes;
  c.group = 2;
  c.algorithm = "send";
  if (bytes <= 0) {
    c.algorithm = "none";
    return c;
  }
  if (crosses_domain) {
    need_network(t, 2, t.domain);
    c.domains = 2;
    c.out_bytes = bytes;
    c.latency_s = t.out_latency_s;
    c.time_s = c.latency_s + bytes / t.out_bytes_per_s;
  } else {
    c.up_bytes = bytes;
    c.latency_s = t.up_latency_s;
    c.time_s = c.latency_s + bytes / t.up_bytes_per_s;
  }
  return c;
}

} // namespace kvcalc::roofline
