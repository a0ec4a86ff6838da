// The CPU engine's driver: which traversal serves a call (layout and dtypes),
// whether its outputs are streamed, and the split of its rows between the CPU
// threads. Knows no estimator: the producer comes from the entry's table
// (advantage_cpu.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "cpu/cpu_threads.hpp"
#include "cpu/engine_traversals.hpp"

namespace puffadv::detail::engine {

enum class layout { time_contiguous, row_adjacent, other };

/// The [rows, horizon] arrays the traversals load vectors along (last_value
/// and bootstrap_values are read element by element).
inline std::array<const view*, 11> lane_views(const arrays& a) {
    return {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.importance, &a.next_values,
            &a.target, &a.behaviour, &a.greedy, &a.advantages, &a.returns};
}

inline layout layout_of(const arrays& a) {
    bool along_time = true, across_rows = true;
    for (const view* v : lane_views(a)) {
        if (!v->present) continue;
        along_time = along_time && (v->col_stride == 1 || a.horizon <= 1);
        across_rows = across_rows && (v->row_stride == 1 || a.rows <= 1);
    }
    return along_time ? layout::time_contiguous : across_rows ? layout::row_adjacent : layout::other;
}

/// Whether the engine serves a call in arithmetic type C: every float array of
/// type C (float32 or float64), the flags (terminated, truncated, greedy) all of
/// that type or all bool/uint8, and a layout a traversal walks.
template <typename C>
bool serves(const arrays& a) {
    constexpr dtype own = sizeof(C) == 8 ? dtype::float64 : dtype::float32;
    for (const view* v : {&a.rewards, &a.values, &a.last_value, &a.bootstrap, &a.importance, &a.next_values,
                          &a.target, &a.behaviour, &a.advantages, &a.returns})
        if (v->present && v->type != own) return false;
    const bool bytes = byte_flags(a.terminated.type);
    for (const view* v : {&a.terminated, &a.truncated, &a.greedy})
        if (v->present && (byte_flags(v->type) != bytes || (!bytes && v->type != own))) return false;
    return layout_of(a) != layout::other;
}

/// Whether to store the outputs past the caches: outputs too large to stay
/// cached for whoever reads them next (saves reading each output line before
/// writing it: 65536x128 f32 time-major GAE, one thread, 6.0 -> 3.7 ms), whose
/// vectors all start 16-byte aligned, and which do not start at the same line
/// of a page as an input (outputs_share_page_lines: 27 ms instead of 9-16).
inline bool streams(const arrays& a) {
    const bool along_time = layout_of(a) == layout::time_contiguous;
    std::int64_t bytes = 0;
    for (const view* v : {&a.advantages, &a.returns}) {
        if (!v->present) continue;
        const std::int64_t outer = (along_time ? v->row_stride : v->col_stride) * v->size;
        if (reinterpret_cast<std::uintptr_t>(v->base) % 16 != 0 || outer % 16 != 0) return false;
        bytes += a.rows * a.horizon * v->size;
    }
    if (outputs_share_page_lines({&a.advantages, &a.returns},
                                 {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.importance, &a.bootstrap,
                                  &a.next_values, &a.target, &a.behaviour, &a.greedy}))
        return false;
    return bytes >= kStreamingBytes;
}

constexpr std::int64_t kElementsPerThread = 1 << 15;  // below this, extra threads cost more than they give


/// Runs producer p over every row of a served call. Units of work: kSimdTileRows
/// time-contiguous rows (each ends with a store fence when streaming), or a
/// block of simd_block_rows row-adjacent rows (long lines stream from memory).
template <typename P>
void run_engine(const P& p, const arrays& a) {
    const bool along = layout_of(a) == layout::time_contiguous;
    const std::int64_t unit = along ? kSimdTileRows : simd_block_rows(a.rows);
    const std::int64_t units = (a.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, a.rows * a.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    shared_bad_step bad;
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            const int count = static_cast<int>(std::min<std::int64_t>(unit, a.rows - first));
            if (!along) {
                bad.keep(across_rows(p, a, first, count));
            } else if (P::kForward) {
                bad.keep(along_time(p, a, first, count));
            } else {
                // Backward rows are walked downwards: a thread takes the mirror image of its
                // ascending units, so that its reads form one descending stream (ascending
                // units of descending rows ran 2.5x slower: the prefetcher restarted at each).
                bad.keep(along_time(p, a, a.rows - first - count, count));
            }
        }
    });
    // A step flagged both terminated and truncated is terminated (issue 33), no error:
    // the producers read no bootstrap there (bootstrap_truncated), `bad` stays unused.
}

}  // namespace puffadv::detail::engine
