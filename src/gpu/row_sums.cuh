// Row sums of an estimate's output (the fused sums, abs_sums and square_sums
// outputs): a second small kernel after the scan, launched by the planner
// (planner.cuh, launch_row_sums) where a call asks for any of them.
#pragma once

#include <cstdint>

#include "gpu/storage.cuh"
#include "gpu/vendor.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// Row sums of |A|, A and A^2 (any of the three outputs may be absent), a warp
/// per row, accumulated in float64 whatever the dtype.
/// The host launches widest_warp_size threads per row: narrower warps leave the surplus idle.
__global__ void row_sums_kernel(typed_view a, std::int64_t rows, std::int64_t horizon, typed_view abs_sums,
                                typed_view sums, typed_view square_sums) {
    constexpr int warp = physical_warp_size;
    const int lane = threadIdx.x % warp;
    const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / warp;
    if (row >= rows) return;  // whole warps leave together
    double s_abs = 0, s = 0, s_sq = 0;
    for (std::int64_t t = lane; t < horizon; t += warp) {
        const double x = read<double>(a, row, t);
        s_abs += x < 0 ? -x : x, s += x, s_sq += x * x;
    }
#pragma unroll
    for (int offset = warp / 2; offset > 0; offset /= 2) {
        s_abs += shfl_down<warp>(s_abs, offset);
        s += shfl_down<warp>(s, offset);
        s_sq += shfl_down<warp>(s_sq, offset);
    }
    if (lane != 0) return;
    const typed_view* out[3] = {&abs_sums, &sums, &square_sums};
    const double value[3] = {s_abs, s, s_sq};
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (out[i]->data) write(*out[i], row, 0, value[i]);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
