#pragma once
// The threads the CPU kernels run on: started once and kept, so a timed kernel pays for
// waking its workers (microseconds), not for creating them.

#include <cstdint>
#include <functional>

namespace kvcalc::kernels {

/// Runs body(i, worker) for every i in [0, count) on `threads` threads (the caller is one of
/// them), handing out indices one at a time; `worker` < threads numbers the thread, for
/// per-thread scratch space. Returns when all are done. An exception thrown by a body is
/// rethrown here (the first one; the rest of the work still runs). Calls are serialised.
using ParallelBody = std::function<void(std::uint64_t index, unsigned worker)>;
void parallel_for(std::uint64_t count, unsigned threads, const ParallelBody& body);

} // namespace kvcalc::kernels
