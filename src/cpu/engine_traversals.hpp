// The CPU engine's traversals: they run any producer (engine.hpp) and know no
// estimator. P is a producer: P::scalar, P::kForward (the scan's direction),
// P::seed(row) (the carry before the first scanned step), P::prefetch_row(row)
// (hints for a row about to be read), P::produce(lanes) -> a step with .delta
// and .decay, P::finish(lanes, step, S_t, S') -> outputs, S' the S scanned
// just before S_t: S_{t+1} backwards, S_{t-1} forwards (the seed before step 0).
//   - along_time: time-contiguous rows ([B, T]), one at a time. A block of W
//     steps produces its maps, scans them in registers (cpu_scan.hpp) and chains
//     to the next block through one multiply-add: one dependent operation per W
//     steps. Each array is read as one stream (backward scans descend).
//   - across_rows: row-adjacent data (time-major [T, B]): a block of rows steps
//     through time together, W rows per vector, each lane its own recurrence
//     with the carries in a scratch line; no scan is needed.
//   - along_time<N>, flat_rows: time-major calls of N rows, few (N < W, or
//     W < N <= kMostFlatRows), walked as one row with each lane's step beside it
//     N lanes away. Lines come through a source (engine_sources.hpp): the call's
//     memory or converted copies. run_engine (engine_run.hpp) picks the walk and
//     the source, and splits the rows between the CPU threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/engine_sources.hpp"
#include "cpu/interleaved_moves.hpp"

