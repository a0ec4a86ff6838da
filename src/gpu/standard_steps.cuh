// GAE / TD(lambda) / V-trace targets as plug-ins of the row-scan kernels (see
// the Producer and Epilogue concepts in puff_steps.cuh), for every supported
// dtype: float32/float64/bfloat16/float16 values, bool/uint8/float flags, and
// outputs of the arithmetic or input dtype. The column types (storage.cuh)
// are template parameters: compile-time storage types for the fast kernels,
// typed_view (dtype as data) for any mix.
#pragma once

#include <type_traits>

#include "gpu/affine_scan.cuh"
#include "gpu/puff_steps.cuh"
#include "gpu/storage.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

template <typename T>
__device__ __forceinline__ T clip_to(T x, T limit) { return x < limit ? x : limit; }  // NaN -> the clip

/// SPEC section 6. A step loads its value, reward, flags and ratio. Where the
/// buffer does not hold V_{t+1} (truncation, last step) the bootstrap is read
/// then and folded into the reward, r_t + gamma V'_t, so that a step stays four
/// words (register pressure) and the map needs no row or time. The map of step
/// t needs only V_{t+1} of the next step (its lookahead: one shuffle).
/// Which optional inputs (truncations with bootstrap_values, importance
/// ratios) a standard call reads: read from the arrays at run time (any call),
/// or fixed at compile time for the common calls, whose maps then carry no
/// flag bits, clips or selects for the inputs they lack (plain GAE issued
/// 1.6x the puff kernel's instructions per step: Nsight Compute, 2026-12-02).
struct inputs_at_run_time {};
template <bool Truncations, bool Ratio>
struct inputs_known {
    static constexpr bool truncations = Truncations, ratio = Ratio;
};
/// Issue 29's per-step gamma_t / lambda_t arrays (either may be absent: its
/// scalar then), with the optional inputs read at run time: a variant of its
/// own, so that the scalar forms' kernels stay as they were. The generic
/// kernels run it (engine.cuh), one instantiation per arithmetic type.
struct inputs_per_step {};
/// Issue 29's forms of GAE and V-trace, each read at run time: next_values (V'_t
/// at every step; truncated then only cuts the scan), V-trace's sample_mask and
/// leaky alpha. A variant of its own as inputs_per_step (the generic kernels).
struct inputs_forms {};
/// The forms with per-step gamma / lambda arrays: both variants' reads, in kernels of
/// their own, so that each variant alone keeps its registers.
struct inputs_forms_per_step {};
template <typename Inputs>
inline constexpr bool per_step_inputs =
    std::is_same_v<Inputs, inputs_per_step> || std::is_same_v<Inputs, inputs_forms_per_step>;
template <typename Inputs>
inline constexpr bool form_inputs = std::is_same_v<Inputs, inputs_forms> || std::is_same_v<Inputs, inputs_forms_per_step>;

/// A step's V'_t from next_values (Forms): kept beside the reward, as V-trace's
/// pg reads r_t without it inside an episode.
template <typename T, bool Forms>
struct step_next {
    static constexpr bool forms = true;
    T next_value;
};
template <typename T>
struct step_next<T, false> {
    static constexpr bool forms = false;
};

/// A step's own discount and gamma lambda where they are per-step arrays
/// (Steps): read at the step's row and time as its reward; else nothing.
template <typename T, bool Steps>
struct step_discounts {
    static constexpr bool per_step = true;
    T gamma, gamma_lambda;
};
template <typename T>
struct step_discounts<T, false> {
    static constexpr bool per_step = false;
};

/// gamma_t (the array where present, else the scalar) and gamma_t lambda_t.
template <typename T, typename Values>
__device__ __forceinline__ step_discounts<T, true> discounts_at(const Values& gamma_steps,
                                                                const Values& lambda_steps, T gamma, T lambda,
                                                                std::int64_t row, std::int64_t t) {
    const T g = present(gamma_steps) ? read<T>(gamma_steps, row, t) : gamma;
    return {g, g * (present(lambda_steps) ? read<T>(lambda_steps, row, t) : lambda)};
}

template <typename T, typename Values = typed_view, typename Flags = Values, typename Inputs = inputs_at_run_time>
struct standard_producer {
    using value_type = T;
    static constexpr bool steps = per_step_inputs<Inputs>;  ///< gamma_t / lambda_t read per step
    static constexpr bool forms = form_inputs<Inputs>;      ///< next_values, sample_mask, alpha
    struct step : step_discounts<T, steps>, step_next<T, forms> {
        T value, reward, ratio;
        /// bit 0 terminated, bit 1 truncated, bit 2 bootstrapped (V'_t is in reward),
        /// bit 3 V'_t in next_value (forms: next_values), bit 4 masked out (forms: sample_mask)
        std::uint32_t flags;
    };
    struct lookahead {
        T value;  ///< V_{t+1}
    };

