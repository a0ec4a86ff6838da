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

template <typename T, typename Values = typed_view, typename Flags = Values, typename Inputs = inputs_at_run_time>
struct standard_producer {
    using value_type = T;
    struct step {
        T value, reward, ratio;
        std::uint32_t flags;  ///< bit 0 terminated, bit 1 truncated, bit 2 bootstrapped (V'_t is in reward)
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

    static constexpr bool inputs_fixed = !std::is_same_v<Inputs, inputs_at_run_time>;
    __device__ __forceinline__ bool has_truncations() const {
        if constexpr (inputs_fixed) return Inputs::truncations;
        else return present(truncated);  // then bootstrap_values is present (checked)
    }
    __device__ __forceinline__ bool has_ratio() const {
        if constexpr (inputs_fixed) return Inputs::ratio;
        else return present(importance);
    }

    static __device__ __forceinline__ step make_step(T value, T reward, T term, T trunc, T ratio) {
        // Bit 0: terminated, bit 1: truncated; a step flagged both is terminated
        // (Gymnasium's meaning, issue 33): its bootstrap is never read.
        return {value, reward, ratio, term != T(0) ? 1u : trunc != T(0) ? 2u : 0u};
    }
    /// V'_t at a row's last step: bootstrap_values there, else last_value.
    __device__ __forceinline__ T end_bootstrap(std::int64_t row) const {
        return present(bootstrap_values) ? read<T>(bootstrap_values, row, horizon - 1) : read<T>(last_value, row, 0);
    }
    /// Folds gamma V'_t into the reward of a step that is not terminated.
    __device__ __forceinline__ void bootstrap(step& s, T v_next) const {
        if (!(s.flags & 1u)) s.reward = s.reward + gamma * v_next, s.flags |= 4u;
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        step s = make_step(read<T>(values, row, t), read<T>(rewards, row, t), read<T>(terminated, row, t),
                           has_truncations() ? read<T>(truncated, row, t) : T(0),
                           has_ratio() ? read<T>(importance, row, t) : T(1));
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
        if (truncations) {
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

    /// r_t + gamma (1 - terminated_t) V'_t - V_t, with V'_t = `next_value` inside an episode.
    static __device__ __forceinline__ T td_error(const step& cur, T gamma, T next_value) {
        return cur.reward + (cur.flags & 5u ? T(0) : gamma * next_value) - cur.value;
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& next, bool last) const {
        const bool ratio = has_ratio();
        const T rho = ratio ? clip_to(cur.ratio, rho_clip) : T(1);
        const T c = ratio ? clip_to(cur.ratio, c_clip) : T(1);
        const T delta = rho * td_error(cur, gamma, next.value);
        return {cur.flags & 3u ? T(0) : gamma_lambda * c, delta, last};
    }
};

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

    /// pg_t from step t, A_{t+1} and V_{t+1}; `row_end`: t is its row's last step.
    template <typename Step>
    __device__ __forceinline__ T pg_advantage(const Step& s, bool row_end, T a_next, T value_next) const {
        // vs_{t+1} is multiplied in wherever the row holds it, never selected away,
        // so that a NaN there reaches pg_t as on the CPU (pg_t = q_t + p_t A_{t+1}):
        // times (1 - term_t) inside an episode, times 0 where the bootstrap was read
        // (it is in s.reward then; step t+1 belongs to the next episode). Past the
        // row's last step there is nothing (a_next and next belong to another row).
        const T vs_next = row_end ? T(0) : a_next + value_next;
        const T not_terminated = s.flags & 1u ? T(0) : T(1);
        const T v_next = s.flags & 4u ? T(0) * vs_next : vs_next * not_terminated;
        const T rho = has_ratio ? clip_to(s.ratio, rho_pg_clip) : T(1);
        const T td = s.reward + gamma * v_next - s.value;
        return rho * td;
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

/// Row sums of |A|, A and A^2 (any of the three outputs may be absent), a warp
/// per row, accumulated in float64 whatever the dtype.
/// The host launches widest_warp_size threads per row: narrower warps leave the surplus idle.
__global__ void row_sums_kernel(typed_view a, std::int64_t rows, std::int64_t horizon, typed_view abs_sums,
                                typed_view sums, typed_view square_sums) {
    constexpr int warp = physical_warp_size;
    const int lane = threadIdx.x % warp;
    const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / warp;
    if (row >= rows) return;  // whole warps leave together
    double s_abs = 0, s = 0, s_sq = 0;
    for (std::int64_t t = lane; t < horizon; t += warp) {
        const double x = read<double>(a, row, t);
        s_abs += x < 0 ? -x : x, s += x, s_sq += x * x;
    }
#pragma unroll
    for (int offset = warp / 2; offset > 0; offset /= 2) {
        s_abs += shfl_down<warp>(s_abs, offset);
        s += shfl_down<warp>(s, offset);
        s_sq += shfl_down<warp>(s_sq, offset);
    }
    if (lane != 0) return;
    const typed_view* out[3] = {&abs_sums, &sums, &square_sums};
    const double value[3] = {s_abs, s, s_sq};
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (out[i]->data) write(*out[i], row, 0, value[i]);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
