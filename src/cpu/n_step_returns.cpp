// n_step_returns on the CPU: the family's one estimator that is no first-order
// scan (its return G^(n)_t sums a window of n steps ahead, which no map of
// S_{t+1} alone gives), so a traversal of its own beside the engine's
// (engine_traversals.hpp), over the same lanes and sources (engine_sources.hpp:
// every dtype and stride), with the definitions of estimators_family.hpp:
//   W1_t = r_t + gamma V'_t (0 where terminated)
//   Wj_t = W1_t + gamma lambda (W(j-1)_{t+1} - V'_t) (0 where done); all W1 at the row's last step
//   G^(n)_t = Wn_t, A_t = G_t - V_t
// V'_t = V_{t+1}; the end value after the last step; bootstrap_values where truncated;
// or next_values_t at every step, where given (issue 29: truncated then only cuts the window).
//   - windows (n <= kWindowSteps) along time ([B, T] rows, whole): each level's
//     line from the one before, W(j-1)_{t+1} one element on;
//   - windows across rows ([T, B], and rows too long to take whole): a block of
//     rows steps back through time, W rows per vector, keeping W1 .. Wn of the
//     later step in a scratch line per level;
//   - long windows (kWindowSteps < n < T): one O(T) pass per row (n_step_long_windows.hpp);
//   - n >= T: every window runs to its episode's or the row's end, where G^(n)
//     is the TD(lambda) return (FAMILY.md 4): the engine's TD(lambda) scan.
// Per-step gamma_s / lambda_s (issue 29) replace gamma and lambda at step s: the windows
// read them: along time as lines of their own, across rows through the lanes (kSteps); long
// windows take each window's own loop (per_step_windows, n_step_long_windows.hpp:
// O(min(n, T)) per step, no power of one gamma lambda to use).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/backends.hpp"  // estimate_cpu: n >= T runs as TD(lambda)
#include "cpu/cpu_threads.hpp"
#include "cpu/engine_run.hpp"
#include "cpu/n_step_long_windows.hpp"  // n_step_scalars, long_windows, per_step_windows
#include "cpu/n_step_returns.hpp"

