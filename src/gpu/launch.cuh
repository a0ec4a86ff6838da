// Host side of the row scans: picks a layout (whole rows, split rows, strided),
// sizes the grid and launches on the caller's stream. Never synchronises and
// never allocates; returns the runtime's error instead of throwing (the backend
// files turn it into puffadv::gpu_error).
#pragma once

#include <algorithm>
#include <cstdint>

#include "gpu/scan_row_groups.cuh"
#include "gpu/scan_rows.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// How one call is laid out over blocks; plain data so that tests and the
/// benchmark can print it.
struct row_scan_plan {
    enum layout_t { whole_rows, row_groups, split_rows, strided } layout = whole_rows;
    std::int64_t rows_per_block = 1;  ///< whole_rows
    int lanes_log2 = 0;               ///< row_groups: 2^lanes_log2 lanes per row
    int threads = 0;                  ///< row_groups: threads per block
    std::int64_t segment_length = 0;  ///< split_rows: steps per segment (a multiple of the round)
    std::int64_t segments = 0;        ///< split_rows: segments per row
    std::int64_t blocks = 0;
};

/// `flat`: flat whole rows (scan_rows.cuh), whose block spans begin up to
/// items - 1 steps before their first row: packed rows leave room for them.
/// `groups`: the arrays allow aligned vector access, so whole rows of at most
/// Policy::max_group_rounds rounds of a warp take row groups
/// (scan_row_groups.cuh).
template <typename Policy>
row_scan_plan plan_row_scan(std::int64_t rows, std::int64_t horizon, bool time_contiguous, int sm_count,
                            bool flat = false, bool groups = false) {
    row_scan_plan plan;
    constexpr std::int64_t round = Policy::round;
    if (!time_contiguous) {
        plan.layout = row_scan_plan::strided;
        plan.blocks = (rows + Policy::strided_threads - 1) / Policy::strided_threads;
        return plan;
    }
    const std::int64_t capacity = std::int64_t(std::max(sm_count, 1)) * Policy::blocks_per_sm;
    const std::int64_t rounds_per_row = (horizon + round - 1) / round;
    constexpr std::int64_t max_span = std::int64_t(1) << 30;  // block spans are 32-bit
    if ((rounds_per_row <= Policy::max_rounds_whole_row || rows >= capacity) && horizon <= max_span) {
        constexpr std::int64_t warp_steps = std::int64_t(row_group_warp) * Policy::items;
        if (groups && horizon > 0 && (horizon + warp_steps - 1) / warp_steps <= Policy::max_group_rounds) {
            plan.layout = row_scan_plan::row_groups;
            std::int64_t lanes = 1;
            while (lanes < row_group_warp && lanes * Policy::items < horizon) lanes *= 2, ++plan.lanes_log2;
            // Blocks of up to Policy::threads threads, smaller (down to two
            // warps of the widest kind) while the grid would not give every
            // SM two blocks.
            const std::int64_t threads_needed = (rows * lanes + row_group_warp - 1) / row_group_warp * row_group_warp;
            std::int64_t threads = Policy::threads;
            while (threads > 2 * widest_warp_size && (threads_needed + threads - 1) / threads < 2 * sm_count)
                threads /= 2;
            plan.threads = static_cast<int>(threads);
            plan.blocks = (threads_needed + threads - 1) / threads;
            return plan;
        }
        plan.layout = row_scan_plan::whole_rows;
        if (horizon < round) {
            // Pack rows so that the rounds are nearly full: the fewest rounds
            // (most blocks) that use >= 7/8 of their lanes, else the fullest.
            std::int64_t best = 1, best_fill = -1;
            const std::int64_t lead = flat ? Policy::items - 1 : 0;
            for (std::int64_t r = 1; r <= Policy::max_rounds_whole_row; ++r) {
                const std::int64_t n = (r * round - lead) / horizon;
                if (n == 0) continue;
                const std::int64_t fill = n * horizon * 1000 / (((n * horizon + round - 1) / round) * round);
                if (fill > best_fill) best = n, best_fill = fill;
                if (fill >= 875) break;
            }
            plan.rows_per_block = best;
        }
        plan.blocks = (rows + plan.rows_per_block - 1) / plan.rows_per_block;
        return plan;
    }
    plan.layout = row_scan_plan::split_rows;
    const std::int64_t wanted = (capacity + rows - 1) / rows;  // segments per row to fill the GPU
    std::int64_t length = (horizon + wanted - 1) / wanted;
    length = std::min((length + round - 1) / round * round, max_span);
    plan.segment_length = length;
    plan.segments = (horizon + length - 1) / length;
    plan.blocks = rows * plan.segments;
    return plan;
}

/// Whether a call is too small for a thread's chain of 2 * items steps: below
/// 16384 steps per SM (2048 threads of 8 steps) of rows of at most 2048 steps,
/// a call is bound by each thread's chain of dependent instructions (Nsight
/// Compute, H200, GAE at 1024x128: 128 blocks of 128 threads, 4 warps an SM,
/// 4672 active cycles against rl-triton's 2297).
inline bool small_call(std::int64_t rows, std::int64_t horizon, int sm_count) {
    return horizon <= 2048 && rows * horizon < std::int64_t(sm_count) * 16384;
}

