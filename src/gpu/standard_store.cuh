// The standard estimators' epilogue (the Epilogue concept of puff_steps.cuh):
// A, or V-trace's policy-gradient advantages, and the returns A + V, stored from
// the scanned value and the step that produced it (standard_steps.cuh).
#pragma once

#include "gpu/standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// Stores A and the returns A + V (any float dtype, `Out` columns); either may be
/// absent. PolicyGradient (V-trace): `advantages` gets the pg advantages
///   pg_t = min(ratio_t, rho_pg_clip) (r_t + gamma (1 - term_t) vs'_t - V_t)
/// from vs_{t+1} = A_{t+1} + V_{t+1}, which the scan hands over with each step
/// (the next lane's, the next round's or the next segment's A): one pass, no
/// second read of the inputs; `returns` gets vs = A + V.
template <typename T, typename Out = typed_view, bool PolicyGradient = false>
struct store_estimate {
    Out advantages, returns;
    T gamma = T(0), rho_pg_clip = T(1);
    bool has_ratio = false;
    std::int64_t horizon = 0;
    T alpha = T(1);  ///< leaky V-trace (steps of the forms variant only)

    /// The forms variant's pg_t (standard_forms.cpp's kNext / kExtra, term by term):
    /// vs'_t is V_{t+1} + A_{t+1} inside an episode, next_values_t where it ends
    /// and at the row's last step; the ratio leaky where alpha < 1; gamma_t per step
    /// where the step has its own (inputs_forms_per_step), selected away where done.
    template <typename Step>
    __device__ __forceinline__ T pg_of_forms(const Step& s, bool row_end, T a_next, T value_next) const {
        T g = gamma;
        if constexpr (Step::per_step) g = s.gamma;
        T rho = T(1);
        if (has_ratio) {
            rho = clip_to(s.ratio, rho_pg_clip);
            if (alpha != T(1)) rho = alpha * rho + (T(1) - alpha) * s.ratio;
        }
        if (!(s.flags & 8u))  // no next_values: the bootstrap is in the reward (flag 4), as below
            return rho * (s.reward + discounted_vs_next(s, row_end, a_next, value_next) - s.value);
        const bool done = s.flags & 3u;
        const T v_after = done || row_end ? s.next_value : value_next;
        const T td = s.reward + (s.flags & 1u ? T(0) : g * v_after) - s.value;
        const T a_after = row_end ? T(0) : a_next;
        return rho * td + (done ? T(0) : g * rho) * a_after;
    }

    /// pg_t from step t, A_{t+1} and V_{t+1}; `row_end`: t is its row's last step.
    template <typename Step>
    __device__ __forceinline__ T pg_advantage(const Step& s, bool row_end, T a_next, T value_next) const {
        // vs_{t+1} is multiplied in wherever the row holds it, never selected away,
        // so that a NaN there reaches pg_t as on the CPU (pg_t = q_t + p_t A_{t+1}):
        // times (1 - term_t) inside an episode, times 0 where the bootstrap was read
        // (it is in s.reward then; step t+1 belongs to the next episode). Past the
        // row's last step there is nothing (a_next and next belong to another row).
        if constexpr (Step::forms) return pg_of_forms(s, row_end, a_next, value_next);
        const T rho = has_ratio ? clip_to(s.ratio, rho_pg_clip) : T(1);
        return rho * (s.reward + discounted_vs_next(s, row_end, a_next, value_next) - s.value);
    }

    /// gamma_t (1 - term_t) vs_{t+1} for pg_t, vs_{t+1} = A_{t+1} + V_{t+1} (0 past the row's
    /// last step), with the bootstrap pair (no next_values: flag 4 says the bootstrap is in
    /// s.reward). A per-step gamma_t is selected away where step t is done (a NaN there too),
    /// as on the CPU.
    template <typename Step>
    __device__ __forceinline__ T discounted_vs_next(const Step& s, bool row_end, T a_next, T value_next) const {
        const T vs_next = row_end ? T(0) : a_next + value_next;
        if constexpr (Step::per_step) {
            return s.flags & 5u ? T(0) * vs_next : s.gamma * vs_next;
        } else {
            const T not_terminated = s.flags & 1u ? T(0) : T(1);
            return gamma * (s.flags & 4u ? T(0) * vs_next : vs_next * not_terminated);
        }
    }

    template <typename Step, typename Next>
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, T a, const Step& s, T a_next,
                                          const Next& next) const {
        if constexpr (PolicyGradient) {
            if (present(advantages))
                write(advantages, row, t, pg_advantage(s, t == horizon - 1, a_next, next.value));
        } else {
            if (present(advantages)) write(advantages, row, t, a);
        }
        if (present(returns)) write(returns, row, t, a + s.value);
    }
    template <int N, bool Flat, typename Step, typename Next>
    __device__ __forceinline__ void store_items(const item_places<N, Flat>& at, const T (&a)[N],
                                                const Step (&s)[N], T a_after, const Next& after) const {
        if constexpr (PolicyGradient) {
            if (present(advantages)) {
                T pg[N];
#pragma unroll
                for (int j = 0; j < N; ++j)
                    pg[j] = pg_advantage(s[j], at.row_end(j, horizon), j + 1 < N ? a[j + 1] : a_after,
                                         j + 1 < N ? s[j + 1].value : after.value);
                write_items(advantages, at.row, at.t, pg);
            }
        } else {
            if (present(advantages)) write_items(advantages, at.row, at.t, a);
        }
        if (present(returns)) {
            T r[N];
#pragma unroll
            for (int j = 0; j < N; ++j) r[j] = a[j] + s[j].value;
            write_items(returns, at.row, at.t, r);
        }
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
