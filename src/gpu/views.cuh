// Strided 2-D views of device memory, in elements, with 64-bit offsets, and
// where the steps a thread loads at once lie.
#pragma once

#include "gpu/vendor.cuh"

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

/// Where the N consecutive steps that a thread loads in one access per array
/// lie: from step t of `row` on. Aligned groups (Flat false: every row starts
/// aligned and the horizon is a multiple of N) never leave their row. Flat
/// groups (every array one packed run of rows * horizon elements, see
/// scan_rows.cuh; planned for horizons >= N only) may run over one row end:
/// the item after it is step 0 of the next row. A row's end is what the
/// producers and epilogues treat per row (the bootstrap read there, the scan
/// cut there); it is `row`'s.
template <int N, bool Flat>
struct item_places {
    std::int64_t row, t;     ///< of item 0
    std::uint32_t ends = 0;  ///< Flat: bit j set where item j is its row's last step (one bit at most)
    __device__ __forceinline__ bool row_end(int j, std::int64_t horizon) const {
        if constexpr (Flat)
            return (ends >> j) & 1u;
        else
            return j == N - 1 && t + N == horizon;
    }
    /// Whether a row ends among the items.
    __device__ __forceinline__ bool holds_end(std::int64_t horizon) const {
        if constexpr (Flat)
            return ends != 0u;
        else
            return t + N == horizon;
    }
    /// The row of item j.
    __device__ __forceinline__ std::int64_t row_of(int j) const {
        if constexpr (Flat)
            return ends & ((1u << j) - 1u) ? row + 1 : row;
        else
            return row;
    }
    /// The time of item j.
    __device__ __forceinline__ std::int64_t t_of(int j) const {
        if constexpr (Flat)
            return ends & ((1u << j) - 1u) ? j - 1 - (31 - __clz(static_cast<int>(ends))) : t + j;
        else
            return t + j;
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
