// The host half of a GPU backend, written once in CUDA spelling and compiled
// by advantage_cuda.cu (nvcc) and advantage_hip.cpp (clang, LANGUAGE HIP).
// Arguments arrive checked by find_puff_problem; this file only launches.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "core/gpu_backend.hpp"
#include "gpu/launch.cuh"
#include "gpu/puff_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

[[noreturn]] inline void throw_gpu_error(cudaError_t error, const char* statement, const char* file,
                                         int line, int device) {
    throw gpu_error(std::string("puffadv: ") + PUFF_RUNTIME_NAME + " error on device " +
                    std::to_string(device) + ": " + cudaGetErrorString(error) + " (in " + statement +
                    " at " + file + ":" + std::to_string(line) + ")");
}

/// The one checking macro: a failing runtime call throws gpu_error with its string.
#define PUFF_GPU_CHECK(statement, device)                                                     \
    do {                                                                                      \
        const cudaError_t puff_error_ = (statement);                                          \
        if (puff_error_ != cudaSuccess)                                                       \
            ::puffadv::gpu::throw_gpu_error(puff_error_, #statement, __FILE__, __LINE__, device); \
    } while (0)

/// Makes `device` current for a scope and restores the caller's device after.
class device_guard {
public:
    explicit device_guard(int device) : device_(device) {
        PUFF_GPU_CHECK(cudaGetDevice(&previous_), device);
        if (previous_ != device_) PUFF_GPU_CHECK(cudaSetDevice(device_), device);
    }
    ~device_guard() {
        if (previous_ != device_) (void)cudaSetDevice(previous_);
    }
    device_guard(const device_guard&) = delete;
    device_guard& operator=(const device_guard&) = delete;

private:
    int device_, previous_ = -1;
};

template <typename T>
strided_view<T> view_of(const matrix& m) {
    return {static_cast<T*>(m.data), m.row_stride, m.col_stride};
}
/// An absent array gives a null view.
template <typename T>
strided_view<T> view_of(const std::optional<matrix>& m) {
    return m ? view_of<T>(*m) : strided_view<T>{nullptr, 0, 0};
}

/// One access may load `items` steps of this array: time-contiguous, aligned
/// to `items` elements, and so is every row start (row_stride a multiple).
inline bool vectorizable(const matrix& m, int items = scan_policy::items) {
    const auto address = reinterpret_cast<std::uintptr_t>(m.data);
    return m.col_stride == 1 && address % (items * dtype_size(m.type)) == 0 &&
           (m.rows <= 1 || m.row_stride % items == 0) && m.cols % items == 0;
}

/// Flat whole rows may load `items` steps of this array in one access (see
/// scan_rows.cuh): time-contiguous, every row right after the one before (one
/// packed run of rows * cols elements), aligned to `items` elements, and rows
/// of at least `items` steps (a group then holds one row end at most).
inline bool flat_vectorizable(const matrix& m, int items = scan_policy::items) {
    const auto address = reinterpret_cast<std::uintptr_t>(m.data);
    return m.cols >= items && m.col_stride == 1 && (m.rows <= 1 || m.row_stride == m.cols) &&
           address % (items * dtype_size(m.type)) == 0;
}

/// Split-row carries live in this output (null: none), see carry_slots; a scan
/// over reversed time passes `reversed`.
template <typename T>
carry_slots<T> carry_slots_of(const matrix* m, bool reversed = false) {
    if (!m || m->col_stride != 1) return {};
    const auto element = static_cast<int>(dtype_size(m->type));
    return {static_cast<unsigned char*>(m->data), m->row_stride * element, element, reversed ? m->cols : 0};
}

template <typename T>
void run_puff(const puff_arrays& a, const puff_params& params, cudaStream_t stream) {
    const int device = a.values.device.index;
    device_guard guard(device);
    int sm_count = 0;
    PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);

    const puff_producer<T> producer{view_of<const T>(a.values), view_of<const T>(a.rewards),
                                    view_of<const T>(a.dones), view_of<const T>(a.importance),
                                    T(params.gamma), T(params.gamma) * T(params.gae_lambda),
                                    T(params.rho_clip), T(params.c_clip)};
    const store_advantage<T> epilogue{view_of<T>(a.advantages)};
    const matrix* all[] = {&a.values, &a.rewards, &a.dones, &a.importance, &a.advantages};
    bool contiguous = true, vectorized = true, flat = true;
    for (const matrix* m : all) {
        contiguous = contiguous && m->time_contiguous();
        vectorized = vectorized && vectorizable(*m);
        flat = flat && flat_vectorizable(*m);
    }
    const std::int64_t rows = a.values.rows, horizon = a.values.cols;
    // Flat kernels serve whole-row plans only: split rows of flat arrays take the scalar ones.
    flat = flat && !vectorized && whole_rows_planned<scan_policy::items>(rows, horizon, sm_count);
    const carry_slots<T> scratch = carry_slots_of<T>(&a.advantages);
    if constexpr (std::is_same_v<T, float>) {  // rows of >= 1024 steps (launch.cuh)
        bool aligned_wide = vectorized;
        for (const matrix* m : all) aligned_wide = aligned_wide && vectorizable(*m, long_row_policy::items);
        if (aligned_wide && long_rows(rows, horizon, sm_count)) {
            const row_scan_plan plan = plan_row_scan<long_row_policy>(rows, horizon, true, sm_count);
            PUFF_GPU_CHECK((launch_row_scan<long_row_policy, true>(plan, producer, epilogue, scratch, rows, horizon,
                                                                   stream)),
                           device);
            return;
        }
    }
    const row_scan_plan plan = plan_row_scan<scan_policy>(rows, horizon, contiguous, sm_count, flat, vectorized);
    const cudaError_t launched =
        vectorized ? launch_row_scan<scan_policy, true>(plan, producer, epilogue, scratch, rows, horizon, stream)
        : flat     ? launch_row_scan<scan_policy, true, true>(plan, producer, epilogue, scratch, rows, horizon, stream)
                   : launch_row_scan<scan_policy, false>(plan, producer, epilogue, scratch, rows, horizon, stream);
    PUFF_GPU_CHECK(launched, device);
}

