// n_step_returns on the CPU (n_step_returns.cpp), its windows longer than the
// vectorised ones (kWindowSteps < n < T), one row at a time: long_windows (one
// O(T) pass per row, scalar gamma and lambda) and per_step_windows (per-step
// gamma/lambda arrays: each window's own loop). Included by n_step_returns.cpp
// alone; apart so that each file stays readable.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/engine_run.hpp"

namespace puffadv::detail::engine {

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
// The windows cost O(T min(n, T)) a row, so long ones compose maps: f_s(x) = u_s + c x with
// c = gamma lambda, u_s = W1_s - c V'_s, or f_s(x) = W1_s at a cut step (done, the row's last):
//     G^(n)_t = (f_t o ... o f_{t+n-2})(W1_{t+n-1}) where t + n - 1 < T, else Lambda_t (TD(lambda)).
// A window of L = n - 1 maps is a suffix of its block of L steps then a prefix of the next (van
// Herk / Gil-Werman), each block's suffixes and prefixes one pass each: only the window's own steps
// enter, with decays in [0, 1]. (Lambda_t minus the part past the window cancelled: a 1e15 bootstrap
// past a window of n = 65 put G_0 at 4.375 for 4.34537.) In double, converted at the store.
constexpr int kLongChunk = 512;  // steps loaded at a time

struct affine_map { double k, d; };  // x -> d + k x
// outer o inner: `inner` (the later steps) first.
inline affine_map then(affine_map outer, affine_map inner) { return {outer.k * inner.k, outer.d + outer.k * inner.d}; }

// Rows [first, first + count), one at a time; scratch of 9 doubles a step, released on return.
template <typename C>
bad_step long_windows(const arrays& a, const n_step_scalars<C>& p, std::int64_t first, std::int64_t count) {
    const std::int64_t T = a.horizon, L = p.n - 1;
    const double gamma = double(p.gamma), gl = double(p.gamma) * double(p.lambda);
    const bool sum = wants_sums(a);
    const auto size = static_cast<std::size_t>(T);
    std::vector<affine_map> step(size), suffix(size), prefix(size);
    std::vector<double> w1(size), lambda(size), values(size);
    std::vector<C> lines(static_cast<std::size_t>(6 * kLongChunk));
    C* const r_buf = lines.data();
    C* const v_buf = r_buf + kLongChunk;
    C* const term = v_buf + kLongChunk;
    C* const trunc = term + kLongChunk;
    C* const g = trunc + kLongChunk;
    C* const adv = g + kLongChunk;
    bad_step bad;
    for (std::int64_t row = first; row < first + count; ++row) {
        // Each step's map, W1 and Lambda, backwards.
        double lambda_later = 0;  // Lambda_{t+1}
        double v_later = 0;       // V_{t+1}
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
                const auto i = static_cast<std::size_t>(t);
                const bool terminated = term[j] != C(0), truncated = trunc[j] != C(0);
                // V'_t: next_values; or V_{t+1} inside the row, the bootstrap at truncations and
                // after the last step.
                double boot;
                if (a[role::next_values].present)
                    boot = double(load_one<C>(a[role::next_values], row, t));
                else if (truncated && !terminated)  // flagged both: terminated (issue 33), no bootstrap read
                    boot = double(load_one<C>(a[role::bootstrap_values], row, t));
                else if (t == T - 1)
                    boot = double(p.value_after_end(a, row));
                else
                    boot = v_later;
                // A terminated step never reads V' (a NaN there stays out), nor a cut one what follows.
                w1[i] = double(r[j]) + (terminated ? 0.0 : gamma * boot);
                const bool cut = terminated || truncated || t == T - 1;
                step[i] = cut ? affine_map{0.0, w1[i]} : affine_map{gl, w1[i] - gl * boot};
                lambda[i] = cut ? w1[i] : w1[i] + gl * (lambda_later - boot);
                lambda_later = lambda[i];
                v_later = values[i] = double(v[j]);
            }
        }
        // Each block's suffix (backwards) and prefix (forwards) compositions.
        for (std::int64_t start = 0; start < T; start += L) {
            const std::int64_t end = std::min(T, start + L);  // the block is [start, end)
            suffix[std::size_t(end - 1)] = step[std::size_t(end - 1)];
            for (std::int64_t t = end - 2; t >= start; --t)
                suffix[std::size_t(t)] = then(step[std::size_t(t)], suffix[std::size_t(t + 1)]);
            prefix[std::size_t(start)] = step[std::size_t(start)];
            for (std::int64_t t = start + 1; t < end; ++t)
                prefix[std::size_t(t)] = then(prefix[std::size_t(t - 1)], step[std::size_t(t)]);
        }
        double sums[3] = {0, 0, 0};
        for (std::int64_t lo = 0; lo < T; lo += kLongChunk) {
            const int m = static_cast<int>(std::min<std::int64_t>(kLongChunk, T - lo));
            for (int j = 0; j < m; ++j) {
                const std::int64_t t = lo + j, far = t + L;  // the window's last step
                double gt = lambda[std::size_t(t)];
                if (far < T) {
                    // Maps t .. far - 1: block t's suffix, then the next block's prefix (none
                    // where t starts a block: its suffix is the whole window).
                    const affine_map window = t % L == 0 ? suffix[std::size_t(t)]
                                                         : then(suffix[std::size_t(t)], prefix[std::size_t(far - 1)]);
                    gt = window.d + window.k * w1[std::size_t(far)];
                }
                g[j] = C(gt);
                adv[j] = C(gt - values[std::size_t(t)]);
                if (sum) {
                    const double x = adv[j];
                    sums[0] += std::fabs(x), sums[1] += x, sums[2] += x * x;
                }
            }
            if (a[role::advantages].present)
                store<C>(a[role::advantages].type, a[role::advantages].at(row, lo), a[role::advantages].col_stride, m,
                         adv);
            if (a[role::returns].present)
                store<C>(a[role::returns].type, a[role::returns].at(row, lo), a[role::returns].col_stride, m, g);
        }
        if (sum) write_sums(a, row, sums);
    }
    return bad;
}

