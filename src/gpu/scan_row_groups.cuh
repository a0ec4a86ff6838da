// Whole rows scanned by groups of lanes: each row belongs to a group of
// `lanes` lanes (a power of two, at most 32) of one warp, which scans it
// backwards in rounds of lanes * items steps, the carry kept in registers.
//
// Against the block kernels of scan_rows.cuh this has no block combine (no
// shared memory, no barrier, no warp totals applied one after another) and no
// row-end flag in the scan: a group never holds two rows, and its scan starts
// from A = 0 after the row's last step, whose map is cut there (k = 0), so the
// steps past it (identities) cannot reach the row. Fewer instructions per step
// (the block kernels were bound by instructions issued: Nsight Compute on the
// H200 counts 14-24 % fewer here) and a shorter dependent chain per call, which
// is what limits small calls. Serves aligned vector
// access (every row starts aligned, the horizon a multiple of `items`) for rows
// of up to Policy::max_group_rounds rounds; the host plans it (launch.cuh).
#pragma once

#include <type_traits>

#include "gpu/scan_rows.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Lanes of a logical warp in the row-group kernels: every target's warp holds
/// whole groups of 32 (CDNA's 64 two of them), so the host sizes the grid alone.
constexpr int row_group_warp = 32;

/// outer o inner inside one row: compose() without the row-end flag.
template <typename T>
__device__ __forceinline__ affine<T> chain(affine<T> outer, affine<T> inner) {
    return {decay_product(outer.k, inner.k), outer.d + outer.k * inner.d, false};
}

template <typename T>
__device__ __forceinline__ T advance(affine<T> m, T x) {
    return m.d + m.k * x;
}

/// Launch bounds of a row-group kernel over `Producer` (see row_scan_policy).
template <typename Policy, typename Producer>
constexpr int min_group_blocks_for() {
    constexpr int groups = Policy::min_blocks_per_sm_groups;
    return sizeof(typename Producer::value_type) == 4 || Policy::min_blocks_per_sm > groups ? groups
                                                                                             : Policy::min_blocks_per_sm;
}

/// Row r is scanned by the 2^lanes_log2 lanes from thread r * 2^lanes_log2 on
/// (blockDim.x is any multiple of row_group_warp). Rows past `rows` leave whole
/// warps, or scan identities where a warp holds real rows too (shuffles need
/// every lane). Places come from shifts: a 64-bit division by a runtime value
/// is a long subroutine per thread, as much as a round of 4 steps costs.
template <typename Policy, typename Producer, typename Epilogue>
__global__ void __launch_bounds__(Policy::threads, (min_group_blocks_for<Policy, Producer>()))
scan_row_groups_kernel(Producer producer, Epilogue epilogue, std::int64_t rows, std::int64_t horizon,
                       int lanes_log2) {
    using T = typename Producer::value_type;
    using step = typename Producer::step;
    using ahead = typename Producer::lookahead;
    constexpr int warp = row_group_warp;
    constexpr int items = Policy::items;
    static_assert((items & (items - 1)) == 0, "steps per thread: a power of two");
    constexpr int items_log2 = items >= 16 ? 4 : items >= 8 ? 3 : items >= 4 ? 2 : items >= 2 ? 1 : 0;

    const int lanes = 1 << lanes_log2;
    const int lane = static_cast<int>(threadIdx.x % warp);
    const int sub = lane & (lanes - 1);  // place in the row's group
    const std::int64_t thread = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    // Whole physical warps leave (a 64-wide CDNA wavefront holds two groups of
    // 32; its shuffles want every lane, ROCm 5 has no masked ones).
    const int physical_lane = static_cast<int>(threadIdx.x % physical_warp_size);
    if (((thread - physical_lane) >> lanes_log2) >= rows) return;
    const std::int64_t row = thread >> lanes_log2;
    const int chunk_log2 = lanes_log2 + items_log2;  // steps per round
    const int rounds = static_cast<int>((horizon + (std::int64_t(1) << chunk_log2) - 1) >> chunk_log2);

    T carry = T(0);  // A at the first step after the round
    for (int r = rounds - 1; r >= 0; --r) {
        const std::int64_t t = (std::int64_t(r) << chunk_log2) + sub * items;
        const bool valid = row < rows && t < horizon;
        const bool last_step = t + items == horizon;
        const item_places<items, false> at{row, t};

        step s[items] = {};
        if (valid) producer.load_items(at, s);
        ahead after{};
        if constexpr (!std::is_empty_v<ahead>) {
            after = shfl_down_struct<warp>(Producer::ahead(s[0]), 1);
            // Only a row of several rounds has a step after a group's top lane.
            if (sub == lanes - 1 && valid && !last_step) after = producer.load_ahead(row, t + items);
        }

        affine<T> m[items];
#pragma unroll
        for (int j = 0; j < items; ++j) {
            const ahead next = j + 1 < items ? Producer::ahead(s[j + 1]) : after;
            const bool row_end = j == items - 1 && last_step;
            m[j] = valid ? producer.map(s[j], next, row_end) : identity_map<T>();
            if (row_end) m[j].k = T(0);  // the cut (A after the row is 0 here, never inf or NaN)
        }
        affine<T> mine = m[items - 1];
#pragma unroll
        for (int j = items - 2; j >= 0; --j) mine = chain(m[j], mine);

        // Inclusive reverse scan inside the group (Kogge-Stone); `lanes` is
        // the same for the whole warp, so every lane takes every shuffle.
#pragma unroll
        for (int offset = 1; offset < warp; offset *= 2) {
            if (offset >= lanes) break;
            const T k = shfl_down<warp>(mine.k, offset);
            const T d = shfl_down<warp>(mine.d, offset);
            if (sub + offset < lanes) mine = chain(mine, affine<T>{k, d, false});
        }
        const T a_first = advance(mine, carry);  // A at this thread's first step
        T a_after = shfl_down<warp>(a_first, 1);  // A at the next thread's first step
        if (sub == lanes - 1) a_after = carry;
        T out[items];
        T x = a_after;
#pragma unroll
        for (int j = items - 1; j >= 0; --j) out[j] = x = advance(m[j], x);
        if (valid) epilogue.store_items(at, out, s, a_after, after);
        if (r > 0) carry = shfl<warp>(a_first, lane - sub);  // A at the round's first step
    }
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
