// Strided 2-D views of device memory, in elements, with 64-bit offsets.
#pragma once

#include "vendor.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// A strided [rows, cols] input or output, in elements.
template <typename T>
struct strided_view {
    T* data;
    std::int64_t row_stride, col_stride;
    __device__ __forceinline__ T* at(std::int64_t row, std::int64_t t) const {
        return data + row * row_stride + t * col_stride;
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
