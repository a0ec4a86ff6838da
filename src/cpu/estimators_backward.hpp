// The backward of the value estimators for the CPU engine (engine.hpp): the
// forward's scan run in the opposite direction. GAE and TD(lambda) with the
// bootstrap pair scan A_t = delta_t + k_t A_{t+1}, k_t = gamma_t lambda_t
// (1 - done_t) (0 at the row's last step), delta_t = r_t + gamma_t
// (1 - terminated_t) V'_t - V_t with V'_t = V_{t+1} inside an episode, and give
// A and A + V; discounted returns are the same scan with lambda 1 and no V.
// Their vector-Jacobian product, with u_t = dL/dA_t + dL/dreturns_t:
//   a_t = u_t + k_{t-1} a_{t-1}            (forwards; a_{-1} = 0)  = dL/dr_t
//   dL/dV_t = dL/dreturns_t - a_t + gamma_{t-1} (1 - done_{t-1}) a_{t-1}
// (V_t is read as step t-1's V' where that step neither ends nor is cut). The
// bootstrap's gradient, gamma_t (1 - terminated_t) a_t where V'_t is the
// bootstrap, is read off a by the caller. Roles: u (the caller's grad_total) in
// rewards', grad_returns (optional) in values', dL/dr in advantages', dL/dV in returns'.
// gamma_t and lambda_t are read at step t - 1 (where the decay a_{t-1} crosses).
#pragma once

#include <cstdint>

#include "cpu/engine.hpp"
#include "cpu/estimators_family.hpp"  // family_base

namespace puffadv::detail::engine {

template <typename C, typename F, bool kSteps = false>
struct value_vjp_producer : family_base<C> {
    using family_base<C>::family_base;
    using family_base<C>::a;
    static constexpr bool kForward = true;
    struct step {
        V<C> delta, decay, grad_returns, through;  // through: gamma_{t-1} (1 - done_{t-1})
    };
    C seed(std::int64_t) const { return C(0); }
    void prefetch_row(std::int64_t) const {}
    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        step s;
        s.grad_returns = in.present(role::values) ? in.values(role::values, 0, this->zero) : V<C>{};
        s.delta = in.values(role::rewards, 0, this->zero);
        // Step t-1's flags (none before step 0, whose a_{-1} is the seed 0); its gamma and
        // lambda are selected away where it ends its episode (a NaN there is never read).
        M<C> cut = in.template flags<F>(role::terminated, -1);
        if (in.present(role::truncated)) cut |= in.template flags<F>(role::truncated, -1);
        V<C> g = this->gamma, l = this->lambda;
        if constexpr (kSteps) {
            if (in.present(role::gamma)) g = in.values(role::gamma, -1, this->zero);
            if (in.present(role::lambda)) l = in.values(role::lambda, -1, this->zero);
        }
        s.through = simd::zero_where<C>(cut, g);
        s.decay = simd::zero_where<C>(cut, g * l);
        return s;
    }
    // a_{t-1} enters dL/dV_t by selection where gamma_{t-1} (1 - done_{t-1}) is 0: a NaN
    // of another episode stays out (as on the GPU: backward_steps.cuh).
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step& st, V<C> s, V<C> before) const {
        const V<C> carried = simd::zero_where<C>(st.through == V<C>{}, st.through * before);
        return {s, st.grad_returns - s + carried};
    }
};

}  // namespace puffadv::detail::engine
