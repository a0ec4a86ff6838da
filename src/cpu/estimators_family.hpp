// Producers and epilogues of the rest of the estimator family for the CPU
// engine (engine.hpp): discounted returns, Retrace, Q(lambda) and episodic
// sums, each one scan S_t = delta_t + k_t S_{t+1} (episodic_sum: forwards,
// S_t from S_{t-1}). Definitions: conventions.hpp and docs/conventions.md.
// Flags are masks, "0 where f" is zero_where (a NaN is dropped too):
//   discounted_returns  delta = r + gamma B (0 where terminated)        k = gamma (0 where done)
//                       B: 0, the end value at the last step, bootstrap_values where truncated
//   retrace (Delta)     delta = r + gamma nv (0 where terminated) - q  k = gamma c_{t+1} (0 where done)
//                       c_t = lambda min(c_clip, pi_t / mu_t); c_T = 0; returns S + q
//   q_lambda (G)        delta = r + (done ? gamma nv (0 where terminated) : gamma (1 - lambda_t) nv)
//                       k = gamma lambda_t (0 where done), lambda_t = lambda greedy_{t+1};
//                       the row's last step is done (the trace is cut); advantages G - q
//   episodic_sum        delta = x                                      k = gamma lambda (0 where reset)
//                       reset_t = dones_{t-1} (none before step 0), or dones_t (reset_at_start);
//                       seeded with last_value
// Per-step gamma_t / lambda_t (kSteps): each read at step t (episodic_sum: at the step
// it produces, C_t's decay) in place of the scalar, flags selecting as above.
// n_step_returns is no first-order scan: its windows keep their own traversal
// (n_step_returns.cpp), over the same lanes and sources.
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/engine.hpp"
#include "cpu/estimators_advantage.hpp"  // prefetch_bootstraps

