// Private to the general kernels of the estimator family (conventions_cpu_family*.cpp)
// and n_step_returns' SIMD windows (n_step_windows_simd.cpp): one call's arguments.
#pragma once

#include <cstdint>

#include "cpu/conventions_cpu.hpp"

namespace puffadv::detail {

template <typename C>
struct family_args {
    estimator kind;
    std::int64_t rows, horizon;
    view rewards, values, terminated, truncated, last_value, bootstrap, next_values, target, behaviour, greedy;
    view advantages, returns, abs_sums, sums, square_sums;
    C gamma, lambda, c_clip;
    bool log_probs, reset_at_start;
    bool row_adjacent;  // every [rows, horizon] array holds a step's rows adjacent
    bool streaming;     // outputs too large to stay cached: stored past the caches
    bool simd_stream;   // ... and aligned for the SIMD kernels' vector streaming stores
    std::int64_t n;
};

/// Whether n_step_returns' SIMD windows (n_step_windows_simd.cpp) serve a call:
/// row-adjacent float32/float64 data (flags of that type or bool/uint8), windows
/// of at most kFamilySimdWindow steps, at least a vector of rows.
template <typename C>
bool family_simd_serves(const family_args<C>& a, bool time_contiguous);

/// Whether they may stream the outputs (a.streaming, and every vector 16-byte aligned).
template <typename C>
bool family_simd_streams(const family_args<C>& a, bool time_contiguous);

/// n_step_returns' longest window the SIMD kernel serves (the general one's own limit).
constexpr std::int64_t kFamilySimdWindow = 64;

/// Rows per vector of the SIMD windows: blocks are handed to them in multiples of it.
template <typename C>
constexpr int family_simd_width = 32 / sizeof(C);

/// Rows [first, first + count) of row-adjacent data stepping back through time
/// together, family_simd_width<C> rows per vector; count is a multiple of it.
template <typename C>
bad_step family_simd_block(const family_args<C>& a, std::int64_t first, int count);

}  // namespace puffadv::detail