    Values values, rewards;
    Flags terminated, truncated;
    Values importance, bootstrap_values;
    Values last_value;  ///< [rows]: row_stride only
    std::int64_t horizon;
    T gamma, gamma_lambda, rho_clip, c_clip;
    Values gamma_steps{}, lambda_steps{};  ///< steps: per-step arrays (absent: the scalar)
    T lambda = T(0);                       ///< steps: lambda where lambda_steps is absent
    Values next_values{};                  ///< forms: V'_t at every step (absent: as without)
    Flags sample_mask{};                   ///< forms: a step not set passes A_{t+1} through
    T alpha = T(1);                        ///< forms: leaky V-trace's mix of clipped and raw ratios

    static constexpr bool inputs_fixed = !std::is_same_v<Inputs, inputs_at_run_time> && !steps && !forms;
    __device__ __forceinline__ bool has_truncations() const {
        if constexpr (inputs_fixed) return Inputs::truncations;
        else return present(truncated);  // then bootstrap_values is present (checked)
    }
    __device__ __forceinline__ bool has_ratio() const {
        if constexpr (inputs_fixed) return Inputs::ratio;
        else return present(importance);
    }

    static __device__ __forceinline__ step make_step(T value, T reward, T term, T trunc, T ratio) {
        step s;
        s.value = value, s.reward = reward, s.ratio = ratio;
        // Bit 0: terminated, bit 1: truncated; a step flagged both is terminated
        // (Gymnasium's meaning, issue 33): its bootstrap is never read.
        s.flags = term != T(0) ? 1u : trunc != T(0) ? 2u : 0u;
        return s;
    }
    /// The step's gamma and gamma lambda: its own (steps), else the scalars.
    static __device__ __forceinline__ T gamma_of(const step& s, T scalar) {
        if constexpr (steps) return s.gamma;
        else return scalar;
    }
    static __device__ __forceinline__ T gamma_lambda_of(const step& s, T scalar) {
        if constexpr (steps) return s.gamma_lambda;
        else return scalar;
    }
    __device__ __forceinline__ void read_discounts(step& s, std::int64_t row, std::int64_t t) const {
        if constexpr (steps)
            static_cast<step_discounts<T, true>&>(s) = discounts_at(gamma_steps, lambda_steps, gamma, lambda, row, t);
    }
    /// forms: next_values and sample_mask of the step; true where V'_t is next_values_t.
    __device__ __forceinline__ bool read_forms(step& s, std::int64_t row, std::int64_t t) const {
        if constexpr (forms) {
            if (present(sample_mask) && read<T>(sample_mask, row, t) == T(0)) s.flags |= 16u;
            if (present(next_values)) {
                s.next_value = read<T>(next_values, row, t), s.flags |= 8u;
                return true;
            }
        }
        (void)s, (void)row, (void)t;
        return false;
    }
    /// read_discounts and read_forms of N aligned steps, each array in one access as the
    /// others (the place-by-place reads issued N loads a thread and array).
    template <int N>
    __device__ __forceinline__ void read_variant_items(std::int64_t row, std::int64_t t, step (&s)[N]) const {
        if constexpr (steps) {
            T g[N], l[N];
            if (present(gamma_steps)) {
                read_items(gamma_steps, row, t, g);
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) g[j] = gamma;
            }
            if (present(lambda_steps)) {
                read_items(lambda_steps, row, t, l);
            } else {
#pragma unroll
                for (int j = 0; j < N; ++j) l[j] = lambda;
            }
#pragma unroll
            for (int j = 0; j < N; ++j) s[j].gamma = g[j], s[j].gamma_lambda = g[j] * l[j];  // as discounts_at
        }
        if constexpr (forms) {
            T x[N];
            if (present(sample_mask)) {
                read_items(sample_mask, row, t, x);
#pragma unroll
                for (int j = 0; j < N; ++j)
                    if (x[j] == T(0)) s[j].flags |= 16u;
            }
            if (present(next_values)) {
                read_items(next_values, row, t, x);
#pragma unroll
                for (int j = 0; j < N; ++j) s[j].next_value = x[j], s[j].flags |= 8u;
            }
        }
        (void)row, (void)t, (void)s;
    }
    /// A clipped ratio; leaky V-trace (forms, alpha < 1) mixes in the raw one.
    __device__ __forceinline__ T clipped(T ratio, T clip) const {
        const T c = clip_to(ratio, clip);
        if constexpr (forms) {
            if (alpha != T(1)) return alpha * c + (T(1) - alpha) * ratio;
        }
        return c;
    }
    /// V'_t at a row's last step: bootstrap_values there, else last_value.
    __device__ __forceinline__ T end_bootstrap(std::int64_t row) const {
        if constexpr (forms) {
            if (present(next_values)) return T(0);  // never used: V'_t is next_values_t (last_value refused)
        }
        return present(bootstrap_values) ? read<T>(bootstrap_values, row, horizon - 1) : read<T>(last_value, row, 0);
    }
    /// Folds gamma V'_t into the reward of a step that is not terminated.
    __device__ __forceinline__ void bootstrap(step& s, T v_next) const {
        if constexpr (forms) {
            if (s.flags & 8u) return;  // V'_t is next_values_t, kept apart (td_error)
        }
        if (!(s.flags & 1u)) s.reward = s.reward + gamma_of(s, gamma) * v_next, s.flags |= 4u;
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        step s = make_step(read<T>(values, row, t), read<T>(rewards, row, t), read<T>(terminated, row, t),
                           has_truncations() ? read<T>(truncated, row, t) : T(0),
                           has_ratio() ? read<T>(importance, row, t) : T(1));
        read_discounts(s, row, t);
        if (read_forms(s, row, t)) return s;  // V'_t read: no bootstrap to fold
        if (t == horizon - 1)
            bootstrap(s, end_bootstrap(row));
        else if (has_truncations() && (s.flags & 3u) == 2u)  // truncated inside the buffer: rare, a branch
            bootstrap(s, read<T>(bootstrap_values, row, t));
        return s;
    }

    /// The N steps at `at`. The bootstrap of a row's last step is loaded
    /// with the other inputs (its address does not depend on them): a load that
    /// waited for the flags put a second memory round trip into every block.
    /// With truncations, bootstrap_values is read like the other inputs (one
    /// vector load, used where the step is truncated or the row's last): a
    /// branch and a scalar load per truncated step cost more than the bytes.
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        T v[N], r[N], d[N], u[N], w[N];
        const bool truncations = has_truncations();
        const bool holds_end = at.holds_end(horizon);  // at.row's end
        const T end_value = holds_end && !truncations ? end_bootstrap(at.row) : T(0);
        read_items(values, at.row, at.t, v);
        read_items(rewards, at.row, at.t, r);
        read_items(terminated, at.row, at.t, d);
        if (truncations)
            read_items(truncated, at.row, at.t, u);
        else
            for (int j = 0; j < N; ++j) u[j] = T(0);
        if (has_ratio())
            read_items(importance, at.row, at.t, w);
        else
            for (int j = 0; j < N; ++j) w[j] = T(1);
