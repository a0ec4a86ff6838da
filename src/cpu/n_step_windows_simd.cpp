// n_step_returns' windows on row-adjacent data (time-major [T, B]), float32 or
// float64: the family's one estimator that is no first-order scan, so a special
// traversal beside the engine's (engine_traversals.hpp). A block of rows steps
// back through time, W rows per vector, keeping the windows W1 .. Wn of the
// later step in a scratch line per level:
//   W1_t = r_t + gamma V'_t (0 where terminated)
//   Wj_t = W1_t + gamma lambda (W(j-1)_{t+1} - V'_t) (0 where done); all W1 at the row's last step
//   G^(n)_t = Wn_t, A_t = G_t - V_t
// V'_t = V_{t+1}; the end value after the last step; bootstrap_values where truncated.
// Other n-step calls ([B, T] rows, other dtypes, long windows) take the general
// kernels of conventions_cpu_family*.cpp.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/conventions_cpu_family.hpp"
#include "cpu/engine_traversals.hpp"

namespace puffadv::detail {
namespace {

using engine::M;
using engine::V;
using engine::W;

template <typename C>
C element_of(const view& v, std::int64_t row, std::int64_t t) {
    return *static_cast<const C*>(v.at(row, t));
}

// The value after the row's last step: last_value, bootstrap_values[T-1], or 0.
template <typename C>
C value_after_end(const family_args<C>& a, std::int64_t row) {
    if (a.last_value.present) return element_of<C>(a.last_value, row, 0);
    if (a.bootstrap.present) return element_of<C>(a.bootstrap, row, a.horizon - 1);
    return C(0);
}

template <typename C>
PUFF_SIMD_INLINE void store_output(bool stream, C* p, V<C> x) {
    if (!p) return;
    if (stream)
        simd::stream<C>(p, x);
    else
        simd::store<C>(p, x);
}

template <typename C>
struct window_scratch {
    std::vector<C> windows, end_values;
    std::vector<double> sums;
};

// Rows [first, first + n) (n a multiple of W) stepping back through time.
template <typename C, typename F>
PUFF_SIMD_CLONES bad_step windows_across_rows(const family_args<C>& a, std::int64_t first, int n) {
    const bool want_sums = a.abs_sums.present || a.sums.present || a.square_sums.present;
    const int levels = static_cast<int>(std::max<std::int64_t>(1, a.n));  // n < T here
    static thread_local window_scratch<C> scratch;
    if (scratch.windows.size() < std::size_t(n) * levels) scratch.windows.resize(std::size_t(n) * levels);
    if (scratch.end_values.size() < std::size_t(n)) scratch.end_values.resize(n);
    if (want_sums && scratch.sums.size() < 3 * std::size_t(n)) scratch.sums.resize(3 * std::size_t(n));
    C* const windows = scratch.windows.data();  // W_j of the later step at windows[(j - 1) n]
    C* const end_values = scratch.end_values.data();
    double* const sums = want_sums ? scratch.sums.data() : nullptr;
    const V<C> gamma = simd::splat<C>(a.gamma), gamma_lambda = simd::splat<C>(a.gamma * a.lambda);
    const bool stream = a.simd_stream;
    const std::int64_t T = a.horizon;
    engine::arrays engine_view;  // the lines next_step_lines fetches
    engine_view.horizon = T;
    engine_view.rewards = a.rewards, engine_view.values = a.values, engine_view.terminated = a.terminated;
    engine_view.truncated = a.truncated, engine_view.advantages = a.advantages, engine_view.returns = a.returns;
    engine_view.stream = stream;
    bad_step bad;
    for (int i = 0; i < n; ++i) end_values[i] = value_after_end(a, first + i);
    if (sums) std::fill(sums, sums + 3 * n, 0.0);
    for (std::int64_t t = T - 1; t >= 0; --t) {
        const bool last = t == T - 1;
        const C* r = static_cast<const C*>(a.rewards.at(first, t));
        const C* v = static_cast<const C*>(a.values.at(first, t));
        const C* v_next = last ? end_values : static_cast<const C*>(a.values.at(first, t + 1));
        const F* term = static_cast<const F*>(a.terminated.at(first, t));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(first, t)) : nullptr;
        C* adv = a.advantages.present ? static_cast<C*>(a.advantages.at(first, t)) : nullptr;
        C* ret = a.returns.present ? static_cast<C*>(a.returns.at(first, t)) : nullptr;
        // The lines of step t - 1, a cache line ahead: the hardware prefetcher restarts at
        // every page of every step's line.
        const engine::next_step_lines ahead(engine_view, first, t - 1);
        for (int i = 0; i < n; i += W<C>) {
            if (i % engine::kLineElements<C> == 0) ahead.prefetch(i);
            const M<C> terminated = simd::set_lanes<C>(term + i);
            M<C> done = terminated;
            V<C> boot = simd::load<C>(v_next + i);
            if (trunc) {
                const M<C> truncated = simd::set_lanes<C>(trunc + i);
                if (simd::any_lane<C>(truncated)) {  // rare: a branch per vector
                    alignas(32) C x[W<C>];
                    simd::store<C>(x, boot);
                    for (int j = 0; j < W<C>; ++j) {
                        if (!truncated[j] || terminated[j]) continue;  // flagged both: terminated (issue 33)
                        x[j] = element_of<C>(a.bootstrap, first + i + j, t);
                    }
                    boot = simd::load<C>(x);
                    done |= truncated;
                }
            }
            // In place from the longest window down; all W1 at the row's last step.
            const V<C> w1 = simd::load<C>(r + i) + simd::zero_where<C>(terminated, gamma * boot);
            V<C> w = w1;
            for (int j = levels - 1; j >= 1; --j) {
                C* level = windows + std::size_t(j) * n + i;
                const V<C> wj =
                    last ? w1 : w1 + simd::zero_where<C>(done, gamma_lambda * (simd::load<C>(level - n) - boot));
                if (j == levels - 1) w = wj;
                simd::store<C>(level, wj);
            }
            simd::store<C>(windows + i, w1);
            const V<C> advantage = w - simd::load<C>(v + i);
            store_output(stream, adv ? adv + i : nullptr, advantage);
            store_output(stream, ret ? ret + i : nullptr, w);  // G^(n) itself, not (G - V) + V
            if (sums) simd::add_to_lanes(advantage, sums + i, sums + n + i, sums + 2 * n + i);
        }
    }
    if (sums)
        for (int i = 0; i < n; ++i) {
            const double totals[3] = {sums[i], sums[n + i], sums[2 * n + i]};
            write_row_sums(a, first + i, totals);
        }
    if (stream) simd::fence();
    return bad;
}

}  // namespace

