// The CPU worker threads every CPU kernel shares: puffadv's own small pool.
//
// Not OpenMP, for two reasons measured on this project (docs/reliability.md):
// GNU libgomp's threads do not survive fork(), so a forked child's next
// parallel region waited for ever for threads that no longer exist; and an
// OpenMP runtime is process-wide state shared with (or duplicated beside) the
// one torch brings. This pool's fork handler leaves the child an empty pool
// that it fills again on its next call.
#pragma once

#include <cstdint>

namespace puffadv::detail {

/// Runs task(context, part) for every part in [0, parts) and returns when all
/// are done: part 0 on the calling thread, the others on pool threads. When
/// another call is using the pool (several threads calling puffadv at once),
/// this call runs its parts on the calling thread alone; as parts never share
/// work, the results are the same either way. `task` must not throw.
void run_parts(int parts, void (*task)(void* context, int part), void* context);

/// Splits [0, count) into `parts` contiguous ranges, as OpenMP's static schedule
/// does, and runs body(begin, end) for each range in parallel.
template <typename Body>
void parallel_ranges(int parts, std::int64_t count, const Body& body) {
    if (count <= 0) return;
    if (parts > count) parts = static_cast<int>(count);
    if (parts <= 1) {
        body(std::int64_t{0}, count);
        return;
    }
    struct job {
        const Body* body;
        std::int64_t count;
        int parts;
    } j{&body, count, parts};
    run_parts(parts, [](void* context, int part) {
        const job& j = *static_cast<const job*>(context);
        (*j.body)(j.count * part / j.parts, j.count * (part + 1) / j.parts);
    }, &j);
}

}  // namespace puffadv::detail
