// Host half of the GPU conventions, their entry points: standard_estimate
// (GAE / TD(lambda) / V-trace here; the estimator family's kinds in
// conventions_family.cuh) and puff_advantage_general (the puff advantage with
// fused outputs or reduced-precision dtypes). What the launches share (call
// layouts, policies, launchers) is in conventions_layout.cuh. Compiled by
// conventions_cuda.cu (nvcc) and conventions_hip.cpp (LANGUAGE HIP). Arguments
// arrive checked by find_standard_problem / find_puff_problem.
#pragma once

#include <optional>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/conventions_family.cuh"
#include "gpu/conventions_layout.cuh"
#include "gpu/standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

template <typename T>
standard_producer<T> generic_standard_producer(const standard_arrays& a, const standard_params& p) {
    return {typed(a.values),     typed(a.rewards),          typed(a.terminated), typed(a.truncated),
            typed(a.importance), typed(a.bootstrap_values), typed(a.last_value), a.rewards.cols,
            T(p.gamma),          T(p.gamma) * T(p.lambda),  T(p.rho_clip),       T(p.c_clip)};
}

/// Calls f(inputs) with the optional inputs of a fast GAE / TD(lambda) call
/// fixed at compile time (inputs_known, standard_steps.cuh): every combination
/// for float32, the plain call (neither truncations nor ratios) for the 16-bit
/// floats, and inputs_at_run_time for the rest, so that the kernels that
/// matter lose their selects without multiplying every kernel by four.
/// H200, benchmarks/gpu_scan_variants.cu, 2026-12-02: float32 GAE at
/// 65536x128 40.5 -> 34.3 us (8.7 -> 4.8 M warp instructions at 4096x1024),
/// with truncations 57.4 -> 49.2 us; V-trace keeps inputs_at_run_time, which
/// ran faster (50.6 against 53.0 us).
template <typename In, bool PolicyGradient, typename F>
void with_known_inputs(const standard_arrays& a, F&& f) {
    const bool truncations = a.truncated.has_value(), ratio = a.importance.has_value();
    if constexpr (PolicyGradient) {
        // every input read as the call says, at run time (below)
    } else if constexpr (std::is_same_v<In, float>) {
        if (truncations)
            return ratio ? f(inputs_known<true, true>{}) : f(inputs_known<true, false>{});
        return ratio ? f(inputs_known<false, true>{}) : f(inputs_known<false, false>{});
    } else if constexpr (sizeof(In) == 2) {
        if (!truncations && !ratio) return f(inputs_known<false, false>{});
    }
    f(inputs_at_run_time{});
}

/// The epilogue of a standard call: V-trace's writes the pg advantages (in the
/// scan, from A_{t+1}) and vs; the others A and the returns.
template <typename T, bool PolicyGradient, typename Out>
store_estimate<T, Out, PolicyGradient> standard_epilogue(Out advantages, Out returns, const standard_arrays& a,
                                                         const standard_params& p) {
    return {advantages, returns, T(p.gamma), T(p.rho_pg_clip), a.importance.has_value(), a.rewards.cols};
}

template <typename T, bool PolicyGradient>
void run_standard(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    const matrix* summed = summed_output(a);
    if (sums && !summed) unsupported("row sums without the advantages output");

    call_layout layout(a.rewards.type);
    layout.input(a.rewards);
    layout.input(a.values);
    layout.input(a.importance);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    if (a.truncated) layout.input(a.bootstrap_values);  // read like the others then (load_items)
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    layout.plan(rows, horizon, device);
    const matrix* scratch = scratch_output({&a.advantages, &a.fused.returns});

    // 16-bit V-trace keeps the generic kernels for flat arrays: its flat fast
    // kernels spilled 108-200 bytes at 64 registers (ptxas), the aligned ones 34-46.
    const bool flat_ok = !(PolicyGradient && dtype_size(layout.float_type) == 2);
    if (horizon > 0 && layout.fast() && (layout.access() == vector_access::aligned || flat_ok)) {
        with_storage_types<T>(layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            using values = strided_view<const In>;
            with_known_inputs<In, PolicyGradient>(a, [&](auto inputs) {
                const standard_producer<T, values, strided_view<const Flag>, decltype(inputs)> producer{
                    view_of<const In>(a.values),     view_of<const In>(a.rewards),
                    view_of<const Flag>(a.terminated), view_of<const Flag>(a.truncated),
                    view_of<const In>(a.importance), view_of<const In>(a.bootstrap_values),
                    view_of<const In>(a.last_value), horizon,
                    T(p.gamma), T(p.gamma) * T(p.lambda), T(p.rho_clip), T(p.c_clip)};
                const auto epilogue = standard_epilogue<T, PolicyGradient>(view_of<Out>(a.advantages),
                                                                          view_of<Out>(a.fused.returns), a, p);
                if constexpr (std::is_same_v<In, float> && !PolicyGradient) {
                    if (layout.long_rows)  // launch.cuh: rows of >= 1024 steps
                        return launch_vector_scan<long_row_policy>(vector_access::aligned, producer, epilogue,
                                                                   scratch, rows, horizon, device, stream);
                }
                using Inputs = decltype(inputs);
                constexpr bool may_be_plain = !std::is_same_v<Inputs, inputs_known<true, false>> &&
                                              !std::is_same_v<Inputs, inputs_known<true, true>>;
                if constexpr (std::is_same_v<In, float> && may_be_plain) {
                    // V-trace takes 8 steps only where a row fits in them (no
                    // shuffles; its step keeps four words live, elsewhere 4 steps
                    // won): H200, 1048576x8, 52.8 against 57.2 us (harness).
                    const bool wide = !PolicyGradient || horizon <= wide_standard_policy::items;
                    if (wide && !a.truncated && layout.access(true) != vector_access::none)
                        return launch_vector_scan<wide_standard_policy>(layout.access(true), producer, epilogue,
                                                                        scratch, rows, horizon, device, stream);
                }
                launch_vector_scan<standard_policy_for<In, PolicyGradient>>(layout.access(), producer, epilogue,
                                                                            scratch, rows, horizon, device, stream);
            });
        });
    } else if (horizon > 0) {
        const auto epilogue = standard_epilogue<T, PolicyGradient>(typed(a.advantages), typed(a.fused.returns), a, p);
        launch_scan<scan_policy, false>(generic_standard_producer<T>(a, p), epilogue, scratch, rows, horizon,
                                        layout.contiguous, device, stream);
    }
    if (sums) launch_row_sums(*summed, a.fused, rows, horizon, device, stream);
}