template <typename C>
bool family_simd_serves(const family_args<C>& a, bool time_contiguous) {
    constexpr dtype own = sizeof(C) == 8 ? dtype::float64 : dtype::float32;
    if (time_contiguous || a.kind != estimator::n_step_returns || a.n > kFamilySimdWindow) return false;
    if (a.rewards.type != own || a.rows < W<C> || !a.values.present) return false;
    for (const view* v : {&a.values, &a.last_value, &a.bootstrap, &a.advantages, &a.returns})
        if (v->present && v->type != own) return false;
    const bool bytes = engine::byte_flags(a.terminated.type);
    if (!bytes && a.terminated.type != own) return false;
    if (a.truncated.present &&
        (engine::byte_flags(a.truncated.type) != bytes || (!bytes && a.truncated.type != own)))
        return false;
    for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.advantages, &a.returns})
        if (v->present && v->row_stride != 1 && a.rows > 1) return false;
    return true;
}

template <typename C>
bool family_simd_streams(const family_args<C>& a, bool) {
    if (!a.streaming) return false;
    for (const view* v : {&a.advantages, &a.returns})
        if (v->present && (reinterpret_cast<std::uintptr_t>(v->base) % 16 != 0 || v->col_stride * v->size % 16 != 0))
            return false;
    return true;
}

template <typename C>
bad_step family_simd_block(const family_args<C>& a, std::int64_t first, int count) {
    return engine::byte_flags(a.terminated.type) ? windows_across_rows<C, std::uint8_t>(a, first, count)
                                                 : windows_across_rows<C, C>(a, first, count);
}

template bool family_simd_serves(const family_args<float>&, bool);
template bool family_simd_serves(const family_args<double>&, bool);
template bool family_simd_streams(const family_args<float>&, bool);
template bool family_simd_streams(const family_args<double>&, bool);
template bad_step family_simd_block(const family_args<float>&, std::int64_t, int);
template bad_step family_simd_block(const family_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
