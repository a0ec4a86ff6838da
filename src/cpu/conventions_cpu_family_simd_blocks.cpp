// One-pass SIMD kernel of the estimator family (discounted returns, Retrace,
// Q(lambda), episodic sums; n-step returns' windows) for data whose rows are adjacent (time-major [T, B],
// time_axis=0): a block of rows steps through time (backwards; episodic_sum
// forwards), W rows per vector, each lane its own recurrence with the carries in
// a scratch line, as conventions_cpu_simd_blocks.cpp does for GAE. The lookahead
// is a second scratch line written at step t + 1 (Retrace's c_{t+1}), or the
// later step's line read again (Q(lambda)'s greedy_{t+1}). The producers are conventions_simd.hpp's; which calls this
// serves, family_simd_serves (conventions_cpu_family_simd.cpp).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/conventions_cpu_family.hpp"
#include "cpu/conventions_simd.hpp"

namespace puffadv::detail {
namespace simd_kernels {
namespace {

// Per thread and arithmetic type, grown to the largest block seen: the carries S_{t+1}, the
// lookahead line, the end values, n_step_returns' windows and the row sums.
template <typename C>
struct family_block_scratch {
    std::vector<C> carry, later, end_values, windows;
    std::vector<double> sums;
};

template <typename C>
family_block_scratch<C>& family_scratch_for(int n, int levels, bool sums) {
    static thread_local family_block_scratch<C> s;
    if (s.carry.size() < std::size_t(n)) {
        s.carry.resize(n);
        s.later.resize(n);
        s.end_values.resize(n);
    }
    if (s.windows.size() < std::size_t(n) * levels) s.windows.resize(std::size_t(n) * levels);
    if (sums && s.sums.size() < 3 * std::size_t(n)) s.sums.resize(3 * std::size_t(n));
    return s;
}

// The lines of the step read next, prefetched a cache line ahead of this step's
// reads (see next_step_lines in conventions_cpu_simd_blocks.cpp: the hardware
// prefetcher restarts at every page of every step's line).
struct family_next_lines {
    static constexpr int kMost = 9;
    const char* lines[kMost] = {};
    int sizes[kMost] = {};
    int count = 0;