template <typename T>
void run_estimate(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    switch (p.kind) {
        case estimator::vtrace: return run_standard<T, true>(a, p, stream);
        case estimator::discounted_returns:
        case estimator::retrace:
        case estimator::q_lambda:
        case estimator::episodic_sum: return run_family_scan<T>(a, p, stream);
        case estimator::n_step_returns: return run_n_step<T>(a, p, stream);
        default: return run_standard<T, false>(a, p, stream);  // gae, td_lambda
    }
}

inline void standard_estimate(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.rewards.type == dtype::float64)
        run_estimate<double>(arrays, params, s);
    else
        run_estimate<float>(arrays, params, s);
}

template <typename T>
void run_puff_general(const puff_arrays& a, const puff_params& p, cudaStream_t stream) {
    const int device = a.values.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.values.rows, horizon = a.values.cols;
    const std::optional<matrix> advantages = a.advantages;
    call_layout layout(a.values.type);
    for (const matrix* m : {&a.values, &a.rewards, &a.importance}) layout.input(*m);
    layout.flag(a.dones);
    layout.output(advantages);
    layout.output(a.fused.returns);
    layout.plan(rows, horizon, device);
    const matrix* scratch = scratch_output({&advantages, &a.fused.returns});
    const T gamma_lambda = T(p.gamma) * T(p.gae_lambda);

    if (horizon > 0 && layout.fast()) {
        with_storage_types<T>(layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            const puff_producer<T, strided_view<const In>, strided_view<const Flag>> producer{
                view_of<const In>(a.values), view_of<const In>(a.rewards), view_of<const Flag>(a.dones),
                view_of<const In>(a.importance), T(p.gamma), gamma_lambda, T(p.rho_clip), T(p.c_clip)};
            const store_estimate<T, strided_view<Out>> epilogue{view_of<Out>(advantages),
                                                                view_of<Out>(a.fused.returns)};
            if constexpr (std::is_same_v<In, float>) {
                if (layout.long_rows)  // launch.cuh: rows of >= 1024 steps
                    return launch_vector_scan<long_row_policy>(vector_access::aligned, producer, epilogue, scratch,
                                                               rows, horizon, device, stream);
            }
            launch_vector_scan<policy_for<In>>(layout.access(), producer, epilogue, scratch, rows, horizon, device,
                                               stream);
        });
    } else if (horizon > 0) {
        const puff_producer<T, typed_view> producer{typed(a.values), typed(a.rewards), typed(a.dones),
                                                    typed(a.importance), T(p.gamma), gamma_lambda,
                                                    T(p.rho_clip), T(p.c_clip)};
        const store_estimate<T> epilogue{typed(advantages), typed(a.fused.returns)};
        launch_scan<scan_policy, false>(producer, epilogue, scratch, rows, horizon, layout.contiguous, device,
                                        stream);
    }
    launch_row_sums(a.advantages, a.fused, rows, horizon, device, stream);
}

inline void puff_advantage_general(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.values.type == dtype::float64)
        run_puff_general<double>(arrays, params, s);
    else
        run_puff_general<float>(arrays, params, s);
}
}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
