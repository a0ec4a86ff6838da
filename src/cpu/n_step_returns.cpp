// n_step_returns on the CPU: the family's one estimator that is no first-order
// scan (its return G^(n)_t sums a window of n steps ahead, which no map of
// S_{t+1} alone gives), so a traversal of its own beside the engine's
// (engine_traversals.hpp), over the same lanes and sources (engine_sources.hpp:
// every dtype and stride), with the definitions of estimators_family.hpp:
//   W1_t = r_t + gamma V'_t (0 where terminated)
//   Wj_t = W1_t + gamma lambda (W(j-1)_{t+1} - V'_t) (0 where done); all W1 at the row's last step
//   G^(n)_t = Wn_t, A_t = G_t - V_t
// V'_t = V_{t+1}; the end value after the last step; bootstrap_values where truncated.
//   - windows (n <= kWindowSteps): a block of rows steps back through time, W
//     rows per vector, keeping W1 .. Wn of the later step in a scratch line per level;
//   - long windows (kWindowSteps < n < T): one O(T) pass per row (below);
//   - n >= T: every window runs to its episode's or the row's end, where G^(n)
//     is the TD(lambda) return (FAMILY.md 4): the engine's TD(lambda) scan.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/backends.hpp"  // estimate_cpu: n >= T runs as TD(lambda)
#include "cpu/cpu_threads.hpp"
#include "cpu/engine_run.hpp"
#include "cpu/n_step_returns.hpp"