namespace puffadv::detail::engine {
namespace {

constexpr std::int64_t kWindowSteps = 64;               // longer windows take the O(T) pass
constexpr std::int64_t kWindowScratchBytes = 1 << 21;   // the n lines of W per block
constexpr int kStridedBlockRows = 64;  // rows per block where a step's rows are not adjacent: their lines stay in L1

template <typename C>
struct window_scratch {
    std::vector<C> windows;
    std::vector<double> sums;
};

// One group of W rows at step t: the windows of step t from those of t + 1 (in place,
// from the longest down), and the outputs.
// gamma and gamma_lambda come splat, `last` (t is the row's last step) decided per step: from
// references they would be loaded again after every vector store (may_alias). kSteps: the
// per-step gamma_t and lambda_t replace them, read through the lanes.
template <typename C, typename F, bool kEdge, bool kSteps>
PUFF_SIMD_INLINE void window_group(const arrays& a, const n_step_scalars<C>& p, const lines& step_lines,
                                   std::int64_t first, int i, int count, std::int64_t t, std::int64_t horizon,
                                   bool last, V<C> gamma, V<C> gamma_lambda, int levels, C* windows,
                                   std::size_t pitch, double* sums, bool stream, bad_step& bad) {
    const row_lanes<C, kEdge> in{a, step_lines, first + i, t, horizon, i, count, stream, bad};
    if constexpr (kSteps) {
        const V<C> scalar_lambda = simd::splat<C>(p.lambda);
        gamma = per_step<C, kSteps>(in, role::gamma, gamma);
        gamma_lambda = gamma * per_step<C, kSteps>(in, role::lambda, scalar_lambda);
    }
    auto zero = [](std::int64_t) { return C(0); };
    auto end = [&](std::int64_t row) { return p.value_after_end(a, row); };
    const M<C> terminated = in.template flags<F>(role::terminated, 0);
    M<C> done = terminated;
    const bool next_values = in.present(role::next_values);
    V<C> boot = next_values ? in.values(role::next_values, 0, zero) : in.values(role::values, 1, end);
    if (in.present(role::truncated)) {
        const M<C> truncated = in.template flags<F>(role::truncated, 0);
        if (simd::any_lane<C>(truncated)) {  // rare: a branch per vector
            if (!next_values)  // next_values: truncated only cuts the window
                boot = bootstrap_truncated<C>(in, boot, truncated, terminated);
            done |= truncated;
        }
    }
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
template <typename C, typename F, bool kSteps, typename Source>
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
    const std::int64_t T = a.horizon;
    const V<C> gamma = simd::splat<C>(p.gamma), gamma_lambda = simd::splat<C>(p.gamma * p.lambda);
    bad_step bad;
    lines step_lines = source.start_lines();
    for (std::int64_t t = T - 1; t >= 0; --t) {
        source.step(step_lines, first, n, t, false);
        const next_step_lines ahead = source.ahead(first, t - 1, n);
        const bool last = t == T - 1;
        for (int i = 0; i < full; i += W<C>) {
            if (i % kLineElements<C> == 0) ahead.prefetch(i);
            window_group<C, F, false, kSteps>(a, p, step_lines, first, i, W<C>, t, T, last, gamma, gamma_lambda,
                                              levels, windows, pitch, sums, stream, bad);
        }
        if (full < n)
            window_group<C, F, true, kSteps>(a, p, step_lines, first, full, n - full, t, T, last, gamma,
                                             gamma_lambda, levels, windows, pitch, sums, stream, bad);
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

// x where `done` (exactly +0 or 1) is clear, else +0, even for a NaN x. Integer masks:
// a float select would need -fno-trapping-math to vectorise.
template <typename C>
inline C zero_where_set(C done, C x) {
    using U = std::conditional_t<sizeof(C) == 4, std::uint32_t, std::uint64_t>;
    U f, v;
    std::memcpy(&f, &done, sizeof f);
    std::memcpy(&v, &x, sizeof v);
    v &= f == 0 ? ~U(0) : U(0);
    std::memcpy(&x, &v, sizeof x);
    return x;
}

template <typename C>
struct row_scratch {
    std::vector<C> lines;
};

// Rows [first, first + count), each whole: W1 (e), the bootstraps V' and the done flags of
// a row, then the levels in place, ascending, so that w[j + 1] is still the level before.
template <typename C, typename F, typename Source>
PUFF_SIMD_CLONES bad_step windows_along_time(const arrays& a, const n_step_scalars<C>& p, Source& source,
                                             std::int64_t first, int count) {
    const std::int64_t T = a.horizon;
    const int levels = static_cast<int>(std::max<std::int64_t>(1, p.n));  // n < T here
    const std::size_t pitch = std::size_t(T) + 16;
    static thread_local row_scratch<C> scratch;
    if (scratch.lines.size() < 5 * pitch) scratch.lines.resize(5 * pitch);
    C* const e = scratch.lines.data();
    C* const boot = e + pitch;
    C* const done = boot + pitch;
    C* const w = done + pitch;
    C* const decay = w + pitch;  // per-step gamma_t lambda_t (issue 29), where given
    const C gamma = p.gamma, gl = p.gamma * p.lambda;
    const bool want_sums = wants_sums(a);
    bad_step bad;
    for (std::int64_t row = first; row < first + count; ++row) {
        const lines l = source.row(row);
        const C* r = reinterpret_cast<const C*>(l.at[int(role::rewards)]);
        const C* v = reinterpret_cast<const C*>(l.at[int(role::values)]);
        const F* term = reinterpret_cast<const F*>(l.at[int(role::terminated)]);
        const F* trunc = reinterpret_cast<const F*>(l.at[int(role::truncated)]);
        const C* next = reinterpret_cast<const C*>(l.at[int(role::next_values)]);
        if (next) {
            std::copy(next, next + T, boot);
        } else {
            for (std::int64_t j = 0; j + 1 < T; ++j) boot[j] = v[j + 1];
            boot[T - 1] = p.value_after_end(a, row);
        }
        for (std::int64_t j = 0; j < T; ++j) done[j] = term[j] != F(0) ? C(1) : C(0);
        if (trunc)
            for (std::int64_t j = 0; j < T; ++j)
                // rare: a branch, not a stream; a step flagged both is terminated (issue 33): no bootstrap read
                if (trunc[j] != F(0) && done[j] == C(0) && !next)
                    boot[j] = element<C>(a[role::bootstrap_values], row, j);
        // Per-step gamma_t / lambda_t (issue 29): the same levels with the step's own decay.
        // Two loops each, not one line of decays for both: the scalar call keeps gamma lambda
        // in a register and reads no extra line (its speed is issue 29's other bar).
        const C* gamma_t = reinterpret_cast<const C*>(l.at[int(role::gamma)]);
        const C* lambda_t = reinterpret_cast<const C*>(l.at[int(role::lambda)]);
        if (gamma_t || lambda_t) {
            for (std::int64_t j = 0; j < T; ++j) {
                const C g = gamma_t ? gamma_t[j] : gamma;
                decay[j] = g * (lambda_t ? lambda_t[j] : p.lambda);
                w[j] = e[j] = r[j] + zero_where_set(done[j], g * boot[j]);
            }
        } else {
            for (std::int64_t j = 0; j < T; ++j) w[j] = e[j] = r[j] + zero_where_set(done[j], gamma * boot[j]);
        }
        if (trunc)
            for (std::int64_t j = 0; j < T; ++j) done[j] = trunc[j] != F(0) ? C(1) : done[j];
        done[T - 1] = C(1);  // nothing follows the row's last step: all its windows are W1
        if (gamma_t || lambda_t) {
            for (int level = 2; level <= levels; ++level)
                for (std::int64_t j = 0; j + 1 < T; ++j)
                    w[j] = e[j] + zero_where_set(done[j], decay[j] * (w[j + 1] - boot[j]));
        } else {
            for (int level = 2; level <= levels; ++level)
                for (std::int64_t j = 0; j + 1 < T; ++j)
                    w[j] = e[j] + zero_where_set(done[j], gl * (w[j + 1] - boot[j]));
        }
        C* adv = const_cast<C*>(reinterpret_cast<const C*>(l.at[int(role::advantages)]));
        C* ret = const_cast<C*>(reinterpret_cast<const C*>(l.at[int(role::returns)]));
        double sums[3] = {0, 0, 0};
        if (adv || want_sums)
            for (std::int64_t j = 0; j < T; ++j) {
                const C x = w[j] - v[j];
                if (adv) adv[j] = x;
                if (want_sums) sums[0] += std::fabs(double(x)), sums[1] += double(x), sums[2] += double(x) * double(x);
            }
        if (ret) std::copy(w, w + T, ret);  // G^(n) itself, not (G - V) + V
        source.row_done(row);
        if (want_sums) write_sums(a, row, sums);
    }
    return bad;
}

}  // namespace

template <typename C>
void n_step_returns_in(const arrays& a, const standard_params& params) {
    const bool converting = a.walk.converting;
    const n_step_scalars<C> p{C(params.gamma), C(params.lambda), params.n};
    shared_bad_step bad;
    const std::int64_t by_work = std::max<std::int64_t>(1, a.rows * a.horizon / kElementsPerThread);
    const bool steps = a[role::gamma].present || a[role::lambda].present;
    if (p.n > kWindowSteps) {  // whole rows per thread, in O(T) each (per step: O(T min(n, T)))
        const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), a.rows, by_work}));
        parallel_ranges(threads, a.rows, [&](std::int64_t begin, std::int64_t end) {
            bad.keep(steps ? per_step_windows<C>(a, p, begin, end - begin)
                           : long_windows<C>(a, p, begin, end - begin));
        });
        return;  // a step flagged both is terminated (issue 33): `bad` is not an error
    }
    // Rows whose steps are adjacent in the call (or converted whole) go along time, per-step
    // gamma / lambda lines included (across rows, a [B, T] call's steps would be gathered
    // T elements apart: 7.6x the scalar call's time at 65536x128, 2026-12-04).
    const plan how = plan_of(a);
    if (how.along_time) {
        const std::int64_t units = (a.rows + how.unit - 1) / how.unit;
        const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
        const bool byte_flags_in_place = !converting && byte_flags(a[role::terminated].type);
        parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t u = begin; u < end; ++u) {
                const std::int64_t first = u * how.unit;
                const int count = static_cast<int>(std::min<std::int64_t>(how.unit, a.rows - first));
                if (!converting) {
                    call_lines source(a);
                    bad.keep(byte_flags_in_place ? windows_along_time<C, std::uint8_t>(a, p, source, first, count)
                                                 : windows_along_time<C, C>(a, p, source, first, count));
                } else {
                    converting_lines<C> source(a, false, false, a.horizon, false);
                    bad.keep(windows_along_time<C, C>(a, p, source, first, count));
                }
            }
        });
        return;  // a step flagged both is terminated (issue 33): `bad` is not an error
    }
    // Where a step's rows are adjacent, long lines stream from memory (simd_block_rows); elsewhere
    // the block's cache lines stay in L1 through the steps that share them. Each block keeps
    // min(n, T) lines of W besides.
    const bool adjacent = layout_of(a) == layout::row_adjacent || a.rows <= 1;
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
                call_lines source(a);
                if (steps)
                    bad.keep(bytes ? windows_across_rows<C, std::uint8_t, true>(a, p, source, first, count)
                                   : windows_across_rows<C, C, true>(a, p, source, first, count));
                else
                    bad.keep(bytes ? windows_across_rows<C, std::uint8_t, false>(a, p, source, first, count)
                                   : windows_across_rows<C, C, false>(a, p, source, first, count));
            } else {
                converting_lines<C> source(a, false, false, count, true);
                bad.keep(steps ? windows_across_rows<C, C, true>(a, p, source, first, count)
                               : windows_across_rows<C, C, false>(a, p, source, first, count));
            }
        }
    });
    // a step flagged both terminated and truncated is terminated (issue 33): `bad` is not an error
}

void n_step_returns_cpu(const standard_arrays& call, arrays& a, const standard_params& params) {
    if (params.n >= a.horizon) {
        standard_params td = params;
        td.kind = estimator::td_lambda;
        return estimate_cpu(call, td);
    }
    // No interleaved walk for the n-step windows: calls of few time-major rows are gathered.
    if (computes_in_double(a)) {
        choose_walk<double>(a, false, false);
        n_step_returns_in<double>(a, params);
    } else {
        choose_walk<float>(a, false, false);
        n_step_returns_in<float>(a, params);
    }
}

}  // namespace puffadv::detail::engine