// Per-step gamma / lambda with kWindowSteps < n < T: each window's own backward loop, from its
// last step (or the first done step) down to t, O(min(n, T)) per step (the power of one gamma
// lambda that long_windows uses has no per-step form short of a product per window).
template <typename C>
bad_step per_step_windows(const arrays& a, const n_step_scalars<C>& p, std::int64_t first, std::int64_t count) {
    const std::int64_t T = a.horizon;
    std::vector<double> w1(static_cast<std::size_t>(T)), next(w1), k(w1);
    std::vector<std::uint8_t> done(static_cast<std::size_t>(T));
    auto read = [](const view& v, std::int64_t row, std::int64_t t, bool flag) {
        return double(load_one<C>(v, row, t, flag));
    };
    const bool sum = wants_sums(a);
    bad_step bad;
    for (std::int64_t row = first; row < first + count; ++row) {
        for (std::int64_t s = 0; s < T; ++s) {
            const bool terminated = read(a[role::terminated], row, s, true) != 0.0;
            const bool truncated = a[role::truncated].present && read(a[role::truncated], row, s, true) != 0.0;
            // V'_s: next_values_s where given (no bootstrap_values then), else as the other windows;
            // a step flagged both terminated and truncated is terminated: its bootstrap is not read.
            double boot = s + 1 < T ? read(a[role::values], row, s + 1, false) : double(p.value_after_end(a, row));
            if (a[role::next_values].present)
                boot = read(a[role::next_values], row, s, false);
            else if (truncated && !terminated)
                boot = read(a[role::bootstrap_values], row, s, false);
            const double g = a[role::gamma].present ? read(a[role::gamma], row, s, false) : double(p.gamma);
            const double l = a[role::lambda].present ? read(a[role::lambda], row, s, false) : double(p.lambda);
            const std::size_t i = static_cast<std::size_t>(s);
            w1[i] = read(a[role::rewards], row, s, false) + (terminated ? 0.0 : g * boot);
            next[i] = boot;
            k[i] = g * l;
            done[i] = terminated || truncated || s + 1 == T;
        }
        double sums[3] = {0, 0, 0};
        for (std::int64_t t = 0; t < T; ++t) {
            std::int64_t stop = t;  // the window's last step: t + n - 1, the row's end or a done step
            const std::int64_t far = p.n - 1 >= T - t ? T - 1 : t + p.n - 1;
            while (stop < far && !done[static_cast<std::size_t>(stop)]) ++stop;
            double x = w1[static_cast<std::size_t>(stop)];
            for (std::int64_t s = stop - 1; s >= t; --s) {
                const std::size_t i = static_cast<std::size_t>(s);
                x = w1[i] + k[i] * (x - next[i]);
            }
            const C g = C(x), adv = C(x - read(a[role::values], row, t, false));
            if (a[role::returns].present) store<C>(a[role::returns].type, a[role::returns].at(row, t), 1, 1, &g);
            if (a[role::advantages].present)
                store<C>(a[role::advantages].type, a[role::advantages].at(row, t), 1, 1, &adv);
            sums[0] += std::fabs(double(adv)), sums[1] += double(adv), sums[2] += double(adv) * double(adv);
        }
        if (sum) write_sums(a, row, sums);
    }
    return bad;
}

}  // namespace puffadv::detail::engine
