// Per-step gamma / lambda calls (standard_arrays::gamma, ::lambda) that the CPU
// engine does not serve as they come: 16-bit floats, odd strides, flags of mixed
// types, retrace's log-probabilities, and n_step_returns (no first-order scan).
// The per-step form is written once, in the engine's producers; these calls reach
// it through dense copies instead of a second per-step form in the general
// kernels (conventions_cpu*.cpp), which never see a per-step array.
#pragma once

#include <puffadv/conventions.hpp>

#include "cpu/engine.hpp"

namespace puffadv::detail {

/// Runs `compute` on dense batch-major copies of the call's arrays: floats in the
/// arithmetic type (float64 for float64 inputs, else float32), flags as uint8 0/1,
/// retrace's log-probabilities as the ratio exp(target - behaviour) over 1, the
/// [rows, horizon] outputs in that type (stored back into the caller's dtype
/// afterwards) and the [rows] sums written in place. Rows and steps keep their
/// indices, so the computation's errors name the caller's row and step.
void compute_on_dense_copies(const standard_arrays& arrays, const standard_params& params,
                             void (*compute)(const standard_arrays&, const standard_params&));

/// n_step_returns with per-step gamma_t / lambda_t on compute_on_dense_copies'
/// arrays (float32 or float64, flags uint8):
///   W1_s = r_s + gamma_s V'_s (0 where terminated)
///   Wj_s = W1_s + gamma_s lambda_s (W(j-1)_{s+1} - V'_s) (W1_s where done or s = T-1)
/// G_t = Wn_t, A_t = G_t - V_t; O(min(n, T)) per step (n < T; n >= T is TD(lambda)).
void n_step_returns_per_step(const engine::arrays& a, const standard_params& params);

}  // namespace puffadv::detail
