// Host half of the GPU conventions (GAE / TD(lambda) / V-trace) and of the
// puff advantage with fused outputs or reduced-precision dtypes. Compiled by
// conventions_cuda.cu (nvcc) and conventions_hip.cpp (LANGUAGE HIP). Arguments
// arrive checked by find_standard_problem / find_puff_problem.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>

#include <puffadv/conventions.hpp>

#include "backend.cuh"
#include "standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

inline typed_view typed(const matrix& m) {
    storage s = storage::byte;
    switch (m.type) {
        case dtype::float32: s = storage::f32; break;
        case dtype::float64: s = storage::f64; break;
        case dtype::bfloat16: s = storage::bf16; break;
        case dtype::float16: s = storage::f16; break;
        default: s = storage::byte; break;
    }
    return {m.data, m.row_stride, m.col_stride, s};
}
inline typed_view typed(const std::optional<matrix>& m) { return m ? typed(*m) : typed_view{}; }

/// Four steps per 16/8/4-byte access are valid: time-contiguous, aligned to four
/// elements, every row start too (see vectorizable() for float32/float64).
inline bool vectorizable_any(const matrix& m) {
    const auto bytes = static_cast<std::uintptr_t>(4 * dtype_size(m.type));
    return m.col_stride == 1 && reinterpret_cast<std::uintptr_t>(m.data) % bytes == 0 &&
           (m.rows <= 1 || m.row_stride % 4 == 0) && m.cols % 4 == 0;
}

struct layout_facts {
    bool contiguous = true, vectorized = true;
    void add(const matrix& m) {
        contiguous = contiguous && m.time_contiguous();
        vectorized = vectorized && vectorizable_any(m);
    }
    void add(const std::optional<matrix>& m) {
        if (m) add(*m);
    }
};

/// A T-typed [rows, horizon] output: split-row plans keep their carries in it.
template <typename T>
const matrix* scratch_output(std::initializer_list<const std::optional<matrix>*> outputs) {
    constexpr dtype want = sizeof(T) == 8 ? dtype::float64 : dtype::float32;
    for (const auto* m : outputs)
        if (*m && (*m)->type == want) return &**m;
    return nullptr;
}

/// Scans `producer` into `epilogue` with the row-scan kernels of launch.cuh.
template <typename Producer, typename Epilogue>
void launch_scan(const Producer& producer, const Epilogue& epilogue, const matrix* scratch, std::int64_t rows,
                 std::int64_t horizon, layout_facts facts, int device, cudaStream_t stream) {
    using T = typename Producer::value_type;
    int sm_count = 0;
    PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);
    row_scan_plan plan = plan_row_scan<scan_policy>(rows, horizon, facts.contiguous, sm_count);
    // Without a T-typed output to hold split-row carries (bf16 outputs only),
    // whole rows it is; slower for a few very long rows, never wrong.
    if (plan.layout == row_scan_plan::split_rows && !scratch)
        plan = plan_row_scan<scan_policy>(rows, horizon, false, sm_count);
    const strided_view<T> scratch_view = scratch ? view_of<T>(*scratch) : strided_view<T>{nullptr, 0, 0};
    PUFF_GPU_CHECK((launch_row_scan<scan_policy>(plan, producer, epilogue, scratch_view, rows, horizon,
                                                 facts.vectorized, stream)),
                   device);
}

inline void launch_row_sums(const matrix& a, const fused_outputs& f, std::int64_t rows, std::int64_t horizon,
                            int device, cudaStream_t stream) {
    if (!(f.abs_sums || f.sums || f.square_sums)) return;
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned>((rows * widest_warp_size + threads - 1) / threads);
    row_sums_kernel<<<blocks, threads, 0, stream>>>(typed(a), rows, horizon, typed(f.abs_sums),
                                                           typed(f.sums), typed(f.square_sums));
    PUFF_GPU_CHECK(cudaGetLastError(), device);
}

[[noreturn]] inline void unsupported(const char* what) {
    throw type_error(std::string(what) + " on the GPU is not in this build; pass host arrays");
}

template <typename T>
void run_standard(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    const bool vtrace = p.kind == estimator::vtrace;
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    if (vtrace && !a.fused.returns) unsupported("vtrace without vs (the pg advantages are derived from it)");
    if (sums && !a.advantages) unsupported("row sums without the advantages output");

    standard_producer<T> producer{typed(a.values), typed(a.rewards), typed(a.terminated), typed(a.truncated),
                                  typed(a.importance), typed(a.bootstrap_values), typed(a.last_value),
                                  horizon, T(p.gamma), T(p.gamma) * T(p.lambda), T(p.rho_clip), T(p.c_clip)};
    // V-trace: the scan writes vs only; the pg advantages follow from it.
    const store_estimate<T> epilogue{vtrace ? typed_view{} : typed(a.advantages), typed(a.fused.returns)};
    layout_facts facts;
    for (const auto* m : {&a.rewards, &a.values, &a.terminated}) facts.add(*m);
    for (const auto* m : {&a.truncated, &a.importance, &a.fused.returns}) facts.add(*m);
    if (!vtrace) facts.add(a.advantages);
    const matrix* scratch = vtrace ? scratch_output<T>({&a.fused.returns})
                                   : scratch_output<T>({&a.advantages, &a.fused.returns});
    if (horizon > 0) launch_scan(producer, epilogue, scratch, rows, horizon, facts, device, stream);

    if (vtrace && a.advantages && horizon > 0) {
        constexpr int threads = 256;
        const std::int64_t wanted = (rows * horizon + threads - 1) / threads;
        const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(wanted, 1 << 20));
        vtrace_pg_kernel<T><<<blocks, threads, 0, stream>>>(producer, typed(a.fused.returns), typed(a.advantages),
                                                            T(p.rho_pg_clip), rows);
        PUFF_GPU_CHECK(cudaGetLastError(), device);
    }
    if (sums) launch_row_sums(*a.advantages, a.fused, rows, horizon, device, stream);
}

inline void standard_estimate(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.rewards.type == dtype::float64)
        run_standard<double>(arrays, params, s);
    else
        run_standard<float>(arrays, params, s);
}

template <typename T>
void run_puff_general(const puff_arrays& a, const puff_params& p, cudaStream_t stream) {
    const int device = a.values.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.values.rows, horizon = a.values.cols;
    const puff_any_producer<T> producer{typed(a.values), typed(a.rewards), typed(a.dones), typed(a.importance),
                                        T(p.gamma), T(p.gamma) * T(p.gae_lambda), T(p.rho_clip), T(p.c_clip)};
    const store_estimate<T> epilogue{typed(a.advantages), typed(a.fused.returns)};
    layout_facts facts;
    for (const matrix* m : {&a.values, &a.rewards, &a.dones, &a.importance, &a.advantages}) facts.add(*m);
    facts.add(a.fused.returns);
    const std::optional<matrix> advantages = a.advantages;
    if (horizon > 0)
        launch_scan(producer, epilogue, scratch_output<T>({&advantages, &a.fused.returns}), rows, horizon,
                    facts, device, stream);
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
