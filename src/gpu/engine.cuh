// The GPU engine: one entry, gpu::estimate, for every estimator, the puff
// advantage included. It reads the call's layout as its kind says (the kinds
// table: kinds.cuh, family_kinds.cuh), lets the planner (planner.cuh) pick
// the traversal and policy, and launches the kind's producer and epilogue
// there; then the row sums where asked for. Written once in CUDA spelling and
// compiled by advantage_cuda.cu (nvcc) and advantage_hip.cpp (LANGUAGE HIP).
// Arguments arrive checked by the core; asynchronous on `stream`, never
// synchronises, never allocates.
#pragma once

#include <cstdint>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/family_kinds.cuh"
#include "gpu/kinds.cuh"
#include "gpu/recurrence_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// The scan of `Kind` on a planned call: the fast kernels (fixed_columns of
/// the call's storage types, the kind's input variant and tuning) where the
/// layout allows them and the kind takes them, else the generic kernels.
template <typename T, typename Kind>
void run_scan(const standard_arrays& a, const standard_params& p, const scan_call& c) {
    if (c.horizon <= 0) return;
    if (c.layout.fast() && Kind::fast_ok(c.layout)) {
        with_storage_types<T>(c.layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            if constexpr (Kind::template stores<In, Flag, Out>()) {
                Kind::template with_inputs<In>(a, [&](auto inputs) {
                    using Inputs = decltype(inputs);
                    const fixed_columns<In, Flag, Out> columns;
                    launch_fast<typename Kind::template tuning<In, Inputs>>(
                        c, a, Kind::template producer<T, Inputs>(a, p, columns),
                        Kind::template epilogue<T>(a, p, columns));
                });
            }
        });
    } else {
        const typename Kind::template generic_columns<T> columns;
        launch_generic(c, Kind::template producer<T, inputs_at_run_time>(a, p, columns),
                       Kind::template epilogue<T>(a, p, columns));
    }
}

/// Plans a call of the scan kind `Kind` and runs it.
template <typename T, typename Kind>
void scan(const standard_arrays& a, const standard_params& p, int device, cudaStream_t stream) {
    call_layout layout(a.rewards.type);
    Kind::read(layout, a);
    layout.plan(a.rewards.rows, a.rewards.cols, device);
    const scan_call call{layout, scratch_output({&a.advantages, &a.fused.returns}), a.rewards.rows, a.rewards.cols,
                         device, stream, Kind::reversed};
    run_scan<T, Kind>(a, p, call);
}

/// n-step returns: windows; n >= horizon is TD(lambda) (every window reaches
/// the row's end), the scan.
template <typename T>
void n_step_returns(const standard_arrays& a, const standard_params& p, int device, cudaStream_t stream) {
    if (p.n >= a.rewards.cols) {
        standard_params td = p;
        td.kind = estimator::td_lambda;
        return scan<T, standard_kind<false>>(a, td, device, stream);
    }
    call_layout layout(a.rewards.type);
    read_n_step(layout, a);
    if (dtype_size(layout.float_type) != 2 && !layout.flags_mixed && !layout.outputs_mixed) {
        const auto run = [&](auto flag_tag) {
            using Flag = typename decltype(flag_tag)::type;
            const auto window = n_step_window_of<T>(a, p, fixed_columns<T, Flag, T>{});
            if (layout.fast())  // vectorisable, one flag and one output type
                launch_windows<true>(layout, window, p.n, a.truncated.has_value(), device, stream);
            else
                launch_windows<false>(layout, window, p.n, a.truncated.has_value(), device, stream);
        };
        if (layout.byte_flags)
            run(type_tag<flag_byte>{});
        else
            run(type_tag<T>{});
    } else {
        launch_windows<false>(layout, n_step_window_of<T>(a, p, any_columns{}), p.n, a.truncated.has_value(),
                              device, stream);
    }
}

/// The kinds table's dispatch: each kind to its entry.
template <typename T>
void estimate_as(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    const matrix* summed = summed_output(a);
    if (sums && !summed) unsupported("row sums without the advantages output");
    // Issue 29's forms not yet in the GPU kernels (the core runs td_lambda with next_values,
    // and n-step with n >= horizon, as q_lambda: a td_lambda call here bypassed it).
    if (a.next_values && (p.kind == estimator::gae || p.kind == estimator::vtrace ||
                          p.kind == estimator::n_step_returns || p.kind == estimator::td_lambda))
        unsupported("next_values for gae, vtrace and n_step_returns");
    if (p.kind == estimator::vtrace && (a.sample_mask || (a.importance && p.alpha != 1.0)))
        unsupported("vtrace's sample_mask and leaky alpha");
    switch (p.kind) {
        case estimator::puff_advantage:
            if (plain_puff_call(a))
                scan<T, puff_kind<true>>(a, p, device, stream);
            else
                scan<T, puff_kind<false>>(a, p, device, stream);
            break;
        case estimator::gae:
        case estimator::td_lambda: scan<T, standard_kind<false>>(a, p, device, stream); break;
        case estimator::vtrace: scan<T, standard_kind<true>>(a, p, device, stream); break;
        case estimator::discounted_returns: scan<T, returns_kind>(a, p, device, stream); break;
        case estimator::retrace: scan<T, retrace_kind>(a, p, device, stream); break;
        case estimator::q_lambda: scan<T, q_lambda_kind>(a, p, device, stream); break;
        case estimator::episodic_sum: scan<T, episodic_kind>(a, p, device, stream); break;
        case estimator::n_step_returns: n_step_returns<T>(a, p, device, stream); break;
        case estimator::linear_recurrence:
            if (p.reverse)
                scan<T, recurrence_kind<false>>(a, p, device, stream);
            else
                scan<T, recurrence_kind<true>>(a, p, device, stream);
            break;
    }
    if (sums) launch_row_sums(*summed, a.fused, a.rewards.rows, a.rewards.cols, device, stream);
}

/// The one entry: every kind, any dtype the checks accept (float64 arithmetic
/// for float64 arrays, float32 for the others).
inline void estimate(const standard_arrays& arrays, const standard_params& params, cudaStream_t stream) {
    if (arrays.rewards.type == dtype::float64)
        estimate_as<double>(arrays, params, stream);
    else
        estimate_as<float>(arrays, params, stream);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