namespace puffadv::detail::engine {

// The scan's composed maps multiply W decays together, and that product can
// overflow where every step's own arithmetic stays finite (decays of 1e5 over
// zero inputs: inf * 0 gave NaN where S is 0). A non-finite value never leaves
// the carry once in it (inf and NaN survive + and *; 0 * inf is NaN), and the
// carry takes a lane that composes every lane of its block, so a row whose
// final carry is finite had finite S everywhere: along_time tests that one
// vector per row (nothing per block), and computes a row where it fails again
// (kStepwise), each non-finite lane of a block step by step, as the recurrence
// defines it: its own value, an inf or a NaN of the inputs' included. Outputs
// never share memory with inputs (check_output), and a source loads a row's
// lines again at each row(), so the row's inputs are still there.

// S from the carries one step at a time (lane i's carry in carry[i]; n rows
// interleaved: a lane's step beside it is n lanes away). Out of line (rare); scalars
// and pointers only: a 32-byte vector passed out of line breaks between the clones
// (cpu_scan.hpp).
template <bool kForward, typename C>
__attribute__((noinline, cold)) void stepwise(const C* delta, const C* decay, const C* carry, C* s, int n) {
    for (int j = 0; j < W<C>; ++j) {
        const int i = kForward ? j : W<C> - 1 - j;
        const C before = kForward ? (i >= n ? s[i - n] : carry[i]) : (i + n < W<C> ? s[i + n] : carry[i]);
        s[i] = delta[i] + decay[i] * before;
    }
}

// One step's maps from p; in an edge block the lanes outside the row take
// identity-free zero maps, which leave S there 0.
template <bool kEdge, typename P, typename Lanes>
PUFF_SIMD_INLINE auto produce_step(const P& p, const Lanes& lanes) {
    auto step = p.produce(lanes);
    if constexpr (kEdge) {
        const M<typename P::scalar> outside = ~lanes.valid();
        step.delta = simd::zero_where<typename P::scalar>(outside, step.delta);
        step.decay = simd::zero_where<typename P::scalar>(outside, step.decay);
    }
    return step;
}

template <typename Lanes, typename C>
PUFF_SIMD_INLINE void store_outputs(const Lanes& lanes, const outputs<C>& out) {
    lanes.store(role::advantages, out.advantages);
    lanes.store(role::returns, out.returns);
}

// One block of W steps of a row (N rows interleaved: W / N steps of N rows);
// `chained` is the carry from the block scanned before (S_{t+W} backwards,
// S_{t-1} forwards; per row, repeated; N = 0: that block's S as it is), then this block's.
template <bool kEdge, bool kStepwise, int N, typename P>
PUFF_SIMD_INLINE void time_block(const P& p, const arrays& a, const lines& row_lines, std::int64_t row,
                                 std::int64_t t, std::int64_t horizon, bool stream, V<typename P::scalar>& chained,
                                 simd::double_sums* sums, bad_step& bad,
                                 const moves_of<N, typename P::scalar>& moves) {
    using C = typename P::scalar;
    const time_lanes<C, kEdge, N> lanes{a, row_lines, row, t, horizon, stream, bad, N == 0 ? int(a.rows) : 0};
    auto step = produce_step<kEdge>(p, lanes);
    alignas(32) C d[W<C>], k[W<C>];
    if constexpr (kStepwise) simd::store<C>(d, step.delta), simd::store<C>(k, step.decay);
    V<C> s, later, carried = chained;
    if constexpr (N == 0) {
        carried = moves.carry(chained);
        moves.scan(step.delta, step.decay);
    } else if constexpr (P::kForward) {
        simd::forward_scan<C, N>(step.delta, step.decay);
    } else {
        simd::reverse_scan<C, N>(step.delta, step.decay);
    }
    s = step.delta + step.decay * carried;
    if constexpr (kStepwise) {
        // A finite scanned lane is right (a non-finite value never leaves a composition);
        // the others take the step-by-step value. A row's finite blocks stay bitwise those
        // of the first pass.
        if (!simd::all_finite<C>(s)) {
            alignas(32) C x[W<C>], carry[W<C>];
            simd::store<C>(carry, carried);
            stepwise<P::kForward, C>(d, k, carry, x, lanes.rows());
            s = (s - s) == V<C>{} ? s : simd::load<C>(x);
        }
    }
    if constexpr (N == 0) {
        later = moves.later(s, chained);
        chained = s;
    } else if constexpr (P::kForward) {
        later = simd::shift_in_earlier<C, N>(s, chained);  // S_{t-1} .. S_{t+W-2}: the step scanned before
        chained = simd::tile_last<N, C>(s);
    } else {
        later = simd::shift_in<C, N>(s, chained);  // S_{t+1} .. S_{t+W}
        chained = simd::tile_first<N, C>(s);
    }
    outputs<C> out = p.finish(lanes, step, s, later);
    if constexpr (kEdge) out.advantages = simd::zero_where<C>(~lanes.valid(), out.advantages);  // for the sums
    store_outputs(lanes, out);
    if (sums) sums->add(out.advantages);
}

// One row with its sums, its lines from `source`; returns a vector with a non-finite
// lane where a step's S was not finite. N > 1 (or 0: a.rows, not dividing W): the
// call's rows interleaved (along_time<N>), `row` 0, no sums.
template <bool kStepwise, int N = 1, typename P, typename Source>
PUFF_SIMD_INLINE V<typename P::scalar> whole_row(const P& p, const arrays& a, Source& source, std::int64_t row,
                                                 bool stream, bool want_sums, bad_step& bad) {
    using C = typename P::scalar;
    const int n = N == 0 ? static_cast<int>(a.rows) : N;
    const std::int64_t T = a.horizon * n;
    const std::int64_t top = T - (T - 1) % W<C> - 1;  // the block that holds the last step
    simd::double_sums sums;
    simd::double_sums* sums_or_null = want_sums ? &sums : nullptr;
    const moves_of<N, C> moves = moves_for<N, C>(n, P::kForward);
    V<C> chained;
    if constexpr (N == 1) {
        chained = simd::splat<C>(p.seed(row));  // one read of the seed (the episodic kinds' last_value)
    } else if constexpr (N > 1) {
        alignas(32) C seeds[W<C>];
        for (int i = 0; i < W<C>; ++i) seeds[i] = p.seed(row + i % N);  // each lane its row's
        chained = simd::load<C>(seeds);
    } else {  // the block beside the first scanned, each lane its flattened position's row's seed
        alignas(32) C seeds[W<C>];
        const std::int64_t beside = P::kForward ? -W<C> : top + W<C>;
        for (int i = 0; i < W<C>; ++i) seeds[i] = p.seed(((beside + i) % n + n) % n);
        chained = simd::load<C>(seeds);
    }
    // N = 0: a row's last scanned step may lie in the block before the last (a block
    // holds steps of rows that change), so both blocks' S are kept for the check.
    V<C> before_last = V<C>{};
    const lines row_lines = source.row(row);
#define PUFF_BLOCK(kEdge, t)                                                                             \
    {                                                                                                    \
        if constexpr (N == 0) before_last = chained;                                                     \
        time_block<kEdge, kStepwise, N>(p, a, row_lines, row, t, T, stream, chained, sums_or_null, bad, moves); \
    }
    // N = 0: the block below the top may hold last steps too, and read past the end
    // (dt = +1, n lanes on): it takes the edge path as well.
    // (No lambda: it would not be compiled for the clone's target.)
    const std::int64_t plain_up_to = T - W<C> - n;
    if (T > 0 && P::kForward) {
        // The first block reads before the row (dt = -1), the last one may pass its end.
        const std::int64_t last = (T - 1) / W<C> * W<C>;
        PUFF_BLOCK(true, 0);
        if (last > 0) {
            for (std::int64_t t = W<C>; t < last; t += W<C>) {
                if (N == 0 && t > plain_up_to) PUFF_BLOCK(true, t) else PUFF_BLOCK(false, t)
            }
            PUFF_BLOCK(true, last);
        }
    } else if (T > 0) {
        // The top block holds the row's last step (and reads past it, dt = +1).
        std::int64_t t = top;
        PUFF_BLOCK(true, t);
        for (t -= W<C>; t >= 0; t -= W<C>) {
            if (N == 0 && t > plain_up_to) PUFF_BLOCK(true, t) else PUFF_BLOCK(false, t)
        }
    }
#undef PUFF_BLOCK
    source.row_done(row);
    if (want_sums) {
        double totals[3] = {0, 0, 0};
        sums.total_into(totals);
        write_sums(a, row, totals);
    }
    return N == 0 ? chained + before_last : chained;
}

/// Rows [first, first + count), each row's steps adjacent in the source's lines.
/// N > 1: the N rows of a time-major call (N dividing W; rows adjacent, steps N
/// apart, no sums; first 0, count 1), its memory read as one row whose lanes hold
/// W / N steps of the N rows, so that each vector is full and each row's carry
/// stays in its lanes (across_rows filled N of W lanes, and loaded and stored the
/// carries every step). SB3's and CleanRL's few environments. N = 0: the same
/// for a.rows rows that do not divide W (3, 5, 6, 7 of 8 lanes; 3 of 4), whose
/// carries move between lanes from block to block (interleaved_moves).
template <int N = 1, typename P, typename Source>
PUFF_SIMD_CLONES bad_step along_time(const P& producer, const arrays& a, Source& source, std::int64_t first,
                                     int count) {
    using C = typename P::scalar;
    const P p = producer;  // a local: its coefficients stay in registers across the vector stores
    const bool want_sums = wants_sums(a), stream = source.streams();
    bad_step bad;
    // The rows whose final carry is not finite lie in [lo, hi] (see above). Only
    // noted in the loop: a call to the stepwise pass inside it cost the hot loop
    // 6 % (65536x128 f32 GAE, one thread), its registers spilled around the call.
    std::int64_t lo = first + count, hi = first - 1;
    for (int j = 0; j < count; ++j) {
        const std::int64_t row = P::kForward ? first + j : first + count - 1 - j;
        if (j + 1 < count) p.prefetch_row(P::kForward ? row + 1 : row - 1);
        const V<C> carry = whole_row<false, N>(p, a, source, row, stream, want_sums, bad);
        if (__builtin_expect(!simd::all_finite<C>(carry), 0)) {
            lo = row < lo ? row : lo;
            hi = row > hi ? row : hi;
        }
    }
    for (std::int64_t row = lo; row <= hi; ++row) whole_row<true, N>(p, a, source, row, stream, want_sums, bad);
    if (stream) simd::fence();
    return bad;
}

// The carries of a flat walk: S by flattened position modulo kFlatRing, stored and
// loaded as whole aligned vectors (a load across two recent stores waits for both
// to leave the store buffer).
constexpr int kFlatRing = 64;

// W consecutive elements of the flattened time-major call of n >= W rows: no
// lane's step beside it lies in its own vector, so each lane's S comes from the
// carries in one step (no scan; the decays are never multiplied together). The
// step beside lane i lies n = q W + r elements away, in the vectors q and q + 1
// away: for q = 1 the two scanned last (`nearer`, `farther`: registers, since a
// load of a vector stored one block before waits for the store), else the ring.
template <bool kEdge, typename P>
PUFF_SIMD_INLINE void flat_block(const P& p, const arrays& a, const lines& call_lines, std::int64_t t,
                                 std::int64_t horizon, int n, int q, int r, const M<typename P::scalar>& index,
                                 V<typename P::scalar>& nearer, V<typename P::scalar>& farther, bool stream,
                                 typename P::scalar* ring, bad_step& bad) {
    using C = typename P::scalar;
    constexpr int kMask = kFlatRing - 1;
    const time_lanes<C, kEdge, 0> lanes{a, call_lines, 0, t, horizon, stream, bad, n};
    auto step = produce_step<kEdge>(p, lanes);
    const std::int64_t away = P::kForward ? -W<C> : W<C>;  // S at t - n forwards, t + n backwards
    const V<C> near = q == 1 ? nearer : simd::load<C>(ring + ((t + q * away) & kMask));
    V<C> later = near;
    if (r != 0) {
        const V<C> far = q == 1 ? farther : simd::load<C>(ring + ((t + (q + 1) * away) & kMask));
        later = P::kForward ? simd::window<C>(far, near, index) : simd::window<C>(near, far, index);
    }
    const V<C> s = step.delta + step.decay * later;
    simd::store<C>(ring + (t & kMask), s);
    farther = nearer;
    nearer = s;
    store_outputs(lanes, p.finish(lanes, step, s, later));
}

/// Every row of a time-major call of n rows, W < n <= kMostFlatRows (rows
/// adjacent, steps n apart, no sums): the call's memory walked as one flat row
/// of W-lane vectors, each lane's carry n elements away. along_time<N> serves
/// n dividing W, where a row's next step lies in the same vector; here it never
/// does. across_rows would fill a partial group every step and walk each step's
/// lines apart.
template <typename P, typename Source>
PUFF_SIMD_CLONES bad_step flat_rows(const P& producer, const arrays& a, Source& source) {
    using C = typename P::scalar;
    const P p = producer;
    const bool stream = source.streams();
    bad_step bad;
    const int n = static_cast<int>(a.rows), q = n / W<C>, r = n % W<C>;
    const std::int64_t T = a.horizon * n;
    const lines call_lines = source.row(0);
    alignas(32) C ring[kFlatRing];
    // The seeds in the vectors the walk reads before it writes them: q + 1 past the
    // top block (backwards) or before step 0 (forwards), each lane its own row's.
    const std::int64_t top = T - (T - 1) % W<C> - 1;
    const std::int64_t first_read = P::kForward ? -(q + 1) * W<C> : top + W<C>;
    for (std::int64_t pos = first_read; pos < first_read + (q + 1) * W<C>; ++pos)
        ring[pos & (kFlatRing - 1)] = p.seed(((pos % n) + n) % n);
    const std::int64_t away = P::kForward ? -W<C> : W<C>, start = P::kForward ? 0 : top;
    V<C> nearer = simd::load<C>(ring + ((start + away) & (kFlatRing - 1)));
    V<C> farther = simd::load<C>(ring + ((start + 2 * away) & (kFlatRing - 1)));
    const M<C> index = simd::window_index<C>(P::kForward && r != 0 ? W<C> - r : r);
    // Blocks that read before step 0 (dt = -1) or past the last (dt = +1), or hold
    // lanes past the end, take the edge path. (No lambda: it would not be compiled
    // for the clone's target.)
    for (std::int64_t j = 0, t = P::kForward ? 0 : top; j <= top; j += W<C>, t += P::kForward ? W<C> : -W<C>) {
        if (t < n || t + n + W<C> > T)
            flat_block<true>(p, a, call_lines, t, T, n, q, r, index, nearer, farther, stream, ring, bad);
        else
            flat_block<false>(p, a, call_lines, t, T, n, q, r, index, nearer, farther, stream, ring, bad);
    }
    if (stream) simd::fence();
    return bad;
}

template <typename C>
constexpr int kLineElements = 64 / sizeof(C);  // a cache line

// The lines of the step read next, prefetched a cache line ahead of this step's
// reads and writes: beside them, the hardware prefetcher restarted at every page
// of every step's line (65536x128 f32 time-major GAE, one thread, 8192-row
// blocks: 8.0 -> 6.4 ms). Row-adjacent lines of the call's memory only.
// Blocks of fewer rows go without: their steps' lines stay in the caches (2048
// rows are 8 KB float32 lines), and the prefetches cost more than they saved
// (time-major f32 GAE, this 2-core machine, 2026-12-04, T x B: 128x16384 (blocks of 2048
// rows) 730-745 us without, 800-819 with; 128x4096 184 against 214-233; 128x32768
// (blocks of 4096) 1719-1806 without, 1659-1679 with).
constexpr int kPrefetchedBlockRows = 4096;

struct next_step_lines {
    static constexpr int kMost = role_count;
    const char* lines[kMost];  // the first `count` only: nothing is zeroed per step
    int sizes[kMost];
    int count = 0;

