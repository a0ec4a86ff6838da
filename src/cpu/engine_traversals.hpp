// The CPU engine's traversals: they run any producer (engine.hpp) and know no
// estimator. P is a producer: P::scalar, P::kForward (the scan's direction),
// P::seed(row) (the carry before the first scanned step), P::prefetch_row(row)
// (hints for a row about to be read), P::produce(lanes) -> a step with .delta
// and .decay, P::finish(lanes, step, S_t, S') -> outputs, S' the S scanned
// just before S_t: S_{t+1} backwards, S_{t-1} forwards (the seed before step 0).
//   - along_time: time-contiguous rows ([B, T]), one at a time. A block of W
//     steps produces its maps, scans them in registers (cpu_scan.hpp) and
//     chains to the next block through one multiply-add: one dependent
//     operation per W steps. Rows are walked so that each array is read as one
//     stream (descending for backward scans, ascending for forward ones).
//   - across_rows: row-adjacent data (time-major [T, B]): a block of rows steps
//     through time together, W rows per vector, each lane its own recurrence
//     with the carries in a scratch line; no scan is needed.
// Both read their lines through a source (engine_sources.hpp): the call's
// memory itself, or converted copies of it (16-bit floats, other strides).
// run_engine (engine_run.hpp) picks the traversal and the source, and splits
// the rows between the CPU threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/engine_sources.hpp"

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

// S from the carry one step at a time. Out of line (rare); scalars and pointers
// only: a 32-byte vector passed out of line breaks between the clones (cpu_scan.hpp).
template <bool kForward, typename C>
__attribute__((noinline, cold)) void stepwise(const C* delta, const C* decay, C carry, C* s) {
    C x = carry;
    for (int j = 0; j < W<C>; ++j) {
        const int i = kForward ? j : W<C> - 1 - j;
        x = delta[i] + decay[i] * x;
        s[i] = x;
    }
}

// One block of W steps of a row; `chained` is the carry from the block scanned
// before (S_{t+W} backwards, S_{t-1} forwards), then this block's.
template <bool kEdge, bool kStepwise, typename P>
PUFF_SIMD_INLINE void time_block(const P& p, const arrays& a, const lines& row_lines, std::int64_t row,
                                 std::int64_t t, std::int64_t horizon, bool stream, V<typename P::scalar>& chained,
                                 simd::double_sums* sums, bad_step& bad) {
    using C = typename P::scalar;
    const time_lanes<C, kEdge> lanes{a, row_lines, row, t, horizon, stream, bad};
    auto step = p.produce(lanes);
    if constexpr (kEdge) {  // steps outside the row: identity-free zero maps, which leave S there 0
        const M<C> outside = ~lanes.valid();
        step.delta = simd::zero_where<C>(outside, step.delta);
        step.decay = simd::zero_where<C>(outside, step.decay);
    }
    alignas(32) C d[W<C>], k[W<C>];
    if constexpr (kStepwise) simd::store<C>(d, step.delta), simd::store<C>(k, step.decay);
    V<C> s, later;
    if constexpr (P::kForward) {
        simd::forward_scan<C>(step.delta, step.decay);
        s = step.delta + step.decay * chained;
    } else {
        simd::reverse_scan<C>(step.delta, step.decay);
        s = step.delta + step.decay * chained;
    }
    if constexpr (kStepwise) {
        // A finite scanned lane is right (a non-finite value never leaves a composition);
        // the others take the step-by-step value. A row's finite blocks stay bitwise those
        // of the first pass.
        if (!simd::all_finite<C>(s)) {
            alignas(32) C x[W<C>];
            stepwise<P::kForward, C>(d, k, chained[0], x);
            s = (s - s) == V<C>{} ? s : simd::load<C>(x);
        }
    }
    if constexpr (P::kForward) {
        later = simd::shift_in_earlier<C>(s, chained);  // S_{t-1} .. S_{t+W-2}: the step scanned before
        chained = simd::broadcast_last<C>(s);
    } else {
        later = simd::shift_in<C>(s, chained);  // S_{t+1} .. S_{t+W}
        chained = simd::broadcast_first<C>(s);
    }
    outputs<C> out = p.finish(lanes, step, s, later);
    if constexpr (kEdge) out.advantages = simd::zero_where<C>(~lanes.valid(), out.advantages);  // for the sums
    lanes.store(role::advantages, out.advantages);
    lanes.store(role::returns, out.returns);
    if (sums) sums->add(out.advantages);
}

