// Producers and epilogues of the advantage estimators for the CPU engine
// (engine.hpp): the puff advantage (SPEC section 1) and the standard
// conventions' GAE, TD(lambda) and V-trace. Written once against the lanes'
// interface: the same code serves W steps of a row and one step of W rows.
//
// Puff advantage (PufferLib's index convention: rewards and dones read at t+1,
// the dones used arithmetically, the last column 0):
//   delta_t = clip(rho_t) (r_{t+1} + gamma V_{t+1} (1 - d_{t+1}) - V_t)
//   k_t     = gamma lambda clip(c_t) (1 - d_{t+1}),      A_{T-1} = 0
// Standard conventions (flags: non-zero is set; done = terminated | truncated):
//   V'_t    = V_{t+1}; the end value after the last step; bootstrap_values where truncated
//   td_t    = r_t + gamma V'_t - V_t, with V'_t read as +0 where terminated (even a NaN)
//   delta_t = rho_t td_t,  k_t = gamma lambda c_t (1 - done_t)   A_t = delta_t + k_t A_{t+1}
//   pg_t    = rho_pg_t td_t + gamma rho_pg_t (1 - done_t) A_{t+1}   (V-trace's advantages)
//   returns = A_t + V_t
// Per-step gamma_t / lambda_t (kSteps): read at step t in place of the scalars. The
// flags select rather than multiply (td_t's bootstrap term is +0 where terminated,
// k_t and pg's factor +0 where done, whatever gamma_t holds, a NaN too).
#pragma once

#include <cstdint>

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

/// Prefetches the bootstrap values a time-contiguous row's truncations will read:
/// scattered reads, whose latency is not hidden behind the chain of blocks
/// (65536x128 f32 GAE with 1 % truncations, one thread: 14 ms instead of 10
/// without this). Row-adjacent data goes without: a pass over the next step's
/// flags cost more than it saved there.
template <typename C, typename F>
void prefetch_bootstraps(const arrays& a, std::int64_t row) {
    const view& truncated = a[role::truncated];
    // The call's own flags of type F only (a converting source's are copies, read later).
    const bool of_type_f = sizeof(F) == 1 ? byte_flags(truncated.type) : truncated.type == dtype_of<F>;
    if (!truncated.present || truncated.col_stride != 1 || !of_type_f) return;
    const F* flags = static_cast<const F*>(truncated.at(row, 0));
    const view& bootstrap = a[role::bootstrap_values];
    const char* boot = static_cast<const char*>(bootstrap.at(row, 0));
    const std::int64_t stride = bootstrap.col_stride * bootstrap.size;
    const std::int64_t full = a.horizon - a.horizon % W<C>;
    for (std::int64_t j = full; j < a.horizon; ++j)
        if (flags[j] != F(0)) __builtin_prefetch(boot + j * stride);
    // Descending, as the traversal reads: an ascending pass here slowed its streams.
    M<C> any{};
    for (std::int64_t j = full - W<C>; j >= 0; j -= W<C>) any |= simd::set_lanes<C>(flags + j);
    if (!simd::any_lane<C>(any)) return;
    for (std::int64_t j = full - W<C>; j >= 0; j -= W<C>) {
        const M<C> set = simd::set_lanes<C>(flags + j);
        for (int i = 0; i < W<C>; ++i)
            if (set[i]) __builtin_prefetch(boot + (j + i) * stride);
    }
}

template <typename C>
struct advantage_scalars {
    C gamma, gamma_lambda, rho_clip, c_clip, rho_pg_clip, lambda;
    C alpha = C(1);  // leaky V-trace (standard_producer's kExtra)
};

/// The puff advantage. Its dones are used arithmetically: of the values' type
/// in the call's memory, or converted as values (engine_sources.hpp). Its fused
/// returns are A + V.
template <typename C>
struct puff_producer {
    using scalar = C;
    static constexpr bool kForward = false;
    const arrays& a;
    V<C> one, gamma, gamma_lambda, rho_clip, c_clip;