/// float32 rows of at least 1024 steps (aligned to 8 elements): block kernels
/// of 128 threads with 8 steps each, never row groups. A block's round holds a
/// row of 1024 steps and loads all of it at once, where a row group loads it in
/// 4 rounds one after another. H200, benchmarks/gpu_scan_variants.cu, CUDA-graph
/// replays, 2026-12-02, against the kernels used before: 4096x1024 GAE with
/// truncations 27.2 -> 26.0 us, the puff advantage 23.3 -> 22.1, GAE and
/// TD(lambda) within 1.5 %; 2048x2048 GAE 19.3 -> 18.9, TD(lambda) 19.6 -> 18.9;
/// split rows: 64x16384 GAE 14.5 -> 13.9, with truncations 18.1 -> 16.8, puff
/// 17.1 -> 14.9; 8x131072 with truncations 22.4 -> 20.3, puff 21.4 -> 18.5, but
/// GAE 17.0 -> 17.4 and TD(lambda) 16.8 -> 17.5. V-trace keeps its policy
/// (8 steps spill: 6-26 bytes, ptxas; 28.5 against 28.8 us at 4096x1024).
using long_row_policy = row_scan_policy<8, 8, 4, 128, 0>;
inline bool long_rows(std::int64_t rows, std::int64_t horizon, int sm_count) {
    return horizon >= long_row_policy::round && !small_call(rows, horizon, sm_count);
}

/// Whether flat arrays of [rows, horizon] with `items` steps per thread get
/// whole-row blocks: flat kernels serve those only (split rows' segments start
/// anywhere in the run), and the host picks other kernels for the rest.
template <int Items>
bool whole_rows_planned(std::int64_t rows, std::int64_t horizon, int sm_count) {
    return plan_row_scan<row_scan_policy<Items, 1>>(rows, horizon, true, sm_count, true).layout ==
           row_scan_plan::whole_rows;
}

/// Launches the scan of `producer`'s maps into `epilogue` as `plan` says.
/// `scratch` is a time-contiguous [rows, horizon] output the call overwrites
/// anyway (split rows keep two numbers per segment in it between launches).
/// `Vec`: every array is time-contiguous and aligned to Policy::items
/// elements, with row strides and horizon multiples of it (the host checks);
/// such arrays never take the strided layout. `Flat` (with Vec): every array
/// is instead one packed run of rows * horizon elements, aligned to
/// Policy::items elements: flat whole rows (planned with `flat`; the host
/// asks for them only where whole_rows_planned), their groups aligned at flat
/// steps = `flat_phase` modulo Policy::items (scan_whole_rows_kernel).
template <typename Policy, bool Vec, bool Flat = false, typename Producer, typename Epilogue>
cudaError_t launch_row_scan(const row_scan_plan& plan, const Producer& producer, const Epilogue& epilogue,
                            carry_slots<typename Producer::value_type> scratch, std::int64_t rows,
                            std::int64_t horizon, cudaStream_t stream, std::int64_t flat_phase = 0) {
    using T = typename Producer::value_type;
    constexpr unsigned threads = Policy::threads;
    if (plan.blocks <= 0) return cudaSuccess;  // nothing to launch
    if (plan.blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
    const unsigned blocks = static_cast<unsigned>(plan.blocks);
    switch (plan.layout) {
        case row_scan_plan::strided:
            if constexpr (Vec) {
                return cudaErrorInvalidValue;  // vectorised arrays are time-contiguous
            } else {
                scan_strided_rows_kernel<Policy><<<blocks, Policy::strided_threads, 0, stream>>>(
                    producer, epilogue, rows, horizon);
                return cudaGetLastError();
            }
        case row_scan_plan::row_groups:
            if constexpr (Vec && !Flat && Policy::max_group_rounds > 0) {
                scan_row_groups_kernel<Policy><<<blocks, static_cast<unsigned>(plan.threads), 0, stream>>>(
                    producer, epilogue, rows, horizon, plan.lanes_log2);
                return cudaGetLastError();
            } else {
                return cudaErrorInvalidValue;  // planned for aligned vector access and policies with groups only
            }
        case row_scan_plan::whole_rows:
            scan_whole_rows_kernel<Policy, Vec, Flat><<<blocks, threads, 0, stream>>>(
                producer, epilogue, rows, horizon, plan.rows_per_block, flat_phase);
            return cudaGetLastError();
        case row_scan_plan::split_rows: {
            if constexpr (Flat) {
                return cudaErrorInvalidValue;  // flat arrays of split rows take the scalar kernels (whole_rows_planned)
            } else {
                if (!scratch.data) return cudaErrorInvalidValue;
                const std::int64_t len = plan.segment_length, segs = plan.segments;
                reduce_segments_kernel<Policy, Vec><<<blocks, threads, 0, stream>>>(producer, scratch, horizon,
                                                                                   len, segs);
                if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
                // A warp per row; sized for the widest warp, narrower ones leave blocks idle.
                constexpr std::int64_t rows_per_block = Policy::threads / widest_warp_size;
                const unsigned carry_blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
                carry_segments_kernel<Policy, T><<<carry_blocks, threads, 0, stream>>>(scratch, rows, len, segs);
                if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
                scan_segments_kernel<Policy, Vec><<<blocks, threads, 0, stream>>>(producer, epilogue, scratch,
                                                                                 horizon, len, segs);
                return cudaGetLastError();
            }
        }
    }
    return cudaSuccess;
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