    next_step_lines() = default;
    next_step_lines(const arrays& a, std::int64_t first, std::int64_t t, int rows) {
        if (t < 0 || t >= a.horizon || rows < kPrefetchedBlockRows) return;
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            // Streamed outputs have no line to fetch; truncated is rarely set (its bootstraps: not at all).
            if (!v.present || !is_line(role(k)) || k == int(role::truncated) || (a.walk.stream && is_output(role(k))))
                continue;
            lines[count] = static_cast<const char*>(v.at(first, t)), sizes[count++] = v.size;
        }
    }
    PUFF_SIMD_INLINE void prefetch(std::int64_t i) const {
        for (int j = 0; j < count; ++j) __builtin_prefetch(lines[j] + i * sizes[j]);
    }
};

// Per thread and arithmetic type, grown to the largest block seen: the carries
// and the row sums (+ W: the last, partial group's lanes).
template <typename C>
struct block_scratch {
    std::vector<C> carry;
    std::vector<double> sums;
};

// One group of W rows at step t.
template <bool kEdge, typename P>
PUFF_SIMD_INLINE void row_group(const P& p, const arrays& a, const lines& step_lines, std::int64_t first, int i,
                                std::int64_t t, std::int64_t horizon, int n, bool stream, typename P::scalar* carry,
                                double* sums, std::size_t pitch, bad_step& bad) {
    using C = typename P::scalar;
    const row_lanes<C, kEdge> lanes{a, step_lines, first + i, t, horizon, i, n, stream, bad};
    const auto step = p.produce(lanes);
    const V<C> later = simd::load<C>(carry);
    const V<C> s = step.delta + step.decay * later;
    simd::store<C>(carry, s);
    const outputs<C> out = p.finish(lanes, step, s, later);
    lanes.store(role::advantages, out.advantages);
    lanes.store(role::returns, out.returns);
    if (sums) simd::add_to_lanes(out.advantages, sums, sums + pitch, sums + 2 * pitch);
}