namespace puffadv::detail::engine {

template <typename C>
struct family_scalars {
    C gamma, lambda, c_clip;
};

template <typename C>
struct family_base {
    using scalar = C;
    const arrays& a;
    V<C> one, gamma, lambda, gamma_lambda, c_clip;
    family_base(const arrays& arrays_, const family_scalars<C>& s)
        : a(arrays_), one(simd::splat<C>(C(1))), gamma(simd::splat<C>(s.gamma)), lambda(simd::splat<C>(s.lambda)),
          gamma_lambda(simd::splat<C>(s.gamma * s.lambda)), c_clip(simd::splat<C>(s.c_clip)) {}
    static C zero(std::int64_t) { return C(0); }
};

template <typename C, typename F, bool kSteps = false>
struct discounted_producer : family_base<C> {
    using family_base<C>::family_base;
    using family_base<C>::a;
    static constexpr bool kForward = false;
    struct step {
        V<C> delta, decay;
    };
    C seed(std::int64_t) const { return C(0); }
    void prefetch_row(std::int64_t row) const { prefetch_bootstraps<C, F>(a, row); }
    // The value after the row's last step: last_value, bootstrap_values[T-1], or 0.
    C value_after_end(std::int64_t row) const {
        if (a[role::last_value].present) return element<C>(a[role::last_value], row, 0);
        if (a[role::bootstrap_values].present) return element<C>(a[role::bootstrap_values], row, a.horizon - 1);
        return C(0);
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        V<C> boot = in.at_last_step([this](std::int64_t row) { return value_after_end(row); });
        const M<C> terminated = in.template flags<F>(role::terminated, 0);
        M<C> done = terminated;
        if (in.present(role::truncated)) {
            const M<C> truncated = in.template flags<F>(role::truncated, 0);
            if (simd::any_lane<C>(truncated)) {
                boot = bootstrap_truncated<C>(in, boot, truncated, terminated);
                done |= truncated;
            }
        }
        const V<C> g = per_step<C, kSteps>(in, role::gamma, this->gamma);
        return {in.values(role::rewards, 0, this->zero) + simd::zero_where<C>(terminated, g * boot),
                simd::zero_where<C>(done, g)};
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step&, V<C> s, V<C>) const {
        return {s, s};
    }
};

// Retrace (probabilities, or log-probabilities: c from exp of their difference,
// lane by lane) and Q(lambda) (kQ) read next_values; a truncation only cuts the trace.
template <typename C, typename F, bool kQ, bool kSteps = false>
struct action_value_producer : family_base<C> {
    using family_base<C>::family_base;
    using family_base<C>::a;
    static constexpr bool kForward = false;
    bool q_read = true;  // Q(lambda) reads q only for A = G - q (stored or summed)
    bool log_probs = false;  // Retrace: target_probs and behaviour_probs are log-probabilities
    struct step {
        V<C> delta, decay, q;
    };
    C seed(std::int64_t) const { return C(0); }
    void prefetch_row(std::int64_t) const {}
    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        const V<C> r = in.values(role::rewards, 0, this->zero);
        const V<C> next = in.values(role::next_values, 0, this->zero);
        const M<C> terminated = in.template flags<F>(role::terminated, 0);
        M<C> done = terminated;
        if (in.present(role::truncated)) {
            const M<C> truncated = in.template flags<F>(role::truncated, 0);
            done |= truncated;  // a step also terminated is terminated: next is zeroed below
        }
        step s;
        s.q = q_read ? in.values(role::values, 0, this->zero) : V<C>{};
        const V<C> g = per_step<C, kSteps>(in, role::gamma, this->gamma);
        const V<C> l = per_step<C, kSteps>(in, role::lambda, this->lambda);
        const V<C> stop = simd::zero_where<C>(terminated, g * next);
        if constexpr (kQ) {
            const V<C> greedy_later = in.present(role::greedy)
                                          ? simd::zero_where<C>(~in.template flags<F>(role::greedy, 1), this->one)
                                          : this->one;
            const V<C> lambda_t = l * greedy_later;
            done |= in.last_step();  // the trace is cut past the row's end
            const V<C> go = g * ((this->one - lambda_t) * next);
            s.delta = r + simd::zero_where<C>(~done, stop) + simd::zero_where<C>(done, go);
            s.decay = simd::zero_where<C>(done, g * lambda_t);
        } else {
            // c_{t+1} (c_T = 0: target 0 over behaviour 1 past the row, or exp(-inf - 0));
            // a NaN ratio gives the clip.
            const V<C> later = l * simd::clip<C>(ratio_later(in), this->c_clip);
            s.delta = r + stop - s.q;
            s.decay = simd::zero_where<C>(done, g * later);
        }
        return s;
    }
    // pi_{t+1} / mu_{t+1}, or exp(log pi_{t+1} - log mu_{t+1}) (no vector exp: lane by lane).
    template <typename Lanes>
    PUFF_SIMD_INLINE V<C> ratio_later(const Lanes& in) const {
        if (!log_probs)
            return in.values(role::target_probs, 1, this->zero) /
                   in.values(role::behaviour_probs, 1, [](std::int64_t) { return C(1); });
        const V<C> log_ratio = in.values(role::target_probs, 1, [](std::int64_t) { return -C(INFINITY); }) -
                               in.values(role::behaviour_probs, 1, this->zero);
        alignas(32) C x[W<C>];
        simd::store<C>(x, log_ratio);
        for (int i = 0; i < W<C>; ++i) x[i] = C(std::exp(x[i]));
        return simd::load<C>(x);
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step& st, V<C> s, V<C>) const {
        if constexpr (kQ) return {q_read ? s - st.q : s, s};
        else return {s, s + st.q};
    }
};

template <typename C, typename F, bool kSteps = false>
struct episodic_producer : family_base<C> {
    using family_base<C>::family_base;
    using family_base<C>::a;
    static constexpr bool kForward = true;
    bool reset_at_start = false;
    struct step {
        V<C> delta, decay;
    };
    C seed(std::int64_t row) const { return a[role::last_value].present ? element<C>(a[role::last_value], row, 0) : C(0); }
    void prefetch_row(std::int64_t) const {}
    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        const M<C> reset = in.template flags<F>(role::terminated, reset_at_start ? 0 : -1);
        if constexpr (kSteps) {
            const V<C> gl = per_step<C, kSteps>(in, role::gamma, this->gamma) *
                            per_step<C, kSteps>(in, role::lambda, this->lambda);
            return {in.values(role::rewards, 0, this->zero), simd::zero_where<C>(reset, gl)};
        }
        return {in.values(role::rewards, 0, this->zero), simd::zero_where<C>(reset, this->gamma_lambda)};
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step&, V<C> s, V<C>) const {
        return {s, s};
    }
};

}  // namespace puffadv::detail::engine