    puff_producer(const arrays& arrays_, const advantage_scalars<C>& s)
        : a(arrays_), one(simd::splat<C>(C(1))), gamma(simd::splat<C>(s.gamma)),
          gamma_lambda(simd::splat<C>(s.gamma_lambda)), rho_clip(simd::splat<C>(s.rho_clip)),
          c_clip(simd::splat<C>(s.c_clip)) {}

    struct step {
        V<C> delta, decay, values;
    };
    C seed(std::int64_t) const { return C(0); }
    void prefetch_row(std::int64_t) const {}

    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        auto zero = [](std::int64_t) { return C(0); };  // step T: read, then dropped below
        const V<C> importance = in.values(role::importance, 0, zero);
        const V<C> not_done = one - in.values(role::terminated, 1, zero);
        step s;
        s.values = in.values(role::values, 0, zero);
        s.delta = simd::clip<C>(importance, rho_clip) *
                  (in.values(role::rewards, 1, zero) + gamma * in.values(role::values, 1, zero) * not_done -
                   s.values);
        s.decay = gamma_lambda * simd::clip<C>(importance, c_clip) * not_done;
        const M<C> last = in.last_step();  // A_{T-1} = 0 (bitwise: a NaN V_{T-1} too)
        s.delta = simd::zero_where<C>(last, s.delta);
        s.decay = simd::zero_where<C>(last, s.decay);
        return s;
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step& st, V<C> s, V<C>) const {
        return {s, s + st.values};
    }
};

/// GAE and TD(lambda) (kPg false: the advantages are A), V-trace (kPg: the
/// advantages are pg); kImp: importance ratios read (V-trace), F: the flags' type.
/// kSteps: per-step gamma and/or lambda arrays.
/// kNext: next_values is V'_t at every step (truncated only cuts the scan; the
/// pg's vs'_t is V_{t+1} + A_{t+1} inside an episode, as rlax and TorchRL, and
/// next_values_t where it ends). kExtra (V-trace): rlax's sample_mask (a step
/// not set passes A_{t+1} through: delta 0, k 1) and leaky V-trace's alpha
/// (each clipped ratio mixed with the raw one). Each is a compile-time choice, so
/// that the plain calls read and test nothing of them; the forms' runners
/// (standard_forms.cpp) take kSteps always and read per-step gamma and lambda
/// where the call has them (a test per vector), so every form combines with them.
template <typename C, typename F, bool kImp, bool kPg, bool kSteps = false, bool kNext = false, bool kExtra = false>
struct standard_producer {
    using scalar = C;
    static constexpr bool kForward = false;
    const arrays& a;
    V<C> one, gamma, gamma_lambda, rho_clip, c_clip, rho_pg_clip, lambda, alpha, one_minus_alpha;
    bool leaky = false;  // kExtra: alpha < 1

    standard_producer(const arrays& arrays_, const advantage_scalars<C>& s)
        : a(arrays_), one(simd::splat<C>(C(1))), gamma(simd::splat<C>(s.gamma)),
          gamma_lambda(simd::splat<C>(s.gamma_lambda)), rho_clip(simd::splat<C>(s.rho_clip)),
          c_clip(simd::splat<C>(s.c_clip)), rho_pg_clip(simd::splat<C>(s.rho_pg_clip)),
          lambda(simd::splat<C>(s.lambda)), alpha(simd::splat<C>(s.alpha)),
          one_minus_alpha(simd::splat<C>(C(1) - s.alpha)), leaky(kExtra && s.alpha != C(1)) {}

    struct step {
        V<C> delta, decay, q, p, values;
    };
    C seed(std::int64_t) const { return C(0); }