// One row with its sums, its lines from `source`; returns the final carry.
template <bool kStepwise, typename P, typename Source>
PUFF_SIMD_INLINE V<typename P::scalar> whole_row(const P& p, const arrays& a, Source& source, std::int64_t row,
                                                 bool stream, bool want_sums, bad_step& bad) {
    using C = typename P::scalar;
    const std::int64_t T = a.horizon;
    simd::double_sums sums;
    simd::double_sums* sums_or_null = want_sums ? &sums : nullptr;
    V<C> chained = simd::splat<C>(p.seed(row));
    const lines row_lines = source.row(row);
#define PUFF_BLOCK(kEdge, t) \
    time_block<kEdge, kStepwise>(p, a, row_lines, row, t, T, stream, chained, sums_or_null, bad)
    if (T > 0 && P::kForward) {
        // The first block reads before the row (dt = -1), the last one may pass its end.
        const std::int64_t last = (T - 1) / W<C> * W<C>;
        PUFF_BLOCK(true, 0);
        if (last > 0) {
            for (std::int64_t t = W<C>; t < last; t += W<C>) PUFF_BLOCK(false, t);
            PUFF_BLOCK(true, last);
        }
    } else if (T > 0) {
        // The top block holds the row's last step (and reads past it, dt = +1).
        std::int64_t t = T - (T - 1) % W<C> - 1;
        PUFF_BLOCK(true, t);
        for (t -= W<C>; t >= 0; t -= W<C>) PUFF_BLOCK(false, t);
    }
#undef PUFF_BLOCK
    source.row_done(row);
    if (want_sums) {
        double totals[3] = {0, 0, 0};
        sums.total_into(totals);
        write_sums(a, row, totals);
    }
    return chained;
}

/// Rows [first, first + count), each row's steps adjacent in the source's lines.
template <typename P, typename Source>
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
        const V<C> carry = whole_row<false>(p, a, source, row, stream, want_sums, bad);
        if (__builtin_expect(!simd::all_finite<C>(carry), 0)) {
            lo = row < lo ? row : lo;
            hi = row > hi ? row : hi;
        }
    }
    for (std::int64_t row = lo; row <= hi; ++row) whole_row<true>(p, a, source, row, stream, want_sums, bad);
    if (stream) simd::fence();
    return bad;
}

template <typename C>
constexpr int kLineElements = 64 / sizeof(C);  // a cache line

// The lines of the step read next, prefetched a cache line ahead of this step's
// reads and writes: beside them, the hardware prefetcher restarted at every page
// of every step's line (65536x128 f32 time-major GAE, one thread, 8192-row
// blocks: 8.0 -> 6.4 ms). Row-adjacent lines of the call's memory only.
struct next_step_lines {
    static constexpr int kMost = role_count;
    const char* lines[kMost] = {};
    int sizes[kMost] = {};
    int count = 0;

    next_step_lines() = default;
    next_step_lines(const arrays& a, std::int64_t first, std::int64_t t) {
        if (t < 0 || t >= a.horizon) return;
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            // Streamed outputs have no line to fetch; truncated is rarely set (its bootstraps: not at all).
            if (!v.present || !is_line(role(k)) || k == int(role::truncated) || (a.stream && is_output(role(k))))
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
    for (std::int64_t step = 0; step < T; ++step) {
        const std::int64_t t = P::kForward ? step : T - 1 - step;
        const next_step_lines ahead = source.ahead(first, P::kForward ? t + 1 : t - 1);
        const lines step_lines = source.step(first, n, t, P::kForward);
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
