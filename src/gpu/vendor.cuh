// One kernel source for CUDA and HIP: device code is written in CUDA spelling,
// and this header maps the names for HIP (PUFF_HIP is defined by the HIP build).
// Warp width is data: physical_warp_size is 64 on AMD CDNA (gfx9), 32 on RDNA
// and NVIDIA, and lane masks are 64-bit on HIP.
#pragma once

#include <cstdint>

#if defined(PUFF_HIP)
#include <hip/hip_runtime.h>

#define cudaErrorInvalidConfiguration hipErrorInvalidConfiguration
#define cudaErrorInvalidValue hipErrorInvalidValue
#define cudaDevAttrMultiProcessorCount hipDeviceAttributeMultiprocessorCount
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceProp hipDeviceProp_t
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaDriverGetVersion hipDriverGetVersion
#define cudaError_t hipError_t
#define cudaGetDevice hipGetDevice
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDeviceProperties hipGetDeviceProperties
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaRuntimeGetVersion hipRuntimeGetVersion
#define cudaSetDevice hipSetDevice
#define cudaStream_t hipStream_t
#define cudaSuccess hipSuccess

// ==== PUFF_HIP_CPU: ROCm's HIP CPU Runtime (tests/hip_cpu, cmake/PuffHIPCPU.cmake) ====
// The test build compiles this kernel source as plain C++ against the HIP CPU
// Runtime (warpSize 64: 64 fibers a wavefront, shuffles through the block).
// Here is what that runtime lacks or gets wrong, mapped so the kernels stay as
// they are. Triple-chevron launches cannot be a macro: the test build rewrites
// each launch into hip_cpu::launch(name, site, config..., kernel)(args) (the only
// change to its copies of the source), and that launch is defined here.
#if defined(PUFF_HIP_CPU)
#include <bitset>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>