/// Rows [first, first + n), a step's rows adjacent in the source's lines.
template <typename P, typename Source>
PUFF_SIMD_CLONES bad_step across_rows(const P& producer, const arrays& a, Source& source, std::int64_t first,
                                      int n) {
    using C = typename P::scalar;
    const P p = producer;  // a local: its coefficients stay in registers across the vector stores
    static thread_local block_scratch<C> scratch;
    const std::size_t pitch = std::size_t(n) + W<C>;
    const bool want_sums = wants_sums(a);
    if (scratch.carry.size() < pitch) scratch.carry.resize(pitch);
    if (want_sums && scratch.sums.size() < 3 * pitch) scratch.sums.resize(3 * pitch);
    C* const carry = scratch.carry.data();  // hoisted: a thread_local's address was re-derived per vector
    double* const sums = want_sums ? scratch.sums.data() : nullptr;
    for (int i = 0; i < n; ++i) carry[i] = p.seed(first + i);
    if (sums) std::fill(sums, sums + 3 * pitch, 0.0);
    const int full = n - n % W<C>;
    const std::int64_t T = a.horizon;
    const bool stream = source.streams();
    bad_step bad;
    lines step_lines = source.start_lines();
    for (std::int64_t step = 0; step < T; ++step) {
        const std::int64_t t = P::kForward ? step : T - 1 - step;
        const next_step_lines ahead = source.ahead(first, P::kForward ? t + 1 : t - 1, n);
        source.step(step_lines, first, n, t, P::kForward);
        for (int i = 0; i < full; i += W<C>) {
            if (i % kLineElements<C> == 0) ahead.prefetch(i);
            row_group<false>(p, a, step_lines, first, i, t, T, W<C>, stream, carry + i, sums ? sums + i : nullptr,
                             pitch, bad);
        }
        if (full < n)
            row_group<true>(p, a, step_lines, first, full, t, T, n - full, stream, carry + full,
                            sums ? sums + full : nullptr, pitch, bad);
        source.step_done(first, n, t);
    }
    if (sums)
        for (int i = 0; i < n; ++i) {
            const double totals[3] = {sums[i], sums[pitch + i], sums[2 * pitch + i]};
            write_sums(a, first + i, totals);
        }
    if (stream) simd::fence();
    return bad;
}

}  // namespace puffadv::detail::engine