inline void puff_advantage(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.values.type == dtype::float64)
        run_puff<double>(arrays, params, s);
    else
        run_puff<float>(arrays, params, s);
}

/// A [rows, horizon] row-major view of device memory on the current device.
template <typename T>
puff_arrays device_arrays(device_type type, const T* values, const T* rewards, const T* dones,
                          const T* importance, T* advantages, std::int64_t rows, std::int64_t horizon) {
    int current = 0;
    PUFF_GPU_CHECK(cudaGetDevice(&current), -1);
    auto view = [&](const T* p, bool writable) {
        matrix m;
        m.data = const_cast<T*>(p);
        m.type = sizeof(T) == 4 ? dtype::float32 : dtype::float64;
        m.rows = rows;
        m.cols = horizon;
        m.row_stride = horizon;
        m.col_stride = 1;
        m.device = {type, current};
        m.writable = writable;
        return m;
    };
    return {view(values, false), view(rewards, false), view(dones, false), view(importance, false),
            view(advantages, true)};
}

/// Devices, versions, and why none is usable when none is.
/// Waits for all work queued on `device`, for callers that have no stream to
/// order their next read of an output on (JAX arrays reached through DLPack).
inline void synchronize(int device) {
    device_guard guard(device);
    PUFF_GPU_CHECK(cudaDeviceSynchronize(), device);
}

inline gpu_status status() {
    gpu_status s;
    s.compiled = true;
    (void)cudaRuntimeGetVersion(&s.runtime_version);
    (void)cudaDriverGetVersion(&s.driver_version);
#if defined(PUFF_HIP)  // HIP: major * 10^7 + minor * 10^5 + patch; report as CUDA does (1000 major + 10 minor)
    for (int* v : {&s.runtime_version, &s.driver_version})
        *v = *v / 10000000 * 1000 + *v / 100000 % 100 * 10;
#endif
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess) {
        s.error = cudaGetErrorString(error);
        (void)cudaGetLastError();  // not sticky: leave no error behind for the caller
        return s;
    }
    if (count == 0) s.error = "no device found";
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
            (void)cudaGetLastError();
            s.device_names.push_back("device " + std::to_string(i) + " (properties unreadable)");
            continue;
        }
#if defined(PUFF_HIP)
        const std::string arch = prop.gcnArchName;
#else
        const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
#endif
        s.device_names.push_back(std::string(prop.name) + " (" + arch + ", " +
                                 std::to_string(prop.multiProcessorCount) + " SMs, warp " +
                                 std::to_string(prop.warpSize) + ")");
    }
    s.device_count = count;
    return s;
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