namespace puffadv::gpu::hip_cpu {

static_assert(warpSize == 64, "the HIP CPU Runtime runs 64-lane wavefronts");

/// Compute units the planner sees (hipDeviceGetAttribute): fixed, so that a
/// test's shapes reach the same traversals on every machine.
#ifndef PUFF_HIP_CPU_COMPUTE_UNITS
#define PUFF_HIP_CPU_COMPUTE_UNITS 2
#endif

/// Lane in the wavefront: the runtime's blocks are 1-D in this source.
inline int lane_id() { return static_cast<int>(threadIdx.x % warpSize); }

/// AMD's __shfl_down (amd_warp_functions.h): own value where lane % width +
/// delta leaves the group. The runtime's own compares the absolute lane with
/// the width, which returns the own value in every group above the first.
template <typename T>
T shfl_down(T v, unsigned delta, int width = warpSize) {
    const T r = ::__shfl_down(v, delta, warpSize);
    return (lane_id() & (width - 1)) + static_cast<int>(delta) < width ? r : v;
}
/// AMD's __shfl: lane (source mod width) of the caller's group of width lanes.
template <typename T>
T shfl(T v, int source, int width = warpSize) {
    return ::__shfl(v, (lane_id() & ~(width - 1)) + (source & (width - 1)), warpSize);
}

inline float uint_as_float(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float int_as_float(std::int32_t i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned umulhi(unsigned a, unsigned b) { return static_cast<unsigned>((std::uint64_t(a) * b) >> 32); }
inline std::uint32_t float_as_uint(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }

/// What backend.cuh reads of hipDeviceProp_t (the runtime's is final and
/// lacks gcnArchName).
struct device_prop {
    char name[256];
    char gcnArchName[64];
    int multiProcessorCount, warpSize;
};
inline hipError_t get_device_properties(device_prop* p, int device) {
    hipDeviceProp_t prop{};
    const hipError_t e = ::hipGetDeviceProperties(&prop, device);
    if (e != hipSuccess) return e;
    std::memcpy(p->name, prop.name, sizeof p->name);
    std::strcpy(p->gcnArchName, "hip-cpu");
    p->warpSize = warpSize;  // the runtime reports its SIMD width; kernels run 64-lane wavefronts
    p->multiProcessorCount = PUFF_HIP_CPU_COMPUTE_UNITS;
    return e;
}
enum device_attribute { multiprocessor_count };
inline hipError_t get_device_attribute(int* value, device_attribute, int device) {
    if (device != 0) return hipErrorInvalidDevice;
    *value = PUFF_HIP_CPU_COMPUTE_UNITS;
    return hipSuccess;
}

/// What a test may observe of each launch: the kernel as written at the
/// launch site, that site's function with its template arguments, the grid.
struct launch_record {
    std::string kernel, site;
    unsigned blocks, threads;
};
inline std::function<void(const launch_record&)>& launch_observer() {
    static std::function<void(const launch_record&)> observer;
    return observer;
}

template <typename Kernel>
struct launcher {
    const char *kernel, *site;
    dim3 blocks, threads;
    std::size_t shared;
    hipStream_t stream;
    Kernel call;
    /// The runtime's launch is instantiated once, for this one body type: per
    /// kernel it instantiates the parallel algorithms (TBB) again, which made
    /// one translation unit take many minutes to compile.
    template <typename... Args>
    void operator()(const Args&... args) const {
        if (const auto& observe = launch_observer()) observe({kernel, site, blocks.x, threads.x});
        const std::function<void()> body = [call = call, arguments = std::make_tuple(args...)]() {
            std::apply(call, arguments);  // the kernel takes its parameters by value: a copy per thread
        };
        ::hip::detail::launch(blocks, threads, static_cast<std::uint32_t>(shared), stream, body, std::tuple<>{});
    }
};
/// A triple-chevron launch (blocks, threads, shared, stream) in the rewritten source.
template <typename Kernel>
launcher<Kernel> launch(const char* kernel, const char* site, dim3 blocks, dim3 threads, std::size_t shared,
                        hipStream_t stream, Kernel call) {
    return {kernel, site, blocks, threads, shared, stream, call};
}

}  // namespace puffadv::gpu::hip_cpu

// GCC's SIMD clones of every kernel and device function (the runtime's
// __attribute__((simd))) only cost compile time here, with a warning for each
// struct argument; flatten (inlining everything into each kernel) multiplied
// the build time (conventions_hip.cpp: over 6 CPU minutes at -O2).
#undef __device__
#undef __global__
#define __device__
#define __global__
#define __shfl_down ::puffadv::gpu::hip_cpu::shfl_down
#define __shfl ::puffadv::gpu::hip_cpu::shfl
#define __uint_as_float ::puffadv::gpu::hip_cpu::uint_as_float
#define __float_as_uint ::puffadv::gpu::hip_cpu::float_as_uint
#define __int_as_float ::puffadv::gpu::hip_cpu::int_as_float
#define __umulhi ::puffadv::gpu::hip_cpu::umulhi
#define hipDeviceAttributeMultiprocessorCount ::puffadv::gpu::hip_cpu::multiprocessor_count
#define hipDeviceGetAttribute ::puffadv::gpu::hip_cpu::get_device_attribute
#undef cudaDeviceProp
#undef cudaGetDeviceProperties
#define cudaDeviceProp ::puffadv::gpu::hip_cpu::device_prop
#define cudaGetDeviceProperties ::puffadv::gpu::hip_cpu::get_device_properties
#endif  // PUFF_HIP_CPU
// ==== end PUFF_HIP_CPU ====

#define PUFF_RUNTIME_NAME "HIP"
#define PUFF_GPU_ABI hip
#else
#include <cuda_runtime.h>
#define PUFF_RUNTIME_NAME "CUDA"
#define PUFF_GPU_ABI cuda
#endif

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

#if defined(PUFF_HIP)
using lane_mask = std::uint64_t;
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int physical_warp_size = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int physical_warp_size = 64;  // host pass: only device code reads it
#endif
#else
using lane_mask = std::uint32_t;
constexpr int physical_warp_size = 32;
#endif
/// The widest wavefront of any target (CDNA): host code sizes grids with it.
constexpr int widest_warp_size = 64;
constexpr lane_mask full_lane_mask = ~lane_mask(0);

/// v from the lane `delta` above in a group of `width` lanes (own v past the top).
/// Every lane of the warp must call it: ROCm 5 has no masked shuffles.
template <int width, typename T>
__device__ __forceinline__ T shfl_down(T v, unsigned delta) {
#if defined(PUFF_HIP)
    return __shfl_down(v, delta, width);
#else
    return __shfl_down_sync(full_lane_mask, v, delta, width);
#endif
}

/// v from lane `source` of a group of `width` lanes.
template <int width, typename T>
__device__ __forceinline__ T shfl(T v, int source) {
#if defined(PUFF_HIP)
    return __shfl(v, source, width);
#else
    return __shfl_sync(full_lane_mask, v, source, width);
#endif
}

/// shfl_down for any trivially copyable struct, one 32-bit word at a time.
template <int width, typename S>
__device__ __forceinline__ S shfl_down_struct(const S& s, unsigned delta) {
    static_assert(sizeof(S) % 4 == 0, "shuffled structs are whole 32-bit words");
    constexpr int words = sizeof(S) / 4;
    int in[words], out[words];
    __builtin_memcpy(in, &s, sizeof(S));
#pragma unroll
    for (int i = 0; i < words; ++i) out[i] = shfl_down<width>(in[i], delta);
    S r;
    __builtin_memcpy(&r, out, sizeof(S));
    return r;
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
