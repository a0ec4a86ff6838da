// The tuning of the row-scan kernels: steps per thread and blocks per SM of
// each policy the kinds' tunings (kinds.cuh) name, with the measurements
// behind them. long_row_policy, the traversal's own, is in launch.cuh.
#pragma once

#include <type_traits>

#include "gpu/scan_rows.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// Policy of the fast kernels for the 16-bit floats: eight steps per thread, so
/// that each load is 16 bytes as with float32's four.
#ifndef PUFF_HALF_ITEMS
#define PUFF_HALF_ITEMS 8
#endif
#ifndef PUFF_HALF_MIN_BLOCKS
#define PUFF_HALF_MIN_BLOCKS 4
#endif
using half_scan_policy = row_scan_policy<PUFF_HALF_ITEMS, PUFF_HALF_MIN_BLOCKS>;

/// The standard producer's step needs more registers than the puff's: at the
/// float32 policy's 32 it spilled 56-96 bytes (ptxas), and asking for 6 blocks
/// (40 registers) made float32 GAE 1.15x faster on the H200 (262144x128:
/// 216 -> 187 us).
#ifndef PUFF_STANDARD_MIN_BLOCKS
#define PUFF_STANDARD_MIN_BLOCKS 6
#endif
using standard_scan_policy = row_scan_policy<4, PUFF_STANDARD_MIN_BLOCKS>;
/// These kernels are bound by instructions issued (Nsight Compute on the H200:
/// 0.86-0.90 warp instructions per cycle and scheduler for float32 GAE), and a
/// round's scan costs the same for 4 steps per thread as for 8. float32 GAE /
/// TD(lambda) without truncations therefore take 8 steps (two 16-byte loads per
/// array) at 4 blocks/SM (64 registers): 43.9 -> 39.0 us at 65536x128, 24.9 ->
/// 21.4 us at 8x131072 (benchmarks/gpu_scan_variants.cu, 2026-12-01). With
/// truncations 8 steps were slower (67.9 against 62.5 us). V-trace keeps its
/// step's four words live for the pg advantage: 4 steps at 4 blocks/SM
/// (63 registers, no spills) ran 58.8 us against 67.4 at 6 (40, spilling).
using wide_standard_policy = row_scan_policy<8, 4>;
using vtrace_scan_policy = row_scan_policy<4, 4>;
/// The family's float32 scans (family_steps.cuh) take the wide policy where
/// every array allows it, except Retrace (seven inputs: 4 steps at 4 blocks/SM,
/// as V-trace). 16 steps per thread at 2 blocks/SM were slower for the lightest
/// scans on the H200 (episodic sums 28.1 -> 31.5 us at 65536x128, 2026-12-02).

template <typename In>
using policy_for = std::conditional_t<sizeof(In) == 2, half_scan_policy, scan_policy>;
template <typename In, bool PolicyGradient = false>
using standard_policy_for =
    std::conditional_t<sizeof(In) == 2, half_scan_policy,
                       std::conditional_t<PolicyGradient && sizeof(In) == 4, vtrace_scan_policy,
                                          standard_scan_policy>>;

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
