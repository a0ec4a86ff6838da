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

#include "gpu/backward_steps.cuh"
#include "gpu/family_kinds.cuh"
#include "gpu/kinds.cuh"
#include "gpu/recurrence_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// Issue 29's variants (`Inputs`: inputs_per_step, per-step gamma / lambda
/// arrays; inputs_forms, next_values, sample_mask, alpha; inputs_forms_per_step,
/// both). A call whose rows
/// vectorise aligned, with float32 or float64 arrays (the arithmetic type's own
/// storage: no 16-bit inputs or float32 outputs of them), takes the fast
/// kernels of the kind's own policy (no wide or long-row policy): the generic
/// kernels' scalar loads ran these forms at 33-46 % of the copy bandwidth on
/// the H200 (benchmarks/bench_conventions.py --estimators per_step, 2026-12-04).
/// Only aligned access: the producers read the extra arrays place by place
/// (item_places::row_of / t_of), which flipped flat groups do not give.
/// Anything else takes the generic kernels; the scalar forms' kernels are unchanged.
template <typename T, typename Kind, typename Inputs>
void run_variant(const standard_arrays& a, const standard_params& p, const scan_call& c) {
    const dtype own = sizeof(T) == 8 ? dtype::float64 : dtype::float32;
    bool ran = false;
    if (c.layout.fast() && Kind::fast_ok(c.layout) && c.layout.access() == vector_access::aligned &&
        c.layout.float_type == own) {
        with_storage_types<T>(c.layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            if constexpr (std::is_same_v<In, T> && std::is_same_v<Out, T> && Kind::template stores<In, Flag, Out>()) {
                const fixed_columns<In, Flag, Out> columns;
                // launch_vector_scan's aligned branch, without compiling its flat kernels
                launch_scan<typename Kind::template tuning<In, Inputs>::policy, true>(
                    c, Kind::template producer<T, Inputs>(a, p, columns), Kind::template epilogue<T>(a, p, columns),
                    true);
                ran = true;
            }
        });
    }
    if (ran) return;
    const typename Kind::template generic_columns<T> columns;
    launch_generic(c, Kind::template producer<T, Inputs>(a, p, columns), Kind::template epilogue<T>(a, p, columns));
}

/// The scan of `Kind` on a planned call: the fast kernels (fixed_columns of
/// the call's storage types, the kind's input variant and tuning) where the
/// layout allows them and the kind takes them, else the generic kernels.
/// Issue 29's per-step arrays and forms: run_variant.
template <typename T, typename Kind>
void run_scan(const standard_arrays& a, const standard_params& p, const scan_call& c) {
    if (c.horizon <= 0) return;
    if constexpr (Kind::has_forms) {
        if (Kind::forms(a, p)) {
            if (a.gamma || a.lambda) return run_variant<T, Kind, inputs_forms_per_step>(a, p, c);
            return run_variant<T, Kind, inputs_forms>(a, p, c);
        }
    }
    if (a.gamma || a.lambda) {
        run_variant<T, Kind, inputs_per_step>(a, p, c);
    } else if (c.layout.fast() && Kind::fast_ok(c.layout)) {
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
    layout.input(a.gamma);  // per-step arrays: read like the rewards
    layout.input(a.lambda);
    layout.plan(a.rewards.rows, a.rewards.cols, device);
    const scan_call call{layout, scratch_output({&a.advantages, &a.fused.returns}), a.rewards.rows, a.rewards.cols,
                         device, stream, Kind::reversed};
    run_scan<T, Kind>(a, p, call);
}

/// n-step returns: windows; n >= horizon is TD(lambda) (every window reaches
/// the row's end), the scan (with next_values: Q(lambda)'s, as the core routes it).
template <typename T>
void n_step_returns(const standard_arrays& a, const standard_params& p, int device, cudaStream_t stream) {
    if (p.n >= a.rewards.cols) {
        standard_params td = p;
        td.kind = a.next_values ? estimator::q_lambda : estimator::td_lambda;
        if (a.next_values) return scan<T, q_lambda_kind>(a, td, device, stream);
        return scan<T, standard_kind<false>>(a, td, device, stream);
    }
    call_layout layout(a.rewards.type);
    read_n_step(layout, a);
    if (a.gamma || a.lambda || a.next_values) {  // issue 29's forms: one thread per output, any layout
        launch_windows<false>(layout, n_step_window_of<T, any_columns, true>(a, p, any_columns{}), p.n,
                              a.truncated.has_value(), device, stream);
    } else if (dtype_size(layout.float_type) != 2 && !layout.flags_mixed && !layout.outputs_mixed) {
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
    switch (p.kind) {
        case estimator::puff_advantage:
            if (plain_puff_call(a))
                scan<T, puff_kind<true>>(a, p, device, stream);
            else
                scan<T, puff_kind<false>>(a, p, device, stream);
            break;
        case estimator::gae: scan<T, standard_kind<false>>(a, p, device, stream); break;
        case estimator::td_lambda:  // with next_values: Q(lambda)'s recursion on V (the core's computed_as)
            if (a.next_values)
                scan<T, q_lambda_kind>(a, p, device, stream);
            else
                scan<T, standard_kind<false>>(a, p, device, stream);
            break;
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
        case estimator::value_vjp: scan<T, value_vjp_kind>(a, p, device, stream); break;
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
