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
