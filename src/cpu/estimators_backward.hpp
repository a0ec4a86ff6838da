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
// With importance ratios (kImp: GAE / TD(lambda) with ratios, V-trace's vs), the
// forward scans A_t = rho_t delta_t + k_t A_{t+1} with k_t = gamma_t lambda_t c_t
// (1 - done_t), rho_t and c_t the clipped ratios (leaky V-trace: alpha-mixed). Then
// a_t = u_t + k_{t-1} a_{t-1} is dL/d(rho_t delta_t), and with e_t = rho_t a_t = dL/dr_t:
//   dL/dV_t = dL/dreturns_t - e_t + gamma_{t-1} (1 - done_{t-1}) e_{t-1}
// the same as without ratios with e in a's place (the bootstrap's gradient too).
// The ratios' own gradient needs a itself: the caller's formulas give it.
#pragma once

#include <cstdint>

#include "cpu/engine.hpp"
#include "cpu/estimators_family.hpp"  // family_base

namespace puffadv::detail::engine {

/// The clipped ratios' scalars of a call with importance ratios.
template <typename C>
struct ratio_clips {
    C rho_clip, alpha;  // family_scalars carries c_clip
};

template <typename C, typename F, bool kSteps = false, bool kImp = false>
struct value_vjp_producer : family_base<C> {
    using family_base<C>::a;
    static constexpr bool kForward = true;
    V<C> rho_clip, alpha, one_minus_alpha;
    bool leaky = false;
    value_vjp_producer(const arrays& arrays_, const family_scalars<C>& s, const ratio_clips<C>& r = {C(1), C(1)})
        : family_base<C>(arrays_, s), rho_clip(simd::splat<C>(r.rho_clip)), alpha(simd::splat<C>(r.alpha)),
          one_minus_alpha(simd::splat<C>(C(1) - r.alpha)), leaky(r.alpha != C(1)) {}
    struct step {
        V<C> delta, decay, grad_returns, through;  // through: gamma_{t-1} rho_{t-1} (1 - done_{t-1})
        V<C> rho;                                  // kImp: rho_t, a_t's factor in dL/dr_t
    };
    C seed(std::int64_t) const { return C(0); }
    void prefetch_row(std::int64_t) const {}
    // A clipped ratio as the forward's (standard_producer::clipped): NaN gives the clip.
    PUFF_SIMD_INLINE V<C> clipped(V<C> ratio, V<C> clip) const {
        const V<C> c = simd::clip<C>(ratio, clip);
        return leaky ? alpha * c + one_minus_alpha * ratio : c;
    }
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
        if constexpr (kImp) {
            const V<C> before = in.values(role::importance, -1, this->zero);
            s.rho = clipped(in.values(role::importance, 0, this->zero), rho_clip);
            s.through = simd::zero_where<C>(cut, g * clipped(before, rho_clip));
            s.decay = simd::zero_where<C>(cut, g * l * clipped(before, this->c_clip));
        } else {
            s.through = simd::zero_where<C>(cut, g);
            s.decay = simd::zero_where<C>(cut, g * l);
        }
        return s;
    }
    // e_{t-1} enters dL/dV_t by selection where gamma_{t-1} rho_{t-1} (1 - done_{t-1}) is 0:
    // a NaN of another episode stays out (as on the GPU: backward_steps.cuh).
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step& st, V<C> s, V<C> before) const {
        // `through` carries rho_{t-1}, so it meets a_{t-1} (the scan's state), not e_{t-1}.
        const V<C> carried = simd::zero_where<C>(st.through == V<C>{}, st.through * before);
        const V<C> grad_rewards = kImp ? st.rho * s : s;
        return {grad_rewards, st.grad_returns - grad_rewards + carried};
    }
};

}  // namespace puffadv::detail::engine
