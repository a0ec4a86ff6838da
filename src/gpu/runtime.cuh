// The GPU runtime as the engine uses it, written once in CUDA spelling
// (vendor.cuh maps the names for HIP): the error check, the device guard, the
// status report and the synchronisation of a device.
#pragma once

#include <initializer_list>
#include <string>

#include <puffadv/puffadv.hpp>

#include "gpu/vendor.cuh"

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
