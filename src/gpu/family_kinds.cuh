// The estimator family's entries in the kinds table (see kinds.cuh for what a
// scan kind says): discounted returns, Retrace, Q(lambda) and the episodic
// sums as scans (family_steps.cuh), and n-step returns as windows
// (n_step_window.cuh).
#pragma once

#include <optional>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/kinds.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// What the family's scans share: every array any of them reads, and fast
/// kernels for float32 and float64 calls only (16-bit floats too would
/// multiply the instantiations; they take the generic kernels).
struct family_kind_defaults : scan_kind_defaults {
    static void read(call_layout& layout, const standard_arrays& a) {
        for (const auto* m : {&a.values, &a.next_values, &a.target_probs, &a.behaviour_probs, &a.bootstrap_values})
            layout.input(*m);
        layout.input(a.rewards);
        layout.flag(a.terminated);
        layout.flag(a.truncated);
        layout.flag(a.greedy);
        layout.output(a.advantages);
        layout.output(a.fused.returns);
    }
    static bool fast_ok(const call_layout& layout) { return dtype_size(layout.float_type) != 2; }
    template <typename In, typename Flag, typename Out>
    static constexpr bool stores() { return sizeof(In) != 2; }
};

/// The family's float32 scans take the wide policy where every array allows
/// it, except Retrace (seven inputs: 4 steps at 4 blocks/SM, as V-trace). 16
/// steps per thread at 2 blocks/SM were slower for the lightest scans on the
/// H200 (episodic sums 28.1 -> 31.5 us at 65536x128, 2026-12-02).
template <typename In, typename Policy>
using widest_tuning = scan_tuning<Policy, std::conditional_t<std::is_same_v<In, float>, wide_standard_policy, void>>;

/// Discounted returns: no values, both outputs hold A.
struct returns_kind : family_kind_defaults {
    template <typename In, typename Inputs>
    using tuning = widest_tuning<In, standard_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        return returns_producer<T, typename Cols::input, typename Cols::flag, per_step_inputs<Inputs>>{
            c.in(a.rewards),      c.flags(a.terminated), c.flags(a.truncated), c.in(a.bootstrap_values),
            c.in(a.last_value),   a.rewards.cols,        T(p.gamma),           c.in(a.gamma)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_same<T, typename Cols::output>{c.out(a.advantages), c.out(a.fused.returns), a.rewards.cols};
    }
};

/// Retrace: A and the returns A + q.
struct retrace_kind : family_kind_defaults {
    template <typename In, typename Inputs>
    using tuning = scan_tuning<vtrace_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        return retrace_producer<T, typename Cols::input, typename Cols::flag, per_step_inputs<Inputs>>{
            c.in(a.values),          c.in(a.rewards),           c.in(a.next_values),
            c.flags(a.terminated),   c.flags(a.truncated),      c.in(a.target_probs),
            c.in(a.behaviour_probs), T(p.gamma),                T(p.lambda),
            T(p.c_clip),             p.log_probs,               c.in(a.gamma),
            c.in(a.lambda)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_estimate<T, typename Cols::output>{c.out(a.advantages), c.out(a.fused.returns)};
    }
};

/// Q(lambda): the scan runs in the target G; q only for the advantages G - q.
struct q_lambda_kind : family_kind_defaults {
    template <typename In, typename Inputs>
    using tuning = widest_tuning<In, vtrace_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        const std::optional<matrix> q = a.advantages ? a.values : std::nullopt;
        return q_lambda_producer<T, typename Cols::input, typename Cols::flag, per_step_inputs<Inputs>>{
            c.in(q),              c.in(a.rewards),  c.in(a.next_values), c.flags(a.terminated),
            c.flags(a.truncated), c.flags(a.greedy), T(p.gamma),         T(p.lambda),
            c.in(a.gamma),        c.in(a.lambda)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_target<T, typename Cols::output>{c.out(a.advantages), c.out(a.fused.returns)};
    }
};

/// The episodic sums: a scan over reversed time; both outputs hold the sums.
struct episodic_kind : family_kind_defaults {
    static constexpr bool reversed = true;
    template <typename In, typename Inputs>
    using tuning = widest_tuning<In, standard_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        return episodic_producer<T, typename Cols::input, typename Cols::flag, false, per_step_inputs<Inputs>>{
            c.in(a.rewards), c.flags(a.terminated), c.in(a.last_value), a.rewards.cols, T(p.gamma) * T(p.lambda),
            p.reset_at_start, 0, c.in(a.gamma), c.in(a.lambda), T(p.gamma), T(p.lambda)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_same<T, typename Cols::output, true>{c.out(a.advantages), c.out(a.fused.returns),
                                                          a.rewards.cols};
    }
};

/// n-step returns (n < horizon; n >= horizon is the TD(lambda) scan): the
/// arrays its windows read, and its window over `Cols`.
inline void read_n_step(call_layout& layout, const standard_arrays& a) {
    layout.input(a.rewards);
    layout.input(a.values);
    layout.input(a.next_values);
    layout.input(a.bootstrap_values);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    layout.output(a.advantages);
    layout.output(a.fused.returns);
}
/// Steps: the window with per-step gamma / lambda arrays (issue 29).
template <typename T, typename Cols, bool Steps = false>
auto n_step_window_of(const standard_arrays& a, const standard_params& p, Cols c) {
    // Threads follow the rewards' adjacent elements: along time for [B, T], along rows for time-major data.
    const bool time_major = a.rewards.col_stride != 1 && a.rewards.row_stride == 1;
    return n_step_window<T, typename Cols::input, typename Cols::flag, typename Cols::output, Steps>{
        c.in(a.values),       c.in(a.rewards),      c.flags(a.terminated),    c.flags(a.truncated),
        c.in(a.bootstrap_values), c.in(a.last_value), c.out(a.advantages),    c.out(a.fused.returns),
        a.rewards.rows,       a.rewards.cols,       p.n,                      T(p.gamma),
        T(p.lambda),          time_major,           c.in(a.gamma),            c.in(a.lambda),
        c.in(a.next_values)};
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
