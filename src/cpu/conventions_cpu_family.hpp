// Private to the CPU kernels of the estimator family: one call's arguments, shared
// by the general (scratch-line) kernels of conventions_cpu_family.cpp and the
// one-pass SIMD kernels of conventions_cpu_family_simd*.cpp.
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

/// Whether the one-pass SIMD kernels serve a family call: discounted_returns,
/// retrace (probabilities, not log-probabilities: no vector exp), q_lambda,
/// episodic_sum, and n_step_returns on row-adjacent data, on inputs and outputs
/// of type C (float32 or float64), flags of that type or bool/uint8
/// (terminated, truncated and greedy alike), every [rows, horizon] array with
/// its steps adjacent (`time_contiguous`, and a horizon that is a multiple of
/// the vector width) or its rows adjacent (and at least a vector of rows).
template <typename C>
bool family_simd_serves(const family_args<C>& a, bool time_contiguous);

/// Whether those kernels may stream the outputs (a.streaming, and every vector
/// they store 16-byte aligned).
template <typename C>
bool family_simd_streams(const family_args<C>& a, bool time_contiguous);

/// n_step_returns' longest window the SIMD kernel serves (the general one's own limit).
constexpr std::int64_t kFamilySimdWindow = 64;

/// Lanes of the SIMD kernels: rows of a block are handed to them in multiples of it.
template <typename C>
constexpr int family_simd_width = 32 / sizeof(C);

/// Rows [first, first + count) of time-contiguous data, each along its steps
/// (backwards; episodic_sum forwards), rows in descending order (episodic_sum:
/// ascending), so each array is read as one stream.
template <typename C>
bad_step family_simd_rows(const family_args<C>& a, std::int64_t first, int count);

/// Rows [first, first + count) of row-adjacent data stepping through time
/// together, family_simd_width<C> rows per vector; count is a multiple of it.
template <typename C>
bad_step family_simd_block(const family_args<C>& a, std::int64_t first, int count);

}  // namespace puffadv::detail