    // V'_{T-1}: last_value, bootstrap_values at the last step, or next_values there.
    C value_after_end(std::int64_t row) const {
        if constexpr (kNext) return element<C>(a[role::next_values], row, a.horizon - 1);
        return a[role::last_value].present ? element<C>(a[role::last_value], row, 0)
                                    : element<C>(a[role::bootstrap_values], row, a.horizon - 1);
    }

    void prefetch_row(std::int64_t row) const {
        if constexpr (!kNext) prefetch_bootstraps<C, F>(a, row);
    }

    // A clipped ratio; leaky V-trace mixes in the raw one (a NaN ratio then gives NaN).
    PUFF_SIMD_INLINE V<C> clipped(V<C> ratio, V<C> clip) const {
        const V<C> c = simd::clip<C>(ratio, clip);
        if constexpr (kExtra) {
            if (leaky) return alpha * c + one_minus_alpha * ratio;
        }
        return c;
    }

    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        auto zero = [](std::int64_t) { return C(0); };
        auto end = [this](std::int64_t row) { return value_after_end(row); };
        step s;
        s.values = in.values(role::values, 0, zero);
        V<C> next = kNext ? in.values(role::next_values, 0, zero) : in.values(role::values, 1, end);
        const M<C> terminated = in.template flags<F>(role::terminated, 0);
        M<C> done = terminated;
        if (in.present(role::truncated)) {
            const M<C> truncated = in.template flags<F>(role::truncated, 0);
            if (simd::any_lane<C>(truncated)) {  // rare: a branch per vector, not a stream
                // kNext: truncated only cuts the scan; a step flagged both is terminated (issue 33)
                if constexpr (!kNext) next = bootstrap_truncated<C>(in, next, truncated, terminated);
                done |= truncated;
            }
        }
        const V<C> ratio = kImp ? in.values(role::importance, 0, zero) : one;
        // gamma_t and gamma_t lambda_t: the scalars, or (kSteps) the per-step arrays the call has.
        const V<C> g = per_step<C, kSteps>(in, role::gamma, gamma);
        const V<C> gl = kSteps ? g * per_step<C, kSteps>(in, role::lambda, lambda) : gamma_lambda;
        // The flags select rather than multiply: a per-step gamma_t or lambda_t where they
        // cut is not read, a NaN too (for the checked scalars the same bits as a product).
        const V<C> rewards = in.values(role::rewards, 0, zero);
        const V<C> td = rewards + simd::zero_where<C>(terminated, g * next) - s.values;
        s.delta = kImp ? clipped(ratio, rho_clip) * td : td;
        s.decay = simd::zero_where<C>(done, kImp ? gl * clipped(ratio, c_clip) : gl);
        if constexpr (kPg) {
            const V<C> rho_pg = kImp ? clipped(ratio, rho_pg_clip) : one;
            V<C> td_pg = td;
            if constexpr (kNext) {  // vs'_t: V_{t+1} (+ A_{t+1} below) inside an episode, next_values_t where it ends
                const V<C> later = in.values(role::values, 1, end);
                const V<C> boot = simd::zero_where<C>(done, later) + simd::zero_where<C>(~done, next);
                td_pg = rewards + simd::zero_where<C>(terminated, g * boot) - s.values;
            }
            s.q = kImp ? rho_pg * td_pg : td_pg;
            s.p = simd::zero_where<C>(done, g * rho_pg);
        }
        if constexpr (kExtra) {
            if (in.present(role::sample_mask)) {  // rlax: acc_t = m (delta + k acc_{t+1}) + (1 - m) acc_{t+1}
                const M<C> learnable = in.template flags<F>(role::sample_mask, 0);
                s.delta = simd::zero_where<C>(~learnable, s.delta);
                s.decay = simd::zero_where<C>(~learnable, s.decay) + simd::zero_where<C>(learnable, one);
            }
        }
        return s;
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step& st, V<C> s, V<C> later) const {
        return {kPg ? st.q + st.p * later : s, s + st.values};
    }
};

}  // namespace puffadv::detail::engine