namespace puffadv::detail::engine {
namespace {

constexpr std::int64_t kWindowSteps = 64;               // longer windows take the O(T) pass
constexpr std::int64_t kWindowScratchBytes = 1 << 21;   // the n lines of W per block
constexpr int kStridedBlockRows = 64;  // rows per block where a step's rows are not adjacent: their lines stay in L1

template <typename C>
struct n_step_scalars {
    C gamma, lambda;
    std::int64_t n;
    // The value after the row's last step: last_value, bootstrap_values[T-1], or 0.
    C value_after_end(const arrays& a, std::int64_t row) const {
        if (a[role::last_value].present) return element<C>(a[role::last_value], row, 0);
        if (a[role::bootstrap_values].present) return element<C>(a[role::bootstrap_values], row, a.horizon - 1);
        return C(0);
    }
};

template <typename C>
struct window_scratch {
    std::vector<C> windows;
    std::vector<double> sums;
};

// One group of W rows at step t: the windows of step t from those of t + 1 (in place,
// from the longest down), and the outputs.
template <typename C, typename F, bool kEdge>
PUFF_SIMD_INLINE void window_group(const arrays& a, const n_step_scalars<C>& p, const lines& step_lines,
                                   std::int64_t first, int i, int count, std::int64_t t, int levels, C* windows,
                                   std::size_t pitch, double* sums, bool stream, bad_step& bad) {
    const row_lanes<C, kEdge> in{a, step_lines, first + i, t, a.horizon, i, count, stream, bad};
    const V<C> gamma = simd::splat<C>(p.gamma), gamma_lambda = simd::splat<C>(p.gamma * p.lambda);
    auto zero = [](std::int64_t) { return C(0); };
    auto end = [&](std::int64_t row) { return p.value_after_end(a, row); };
    const M<C> terminated = in.template flags<F>(role::terminated, 0);
    M<C> done = terminated;
    V<C> boot = in.values(role::values, 1, end);
    if (in.present(role::truncated)) {
        const M<C> truncated = in.template flags<F>(role::truncated, 0);
        if (simd::any_lane<C>(truncated)) {  // rare: a branch per vector
            boot = bootstrap_truncated<C>(in, boot, truncated, terminated);
            done |= truncated;
        }
    }
    const bool last = t == a.horizon - 1;
    const V<C> w1 = in.values(role::rewards, 0, zero) + simd::zero_where<C>(terminated, gamma * boot);
    V<C> w = w1;
    for (int j = levels - 1; j >= 1; --j) {
        C* level = windows + std::size_t(j) * pitch + i;
        const V<C> wj =
            last ? w1 : w1 + simd::zero_where<C>(done, gamma_lambda * (simd::load<C>(level - pitch) - boot));
        if (j == levels - 1) w = wj;
        simd::store<C>(level, wj);
    }
    simd::store<C>(windows + i, w1);
    const V<C> advantage = w - in.values(role::values, 0, zero);
    in.store(role::advantages, advantage);
    in.store(role::returns, w);  // G^(n) itself, not (G - V) + V
    if (sums) simd::add_to_lanes(advantage, sums + i, sums + pitch + i, sums + 2 * pitch + i);
}

// Rows [first, first + n) stepping back through time.
template <typename C, typename F, typename Source>
PUFF_SIMD_CLONES bad_step windows_across_rows(const arrays& a, const n_step_scalars<C>& p, Source& source,
                                              std::int64_t first, int n) {
    const bool want_sums = wants_sums(a);
    const int levels = static_cast<int>(std::max<std::int64_t>(1, p.n));  // n < T here
    const std::size_t pitch = std::size_t(n) + W<C>;
    static thread_local window_scratch<C> scratch;
    if (scratch.windows.size() < pitch * levels) scratch.windows.resize(pitch * levels);
    if (want_sums && scratch.sums.size() < 3 * pitch) scratch.sums.resize(3 * pitch);
    C* const windows = scratch.windows.data();  // W_j of the later step at windows[(j - 1) pitch]
    double* const sums = want_sums ? scratch.sums.data() : nullptr;
    if (sums) std::fill(sums, sums + 3 * pitch, 0.0);
    const bool stream = source.streams();
    const int full = n - n % W<C>;
    bad_step bad;
    for (std::int64_t t = a.horizon - 1; t >= 0; --t) {
        const lines step_lines = source.step(first, n, t, false);
        const next_step_lines ahead = source.ahead(first, t - 1);
        for (int i = 0; i < full; i += W<C>) {
            if (i % kLineElements<C> == 0) ahead.prefetch(i);
            window_group<C, F, false>(a, p, step_lines, first, i, W<C>, t, levels, windows, pitch, sums, stream, bad);
        }
        if (full < n)
            window_group<C, F, true>(a, p, step_lines, first, full, n - full, t, levels, windows, pitch, sums, stream,
                                     bad);
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

// Steps [t, t + count) of one row into `buffer` (always a copy: the caller patches it).
template <typename C>
C* copy_along(const view& v, std::int64_t row, std::int64_t t, int count, C* buffer, bool flag) {
    load<C>(v.type, v.at(row, t), v.col_stride, count, buffer, flag);
    return buffer;
}

template <typename C>
const C* line_along(const view& v, std::int64_t row, std::int64_t t, int count, C* buffer, bool flag) {
    return line_of<C>(v, row, t, v.col_stride, count, buffer, flag);
}

// ---- n_step_returns with 64 < n < T: O(T) per row ----
//
// The window code costs O(T min(n, T)) per row (n = 10^5 on rows of 131072 steps: minutes). For
// long windows each row is one backward pass instead, over the TD(lambda) return Lambda (the
// n >= T result) and D_t = Lambda_t - W1_t = gamma lambda (1 - done_t) (Lambda_{t+1} - V'_t)
// (0 at the row's last step). Lambda - Wj obeys the same decay as Lambda, so
//     G^(n)_t = Lambda_t - (gamma lambda)^(n - 1) D_{t+n-1}  where no step in [t, t+n-2] is done
//                                                            and t + n - 1 < T,
//             = Lambda_t                                     otherwise (the window is cut).
// In double: in float32 the subtraction cancels when gamma lambda is near 1. One difference from
// the window: a NaN or inf past the window but inside the episode reaches G_t (through Lambda_t
// and D_{t+n-1}); it stays in its row.
constexpr int kLongChunk = 512;  // steps loaded, produced and stored at a time

// Rows [first, first + count), one at a time; scratch: D (T doubles) and a few chunk lines,
// released on return.
template <typename C>
bad_step long_windows(const arrays& a, const n_step_scalars<C>& p, std::int64_t first, std::int64_t count) {
    const std::int64_t T = a.horizon;
    const double gamma = double(p.gamma), gl = double(p.gamma) * double(p.lambda);
    // (gamma lambda)^(n - 1); 0 when it underflows (a cut window then, as in double arithmetic).
    const double decay = std::pow(gl, double(p.n - 1));
    const bool sum = wants_sums(a);
    std::vector<double> d(static_cast<std::size_t>(T));
    std::vector<C> lines(static_cast<std::size_t>(6 * kLongChunk));
    C* const r_buf = lines.data();
    C* const v_buf = r_buf + kLongChunk;
    C* const term = v_buf + kLongChunk;
    C* const trunc = term + kLongChunk;
    C* const g = trunc + kLongChunk;
    C* const adv = g + kLongChunk;
    bad_step bad;
    for (std::int64_t row = first; row < first + count; ++row) {
        double lambda_later = 0;         // Lambda_{t+1}
        double v_later = 0;              // V_{t+1}
        std::int64_t next_done = T;      // the first done step at or after t (T: none)
        double sums[3] = {0, 0, 0};
        for (std::int64_t hi = T; hi > 0; hi -= kLongChunk) {
            const std::int64_t lo = std::max<std::int64_t>(0, hi - kLongChunk);
            const int m = static_cast<int>(hi - lo);
            const C* r = line_along(a[role::rewards], row, lo, m, r_buf, false);
            const C* v = line_along(a[role::values], row, lo, m, v_buf, false);
            copy_along(a[role::terminated], row, lo, m, term, true);
            if (a[role::truncated].present)
                copy_along(a[role::truncated], row, lo, m, trunc, true);
            else
                std::fill(trunc, trunc + m, C(0));
            for (int j = m - 1; j >= 0; --j) {
                const std::int64_t t = lo + j;
                const bool terminated = term[j] != C(0), truncated = trunc[j] != C(0);
                // V'_t: V_{t+1} inside the row, the bootstrap at truncations and after the last step.
                double boot;
                if (truncated && !terminated)  // flagged both: terminated (issue 33), no bootstrap read
                    boot = double(load_one<C>(a[role::bootstrap_values], row, t));
                else if (t == T - 1)
                    boot = double(p.value_after_end(a, row));
                else
                    boot = v_later;
                // A terminated step never reads V' (a NaN there stays out), nor a done one Lambda_{t+1}.
                const double w1 = double(r[j]) + (terminated ? 0.0 : gamma * boot);
                const double dt = (terminated || truncated || t == T - 1) ? 0.0 : gl * (lambda_later - boot);
                const double lambda_t = w1 + dt;
                d[static_cast<std::size_t>(t)] = dt;
                if (terminated || truncated) next_done = t;
                const std::int64_t far = t + p.n - 1;  // the window's last step
                double gt = lambda_t;
                if (far < T && next_done >= far && decay != 0.0) gt -= decay * d[static_cast<std::size_t>(far)];
                g[j] = C(gt);
                adv[j] = C(gt - double(v[j]));
                lambda_later = lambda_t;
                v_later = double(v[j]);
            }
            if (a[role::advantages].present) store<C>(a[role::advantages].type, a[role::advantages].at(row, lo), a[role::advantages].col_stride, m, adv);
            if (a[role::returns].present)
                store<C>(a[role::returns].type, a[role::returns].at(row, lo), a[role::returns].col_stride, m, g);
            if (sum)
                for (int j = 0; j < m; ++j) {
                    const double x = adv[j];
                    sums[0] += std::fabs(x), sums[1] += x, sums[2] += x * x;
                }
        }
        if (sum) write_sums(a, row, sums);
    }
    return bad;
}

}  // namespace

template <typename C>
void n_step_returns_in(const arrays& a, const standard_params& params, bool converting) {
    const n_step_scalars<C> p{C(params.gamma), C(params.lambda), params.n};
    shared_bad_step bad;
    const std::int64_t by_work = std::max<std::int64_t>(1, a.rows * a.horizon / kElementsPerThread);
    if (p.n > kWindowSteps) {  // whole rows per thread, in O(T) each
        const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), a.rows, by_work}));
        parallel_ranges(threads, a.rows, [&](std::int64_t begin, std::int64_t end) {
            bad.keep(long_windows<C>(a, p, begin, end - begin));
        });
        return;  // a step flagged both is terminated (issue 33): `bad` is not an error
    }
    // Where a step's rows are adjacent, long lines stream from memory (simd_block_rows); elsewhere
    // the block's cache lines stay in L1 through the steps that share them. Each block keeps
    // min(n, T) lines of W besides.
    const bool adjacent = layout_of(a) == layout::row_adjacent || a.rows <= 1 ||
                          (layout_of(a) == layout::time_contiguous && a.horizon <= 1);
    const std::int64_t rows = adjacent ? simd_block_rows(a.rows) : kStridedBlockRows;
    const std::int64_t fit = kWindowScratchBytes / (std::max<std::int64_t>(1, p.n) * std::int64_t(sizeof(C)));
    const std::int64_t unit = std::clamp<std::int64_t>(fit, 1, rows);
    const std::int64_t units = (a.rows + unit - 1) / unit;
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    // Across rows in place: row-adjacent lines of C (flags of C or one byte); else converted lines.
    const bool in_place = !converting && adjacent;
    const bool bytes = byte_flags(a[role::terminated].type);
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            const int count = static_cast<int>(std::min<std::int64_t>(unit, a.rows - first));
            if (in_place) {
                call_lines source{a};
                bad.keep(bytes ? windows_across_rows<C, std::uint8_t>(a, p, source, first, count)
                               : windows_across_rows<C, C>(a, p, source, first, count));
            } else {
                converting_lines<C> source(a, false, count, true);
                bad.keep(windows_across_rows<C, C>(a, p, source, first, count));
            }
        }
    });
    // a step flagged both terminated and truncated is terminated (issue 33): `bad` is not an error
}

void n_step_returns_cpu(const standard_arrays& call, arrays& a, const standard_params& params, bool converting) {
    if (params.n >= a.horizon) {
        standard_params td = params;
        td.kind = estimator::td_lambda;
        return estimate_cpu(call, td);
    }
    if (computes_in_double(a))
        n_step_returns_in<double>(a, params, converting);
    else
        n_step_returns_in<float>(a, params, converting);
}

}  // namespace puffadv::detail::engine
