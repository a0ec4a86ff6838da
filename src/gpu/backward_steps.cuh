// The backward of the value estimators on the GPU (kinds.cuh says what a kind
// is): GAE and TD(lambda) with the bootstrap pair, and discounted returns
// (lambda 1), whose forward scans A_t = delta_t + k_t A_{t+1} with k_t =
// gamma_t lambda_t (1 - done_t), 0 at the row's last step. Its VJP
// (src/cpu/estimators_backward.hpp derives it) is the same scan run forwards:
//   a_t = u_t + k_{t-1} a_{t-1}                              = dL/dr_t
//   dL/dV_t = dL/dreturns_t - a_t + gamma_{t-1} (1 - done_{t-1}) a_{t-1}
// with u_t = dL/dA_t + dL/dreturns_t (the caller's sum). It runs as a scan over reversed time, as
// the episodic sums do (family_steps.cuh: the scan's step u is time
// horizon - 1 - u, and Flipped rows): the step scanned after step t is t - 1,
// so a step's lookahead carries its own decay k_t and gamma_t (1 - done_t) to
// the map and the store of step t + 1. Roles: u (the caller's grad_total) in
// rewards', grad_returns (optional) in values', dL/dr in advantages', dL/dV in returns'.
// With importance ratios (GAE / TD(lambda) with ratios, V-trace's vs): k_t carries c_t,
// dL/dr_t = e_t = rho_t a_t, and gamma_t (1 - done_t) carries rho_t into dL/dV_{t+1}
// (estimators_backward.hpp derives it); leaky V-trace's alpha mixes each clip.
#pragma once

#include <cstdint>

#include "gpu/family_kinds.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

template <typename T, typename Values = typed_view, typename Flags = Values, bool Flipped = false,
          bool Steps = false>
struct value_vjp_producer {
    using value_type = T;
    struct lookahead {
        T decay, through;  ///< k_t and gamma_t (1 - done_t) of the step, read by step t + 1
    };
    struct step : lookahead {
        T input, grad_returns, rho;  ///< rho: rho_t, a_t's factor in dL/dr_t (1 without ratios)
    };
    /// The clipped ratios (rho_t, c_t) of a step: 1 without importance ratios.
    struct ratios {
        T rho, c;
    };

    Values grad_total, grad_returns;
    Flags terminated, truncated;
    std::int64_t horizon;
    T gamma, lambda;
    std::int64_t rows = 0;  ///< Flipped: scan row r is memory row rows - 1 - r
    Values gamma_steps{}, lambda_steps{};  ///< Steps: per-step arrays (absent: the scalars)
    Values importance{};                   ///< the forward's ratios (absent: none)
    T rho_clip = T(1), c_clip = T(1), alpha = T(1);

    value_vjp_producer<T, Values, Flags, true, Steps> with_flipped_rows(std::int64_t all_rows) const {
        return {grad_total,   grad_returns, terminated, truncated, horizon, gamma,  lambda, all_rows,
                gamma_steps, lambda_steps, importance, rho_clip,  c_clip,  alpha};
    }
    /// A clipped ratio as the forward's (standard_steps.cuh: NaN gives the clip).
    __device__ __forceinline__ T clipped(T ratio, T clip) const {
        const T c = ratio < clip ? ratio : clip;
        return alpha != T(1) ? alpha * c + (T(1) - alpha) * ratio : c;
    }
    __device__ __forceinline__ ratios ratios_of(T ratio) const {
        if (!present(importance)) return {T(1), T(1)};
        return {clipped(ratio, rho_clip), clipped(ratio, c_clip)};
    }
    __device__ __forceinline__ T ratio_at(std::int64_t row, std::int64_t t) const {
        return present(importance) ? read<T>(importance, row, t) : T(1);
    }
    __device__ __forceinline__ std::int64_t time_of(std::int64_t u) const { return horizon - 1 - u; }
    __device__ __forceinline__ std::int64_t memory_row(std::int64_t r) const {
        if constexpr (Flipped)
            return rows - 1 - r;
        else
            return r;
    }
    /// k_t and gamma_t rho_t (1 - done_t), 0 where the step ends its episode (selected: a
    /// NaN gamma_t there is never read). The row's last step's are never read: the
    /// step after it in time is another row's first, whose map and store start afresh.
    __device__ __forceinline__ lookahead crossing(std::int64_t row, std::int64_t t, T done, const ratios& x) const {
        T g = gamma, l = lambda;
        if constexpr (Steps) {
            if (present(gamma_steps)) g = read<T>(gamma_steps, row, t);
            if (present(lambda_steps)) l = read<T>(lambda_steps, row, t);
        }
        (void)row, (void)t;
        if (done != T(0)) return {T(0), T(0)};
        return {g * l * x.c, g * x.rho};
    }
    __device__ __forceinline__ T done_at(std::int64_t row, std::int64_t t) const {
        const bool cut = read<T>(terminated, row, t) != T(0) || (present(truncated) && read<T>(truncated, row, t) != T(0));
        return cut ? T(1) : T(0);
    }
    __device__ __forceinline__ step make_step(std::int64_t row, std::int64_t t, T total, T grad_r, T done,
                                              T ratio) const {
        step s;
        const ratios x = ratios_of(ratio);
        static_cast<lookahead&>(s) = crossing(row, t, done, x);
        s.input = total, s.grad_returns = grad_r, s.rho = x.rho;
        return s;
    }

