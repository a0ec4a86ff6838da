// The CPU engine's driver: which traversal and which source serve a call
// (layout and dtypes), whether its outputs are streamed, and the split of its
// rows between the CPU threads. Knows no estimator: the producer comes from the entry's table
// (advantage_cpu.cpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "cpu/cpu_threads.hpp"
#include "cpu/engine_traversals.hpp"

namespace puffadv::detail::engine {

enum class layout { time_contiguous, row_adjacent, other };

inline layout layout_of(const arrays& a) {
    bool along_time = true, across_rows = true;
    for (int k = 0; k < role_count; ++k) {
        const view& v = a.by_role[k];
        if (!v.present || !is_line(role(k))) continue;
        along_time = along_time && (v.col_stride == 1 || a.horizon <= 1);
        across_rows = across_rows && (v.row_stride == 1 || a.rows <= 1);
    }
    return along_time ? layout::time_contiguous : across_rows ? layout::row_adjacent : layout::other;
}

/// Rows across which a call is too narrow to walk: time-major calls of fewer rows
/// (SB3's and CleanRL's few environments) fill only that many of a vector's lanes.
/// Most are walked interleaved (interleaved_rows_of); the rest (other dtypes,
/// views whose steps are not `rows` apart, row sums, n_step_returns) along time
/// through converted lines (each row gathered into a
/// line, engine_sources.hpp): float32 GAE, time-major, this 2-core machine,
/// 2026-12-04, across rows -> gathered: 2048x4 97 -> 20 us, 2048x15 115 -> 92.
constexpr std::int64_t kFewRowsAcross = 16;
inline bool too_few_rows_across(const arrays& a) { return a.rows < kFewRowsAcross && a.horizon > 1; }

/// The most rows a time-major call may have to be walked flat (flat_rows): up to it,
/// flat beat across rows at every count measured (float32 GAE, T = 2048, this
/// 2-core machine, 2026-12-05: 16 rows 26 against 36 us, 32 rows 43 against 58;
/// 40 rows 53 against 62, not taken: unmeasured at other horizons and dtypes).
constexpr std::int64_t kMostFlatRows = 32;

/// N where a time-major call of N rows is walked interleaved, each vector full
/// (SB3's and CleanRL's few environments): N < W (along_time<N>: W / N steps of
/// every row per vector; along_time<0> where N does not divide W), or W < N <=
/// kMostFlatRows (flat_rows: the call as one flat row, each lane's step beside it
/// N lanes away); every line's rows adjacent and its steps N apart, no row sums;
/// else 0. (n_step_returns has neither walk: it gathers the calls of fewer than
/// kFewRowsAcross rows and walks the others across rows.)
template <typename C>
int interleaved_rows_of(const arrays& a) {
    static_assert((kMostFlatRows / W<C> + 2) * W<C> <= kFlatRing, "flat_rows' ring holds q + 2 vectors");
    const bool flat = a.rows > W<C> && a.rows <= kMostFlatRows;
    if (a.horizon <= 1 || a.rows < 2 || !(flat || a.rows <= W<C>) || wants_sums(a)) return 0;
    for (int k = 0; k < role_count; ++k) {
        const view& v = a.by_role[k];
        if (v.present && is_line(role(k)) && (v.row_stride != 1 || v.col_stride != a.rows)) return 0;
    }
    return static_cast<int>(a.rows);
}

/// Whether the traversals read the call's memory itself in arithmetic type C:
/// every float array of type C (float32 or float64), the flags (terminated,
/// truncated, greedy) all of that type or all bool/uint8 (`arithmetic_dones`:
/// terminated of type C, the puff advantage's), and a layout a traversal walks
/// (`interleaved_rows`: interleaved_rows_of, or 0 for a caller without those walks).
/// Every other call reads converted lines (engine_sources.hpp).
template <typename C>
bool reads_in_place(const arrays& a, bool arithmetic_dones, int interleaved_rows) {
    const bool bytes = byte_flags(a[role::terminated].type);
    for (int k = 0; k < role_count; ++k) {
        const view& v = a.by_role[k];
        const role r = role(k);
        if (!v.present || (is_per_row(r) && is_output(r))) continue;  // sums: float32 or float64 either way
        const bool flag = r == role::terminated || r == role::truncated || r == role::greedy || r == role::sample_mask;
        if (!flag && v.type != dtype_of<C>) return false;
        if (flag && (byte_flags(v.type) != bytes || (!bytes && v.type != dtype_of<C>))) return false;
    }
    if (arithmetic_dones && bytes) return false;
    const layout l = layout_of(a);
    return l == layout::time_contiguous ||
           (l == layout::row_adjacent && (!too_few_rows_across(a) || interleaved_rows > 0));
}

/// The arithmetic type of a call: double for float64 inputs, float for every other float dtype.
inline bool computes_in_double(const arrays& a) { return a[role::rewards].type == dtype::float64; }

/// Whether to store the outputs past the caches: outputs too large to stay
/// cached for whoever reads them next (saves reading each output line before
/// writing it: 65536x128 f32 time-major GAE, one thread, 6.0 -> 3.7 ms), whose
/// vectors all start 16-byte aligned, and which do not start at the same line
/// of a page as an input (outputs_share_page_lines: 27 ms instead of 9-16).
inline bool streams(const arrays& a) {
    const bool along_time = layout_of(a) == layout::time_contiguous;
    std::int64_t bytes = 0;
    for (role r : {role::advantages, role::returns}) {
        const view& v = a[r];
        if (!v.present) continue;
        const std::int64_t outer = (along_time ? v.row_stride : v.col_stride) * v.size;
        if (reinterpret_cast<std::uintptr_t>(v.base) % 16 != 0 || outer % 16 != 0) return false;
        bytes += a.rows * a.horizon * v.size;
    }
    // Does every present output start at the same line of a page as some input?
    auto line = [](const view& v) { return reinterpret_cast<std::uintptr_t>(v.base) % 4096 / 64; };
    bool any = false, all_shared = true;
    for (role out : {role::advantages, role::returns}) {
        if (!a[out].present) continue;
        bool shared = false;
        for (int k = 0; k < input_role_count; ++k)
            shared = shared || (a.by_role[k].present && !is_per_row(role(k)) && line(a.by_role[k]) == line(a[out]));
        all_shared = all_shared && shared;
        any = true;
    }
    if (any && all_shared) return false;
    return bytes >= kStreamingBytes;
}

/// How the traversals read a call, decided once by its entry: sets `a.walk`
/// (converted lines or the call's memory, streaming stores, interleaved rows).
/// `interleaved_walks`: false for a caller that has neither along_time<N> nor
/// flat_rows (n_step_returns).
template <typename C>
void choose_walk(arrays& a, bool arithmetic_dones, bool interleaved_walks = true) {
    const int n = interleaved_walks ? interleaved_rows_of<C>(a) : 0;
    const bool converting = !reads_in_place<C>(a, arithmetic_dones, n);
    a.walk = {converting, !converting && streams(a), converting ? 0 : n};
}

constexpr std::int64_t kElementsPerThread = 1 << 15;  // below this, extra threads cost more than they give

/// How a call's rows are shared out: along time or across rows, and in units of how many.
struct plan {
    bool along_time;
    std::int64_t unit;  // rows per unit of thread work
};

/// Converted lines are walked along time where time is the rows' inner
/// dimension (a whole row converted at once, up to kConvertedRowSteps), else
/// across rows in blocks of kBlockRows.
constexpr std::int64_t kConvertedRowSteps = 1 << 16;

inline plan plan_of(const arrays& a) {
    if (!a.walk.converting) {
        const bool along = layout_of(a) == layout::time_contiguous;
        return {along, along ? kSimdTileRows : simd_block_rows(a.rows)};
    }
    const view& r = a[role::rewards];
    const bool time_inner =
        a.rows <= 1 || std::llabs(r.col_stride) <= std::llabs(r.row_stride) || too_few_rows_across(a);
    const bool along = a.horizon <= 1 || (time_inner && a.horizon <= kConvertedRowSteps);
    return {along, along ? kSimdTileRows : kBlockRows};
}

/// Whether a converting call's flags are all of one byte and adjacent along its
/// traversal: read in place, by a producer of byte flags.
inline bool flags_stay_bytes(const arrays& a) {
    const plan how = plan_of(a);
    bool any = false;
    for (role r : {role::terminated, role::truncated, role::greedy}) {
        const view& v = a[r];
        if (!v.present) continue;
        const bool adjacent =
            how.along_time ? v.col_stride == 1 || a.horizon <= 1 : v.row_stride == 1 || a.rows <= 1;
        if (!byte_flags(v.type) || !adjacent) return false;
        any = true;
    }
    return any;
}

/// Runs producer p over every row of a call. Units of work: kSimdTileRows rows
/// along time (each ends with a store fence when streaming), or a block of rows
/// across them (long lines stream from memory). `arithmetic_dones`: the puff
/// advantage's, converted as values rather than as flags; `flag_bytes`: p reads
/// flags of one byte (flags_stay_bytes).
template <typename P>
void run_engine(const P& p, const arrays& a, bool arithmetic_dones = false, bool flag_bytes = false) {
    using C = typename P::scalar;
    if (const int n = a.walk.interleaved_rows) {  // one unit: a few thousand elements
        call_lines source(a);  // a step flagged both is terminated: no bad step (below)
        if (n == 2) along_time<2>(p, a, source, 0, 1);
        if (n == 4) along_time<4>(p, a, source, 0, 1);
        if constexpr (W<C> == 8) {
            if (n == 8) along_time<8>(p, a, source, 0, 1);
        }
        if (n < W<C> && W<C> % n != 0) along_time<0>(p, a, source, 0, 1);  // the lanes' rows move
        if (n > W<C>) flat_rows(p, a, source);
        return;
    }
    const plan how = plan_of(a);
    const std::int64_t unit = how.unit;
    const std::int64_t units = (a.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, a.rows * a.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    shared_bad_step bad;
    auto walk = [&](auto& source, std::int64_t first, int count) {
        if (!how.along_time) {
            bad.keep(across_rows(p, a, source, first, count));
        } else if (P::kForward) {
            bad.keep(along_time(p, a, source, first, count));
        } else {
            // Backward rows are walked downwards: a thread takes the mirror image of its
            // ascending units, so that its reads form one descending stream (ascending
            // units of descending rows ran 2.5x slower: the prefetcher restarted at each).
            bad.keep(along_time(p, a, source, a.rows - first - count, count));
        }
    };
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            const int count = static_cast<int>(std::min<std::int64_t>(unit, a.rows - first));
            if (a.walk.converting) {
                converting_lines<C> source(a, arithmetic_dones, flag_bytes, how.along_time ? a.horizon : count,
                                           !how.along_time);
                walk(source, first, count);
            } else {
                call_lines source(a);
                walk(source, first, count);
            }
        }
    });
    // A step flagged both terminated and truncated is terminated (issue 33), no error:
    // the producers read no bootstrap there (bootstrap_truncated), `bad` stays unused.
}

}  // namespace puffadv::detail::engine