    template <typename C>
    family_next_lines(const family_args<C>& a, std::int64_t first, std::int64_t t) {
        if (t < 0 || t >= a.horizon) return;
        for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.next_values, &a.target,
                              &a.behaviour, &a.greedy}) {
            if (!v->present) continue;
            lines[count] = static_cast<const char*>(v->at(first, t)), sizes[count++] = v->size;
        }
        if (!a.simd_stream)  // streamed outputs have no line to fetch
            for (const view* v : {&a.advantages, &a.returns})
                if (v->present) lines[count] = static_cast<const char*>(v->at(first, t)), sizes[count++] = v->size;
    }
    /// Element i of every line (called once per cache line of C).
    PUFF_SIMD_INLINE void prefetch(std::int64_t i) const {
        for (int j = 0; j < count; ++j) __builtin_prefetch(lines[j] + i * sizes[j]);
    }
};

template <typename C>
constexpr int kLineElements = 64 / sizeof(C);

template <typename C, typename F, family_kind K>
PUFF_SIMD_CLONES bad_step family_rows_across_time(const family_args<C>& a, std::int64_t first, int n) {
    constexpr bool kForward = K == family_kind::episodic;
    const family_coefficients<C> k = splat_family_coefficients<C>(a);
    const bool want_sums = wants_sums(a.abs_sums, a.sums, a.square_sums);
    // n_step_returns: W_j of the later step at windows[(j - 1) n], j = 1 .. levels (n < T here).
    const int levels = K == family_kind::n_step ? static_cast<int>(std::max<std::int64_t>(1, a.n)) : 0;
    family_block_scratch<C>& scratch = family_scratch_for<C>(n, levels, want_sums);
    C* const windows = scratch.windows.data();
    C* const carry = scratch.carry.data();  // hoisted: a thread_local's address was re-derived per vector
    C* const later = scratch.later.data();
    C* const end_values = scratch.end_values.data();
    double* const sums = want_sums ? scratch.sums.data() : nullptr;
    const bool stream = a.simd_stream;
    const bool q_read = K == family_kind::retrace || K == family_kind::n_step ||
                        (a.values.present && (a.advantages.present || want_sums));
    const std::int64_t T = a.horizon;
    bad_step bad;
    if (K == family_kind::episodic && a.last_value.present)
        for (int i = 0; i < n; ++i) carry[i] = *at<C>(a.last_value, first + i, 0);  // the seed C_{-1}
    else
        std::fill(carry, carry + n, C(0));
    std::fill(later, later + n, C(0));  // Retrace's c_T
    if ((K == family_kind::discounted || K == family_kind::n_step) && T > 0)
        for (int i = 0; i < n; ++i) end_values[i] = family_value_after_end<C>(a, first + i);
    if (sums) std::fill(sums, sums + 3 * n, 0.0);
    M<C> all{};
    all = all == all;
    for (std::int64_t step = 0; step < T; ++step) {
        const std::int64_t t = kForward ? step : T - 1 - step;
        const bool last = !kForward && t == T - 1;
        const C* r = at<C>(a.rewards, first, t);
        const C* q = a.values.present ? at<C>(a.values, first, t) : nullptr;
        // n_step_returns' V'_t: V_{t+1} (read at step t + 1), the end value after the last step.
        const C* v_next = K != family_kind::n_step ? nullptr : last ? end_values : at<C>(a.values, first, t + 1);
        const C* nv = a.next_values.present ? at<C>(a.next_values, first, t) : nullptr;
        const F* term = static_cast<const F*>(a.terminated.at(first, t));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(first, t)) : nullptr;
        const C* tp = K == family_kind::retrace ? at<C>(a.target, first, t) : nullptr;
        const C* bp = K == family_kind::retrace ? at<C>(a.behaviour, first, t) : nullptr;
        // Q(lambda)'s greedy_{t+1}: the later step's line, read again (cached: it was read at step t + 1).
        const F* greedy_later =
            a.greedy.present && !last ? static_cast<const F*>(a.greedy.at(first, t + 1)) : nullptr;
        // episodic_sum's reset_t: dones_t, or dones_{t-1} (none before the first step).
        const F* reset = a.reset_at_start ? term : t > 0 ? static_cast<const F*>(a.terminated.at(first, t - 1))
                                                         : nullptr;
        C* adv = out_at<C>(a.advantages, first, t);
        C* ret = out_at<C>(a.returns, first, t);
        const family_next_lines ahead(a, first, kForward ? t + 1 : t - 1);
        for (int i = 0; i < n; i += W<C>) {
            if (i % kLineElements<C> == 0) ahead.prefetch(i);
            family_inputs<C> in{};
            in.r = simd::load<C>(r + i);
            if (K == family_kind::episodic) {
                in.done = reset ? simd::set_lanes<C>(reset + i) : M<C>{};
            } else {
                in.terminated = simd::set_lanes<C>(term + i);
                in.done = in.terminated;
                if (K == family_kind::discounted)
                    in.boot = last ? simd::load<C>(end_values + i) : simd::splat<C>(C(0));
                else if (K == family_kind::n_step)
                    in.boot = simd::load<C>(v_next + i);
                else
                    in.boot = simd::load<C>(nv + i);
                if (trunc) {
                    const M<C> truncated = simd::set_lanes<C>(trunc + i);
                    if (simd::any_lane<C>(truncated)) {
                        if (K == family_kind::discounted || K == family_kind::n_step)
                            in.boot = bootstrap_truncated<C, F>(a, in.boot, trunc + i, term + i, first + i, 1, t,
                                                                0, bad);
                        else if (simd::any_lane<C>(truncated & in.terminated))
                            keep_both_set<C>(truncated & in.terminated, first + i, 1, t, 0, bad);
                        in.done |= truncated;
                    }
                }
            }
            if (K == family_kind::retrace || q_read) in.q = simd::load<C>(q + i);
            if (K == family_kind::retrace) {
                in.later = simd::load<C>(later + i);
                simd::store<C>(later + i, retrace_trace<C>(k, simd::load<C>(tp + i), simd::load<C>(bp + i)));
            } else if (K == family_kind::q_lambda) {
                in.later = greedy_later ? flag_values<C, F>(k, greedy_later + i) : k.one;
                if (last) in.done = all;  // the trace is cut past the row's end
            }
            V<C> advantage, returns;
            if constexpr (K == family_kind::n_step) {
                // W1 = r + gamma V' (0 where terminated); Wj = W1 + gamma lambda (W(j-1)_{t+1} - V')
                // (0 where done), in place from the longest window down; all W1 at the row's last step.
                const V<C> w1 = in.r + simd::zero_where<C>(in.terminated, k.gamma * in.boot);
                V<C> w = w1;
                for (int j = levels - 1; j >= 1; --j) {
                    C* level = windows + std::size_t(j) * n + i;
                    const V<C> wj = last ? w1
                                         : w1 + simd::zero_where<C>(in.done, k.gamma_lambda *
                                                                                 (simd::load<C>(level - n) - in.boot));
                    if (j == levels - 1) w = wj;
                    simd::store<C>(level, wj);
                }
                simd::store<C>(windows + i, w1);
                returns = w;  // G^(n) itself, not (G - V) + V
                advantage = w - in.q;
            } else {
                const maps<C> m = produce_family<C, K>(k, in);
                const V<C> s = m.delta + m.decay * simd::load<C>(carry + i);
                simd::store<C>(carry + i, s);
                advantage = family_advantage<C, K>(s, in.q, q_read);
                returns = family_return<C, K>(s, in.q);
            }
            store_output(stream, adv ? adv + i : nullptr, advantage);
            store_output(stream, ret ? ret + i : nullptr, returns);
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

template <typename C, typename F, family_kind K>
struct family_across_time {
    static bad_step run(const family_args<C>& a, std::int64_t first, int count) {
        return family_rows_across_time<C, F, K>(a, first, count);
    }
};

}  // namespace
}  // namespace simd_kernels

template <typename C>
bad_step family_simd_block(const family_args<C>& a, std::int64_t first, int count) {
    return simd_kernels::family_dispatch<C, simd_kernels::family_across_time>(a, first, count);
}

template bad_step family_simd_block(const family_args<float>&, std::int64_t, int);
template bad_step family_simd_block(const family_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