    __device__ __forceinline__ step load(std::int64_t scan_row, std::int64_t u) const {
        const std::int64_t row = memory_row(scan_row), t = time_of(u);
        const T grad_r = present(grad_returns) ? read<T>(grad_returns, row, t) : T(0);
        return make_step(row, t, read<T>(grad_total, row, t), grad_r, done_at(row, t), ratio_at(row, t));
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        const std::int64_t row = memory_row(at.row);
        const std::int64_t t = horizon - at.t - N;  // the run's first element in memory (episodic_producer's)
        T x[N], r[N] = {}, d[N], c[N] = {}, q[N];
        read_items(grad_total, row, t, x);
        if (present(grad_returns)) read_items(grad_returns, row, t, r);
        read_items(terminated, row, t, d);
        if (present(truncated)) read_items(truncated, row, t, c);
        if (present(importance)) read_items(importance, row, t, q);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const int i = N - 1 - j;
            s[j] = make_step(row, t + i, x[i], r[i], d[i] != T(0) || c[i] != T(0) ? T(1) : T(0),
                             present(importance) ? q[i] : T(1));
        }
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return s; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t scan_row, std::int64_t u) const {
        const std::int64_t row = memory_row(scan_row), t = time_of(u);
        return crossing(row, t, done_at(row, t), ratios_of(ratio_at(row, t)));
    }

    /// a_t = u_t + k_{t-1} a_{t-1}; step 0 (the scan row's end) starts from a_{-1} = 0.
    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& before, bool last) const {
        if (last) return {T(0), cur.input, true};
        return {before.decay, cur.input, false};
    }
};

/// dL/dr = rho_t a_t and dL/dV (value_vjp_producer's); `before` is step t - 1's lookahead
/// and a_before its a (neither is read at step 0). A zero gamma_{t-1} rho_{t-1}
/// (1 - done_{t-1}) selects its term away: a NaN of another episode stays out.
template <typename T, typename Out = typed_view, bool Flipped = false>
struct store_value_vjp {
    Out grad_rewards, grad_values;
    std::int64_t horizon;
    std::int64_t rows = 0;

    store_value_vjp<T, Out, true> with_flipped_rows(std::int64_t all_rows) const {
        return {grad_rewards, grad_values, horizon, all_rows};
    }
    __device__ __forceinline__ std::int64_t memory_row(std::int64_t r) const {
        if constexpr (Flipped)
            return rows - 1 - r;
        else
            return r;
    }
    /// `first`: the row's first step (the scan row's end), which has no step before it.
    template <typename Step, typename Ahead>
    static __device__ __forceinline__ T grad_value(bool first, T a, const Step& s, T a_before, const Ahead& before) {
        const T carried = !first && before.through != T(0) ? before.through * a_before : T(0);
        return s.grad_returns - s.rho * a + carried;
    }
    template <typename Step, typename Ahead>
    __device__ __forceinline__ void store(std::int64_t scan_row, std::int64_t u, T a, const Step& s, T a_before,
                                          const Ahead& before) const {
        const std::int64_t row = memory_row(scan_row), t = horizon - 1 - u;
        if (present(grad_rewards)) write(grad_rewards, row, t, s.rho * a);
        if (present(grad_values)) write(grad_values, row, t, grad_value(t == 0, a, s, a_before, before));
    }
    template <int N, bool Flat, typename Step, typename Ahead>
    __device__ __forceinline__ void store_items(const item_places<N, Flat>& at, const T (&a)[N], const Step (&s)[N],
                                                T a_before, const Ahead& before) const {
        const std::int64_t row = memory_row(at.row);
        const std::int64_t t = horizon - at.t - N;
        T forward[N], values[N];
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const int i = N - 1 - j;  // item j is time t + i
            forward[i] = s[j].rho * a[j];
            const bool inner = j + 1 < N;
            // A flat group may hold the end of one scan row and the start of the next.
            values[i] = grad_value(at.row_end(j, horizon), a[j], s[j], inner ? a[j + 1] : a_before,
                                   inner ? static_cast<const Ahead&>(s[j + 1]) : before);
        }
        if (present(grad_rewards)) write_items(grad_rewards, row, t, forward);
        if (present(grad_values)) write_items(grad_values, row, t, values);
    }
};

/// The kinds table's entry (engine.cuh: estimator::value_vjp): a scan over reversed time.
struct value_vjp_kind : family_kind_defaults {
    static constexpr bool reversed = true;
    static void read(call_layout& layout, const standard_arrays& a) {
        layout.input(a.rewards);
        layout.input(a.values);
        layout.input(a.importance);
        layout.flag(a.terminated);
        layout.flag(a.truncated);
        layout.output(a.advantages);
        layout.output(a.fused.returns);
    }
    template <typename In, typename Inputs>
    using tuning = widest_tuning<In, standard_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        return value_vjp_producer<T, typename Cols::input, typename Cols::flag, false, per_step_inputs<Inputs>>{
            c.in(a.rewards),  c.in(a.values),  c.flags(a.terminated), c.flags(a.truncated), a.rewards.cols,
            T(p.gamma),       T(p.lambda),     0,                     c.in(a.gamma),        c.in(a.lambda),
            c.in(a.importance), T(p.rho_clip), T(p.c_clip),           T(p.alpha)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_value_vjp<T, typename Cols::output>{c.out(a.advantages), c.out(a.fused.returns), a.rewards.cols};
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