#pragma unroll
        for (int j = 0; j < N; ++j) s[j] = make_step(v[j], r[j], d[j], u[j], w[j]);
        if constexpr ((steps || forms) && !Flat) {  // aligned (engine.cuh: run_variant)
            read_variant_items(at.row, at.t, s);
        } else if constexpr (steps || forms) {  // flat groups: one place at a time
#pragma unroll
            for (int j = 0; j < N; ++j) read_discounts(s[j], at.row_of(j), at.t_of(j));
#pragma unroll
            for (int j = 0; j < N; ++j) read_forms(s[j], at.row_of(j), at.t_of(j));
        }
        bool bootstraps = truncations;  // forms with next_values: truncations only cut, no bootstrap_values
        if constexpr (forms) bootstraps = bootstraps && present(bootstrap_values);
        if (bootstraps) {
            T b[N];
            read_items(bootstrap_values, at.row, at.t, b);
#pragma unroll
            for (int j = 0; j < N; ++j)
                if ((s[j].flags & 2u) || at.row_end(j, horizon)) bootstrap(s[j], b[j]);
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j)
                if (at.row_end(j, horizon)) bootstrap(s[j], end_value);
        }
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return {s.value}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t row, std::int64_t t) const {
        return {read<T>(values, row, t)};
    }

    /// r_t + gamma (1 - terminated_t) V'_t - V_t, with V'_t = `next_value` inside an episode
    /// (forms: next_values_t where read).
    static __device__ __forceinline__ T td_error(const step& cur, T gamma, T next_value) {
        if constexpr (forms) {
            if (cur.flags & 8u) next_value = cur.next_value;
        }
        return cur.reward + (cur.flags & 5u ? T(0) : gamma * next_value) - cur.value;
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& next, bool last) const {
        const bool ratio = has_ratio();
        const T rho = ratio ? clipped(cur.ratio, rho_clip) : T(1);
        const T c = ratio ? clipped(cur.ratio, c_clip) : T(1);
        const T delta = rho * td_error(cur, gamma_of(cur, gamma), next.value);
        if constexpr (forms) {  // rlax: acc_t = m (delta + k acc_{t+1}) + (1 - m) acc_{t+1}
            if (cur.flags & 16u) return {T(1), T(0), last};
        }
        return {cur.flags & 3u ? T(0) : gamma_lambda_of(cur, gamma_lambda) * c, delta, last};
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
