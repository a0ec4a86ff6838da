// The standard advantage conventions of TorchRL, Stable-Baselines3, CleanRL and
// rlax (SPEC section 6): GAE, TD(lambda) returns and V-trace, with termination
// and truncation kept apart. Rewards and flags are indexed at the step that
// produced them:
//
//   delta_t = rho_t (r_t + gamma (1 - terminated_t) V'_t - V_t)
//   A_t     = delta_t + gamma lambda c_t (1 - done_t) A_{t+1},   done = terminated | truncated
//
// where V'_t is V_{t+1} inside the buffer and a bootstrap value past it.
#pragma once

#include <cstdint>
#include <optional>

#include <puffadv/puffadv.hpp>

namespace puffadv {

/// Which estimate a call produces. All three share the recurrence above.
enum class estimator : std::uint8_t {
    gae,        ///< advantages A; fused returns are A + V
    td_lambda,  ///< returns G = A + V (the lambda-return); advantages are A
    vtrace,     ///< returns are the targets vs = V + A; advantages are IMPALA's
                ///< pg advantages min(rho_pg_clip, ratio_t) (r_t + gamma (1 - terminated_t) vs'_t - V_t)
};

const char* estimator_name(estimator e) noexcept;
/// The inverse of estimator_name ("gae", "td_lambda", "vtrace"); value_error otherwise.
estimator estimator_from_name(const std::string& name);

/// Scalars: finite, gamma and lambda in [0, 1], clips >= 0. The clips are read
/// only when importance ratios are given; rho_pg_clip only by vtrace.
struct standard_params {
    estimator kind = estimator::gae;
    double gamma = 0.99;
    double lambda = 0.95;
    double rho_clip = 1.0;
    double c_clip = 1.0;
    double rho_pg_clip = 1.0;
    /// How the caller spells lambda, for error messages ("gae_lambda", "lambda_").
    const char* lambda_name = "lambda";
};

/// The arrays of one call, as [rows, horizon] views (time-major data is passed
/// with its strides swapped: see apply_time_axis). 1-D arrays are [rows] views
/// with ndim 1. Floats: float32, float64, bfloat16 or float16, one dtype for all
/// float inputs; flags: bool, uint8 or that float dtype (non-zero means set).
struct standard_arrays {
    matrix rewards, values, terminated;
    /// Episodes cut by a time limit: the trace stops, the value bootstraps.
    std::optional<matrix> truncated;
    /// [rows]: V(s_T), the value of the observation after the last step.
    std::optional<matrix> last_value;
    /// [rows, horizon]: V(s_{t+1}) of step t's next observation, read only where
    /// the buffer does not hold it: at truncated steps and at the last step.
    /// Exactly one of last_value and bootstrap_values; truncated needs bootstrap_values.
    std::optional<matrix> bootstrap_values;
    /// Ratios pi/mu; rho_t = min(ratio, rho_clip), c_t = min(ratio, c_clip). Absent: 1.
    std::optional<matrix> importance;
    /// Output [rows, horizon]: A (gae, td_lambda) or the pg advantages (vtrace).
    std::optional<matrix> advantages;
    /// returns (A + V, i.e. vs for vtrace) and per-row sums over `advantages`' quantity.
    fused_outputs fused{};
};

/// Every argument check of a standard-convention call (shapes, dtypes, devices,
/// aliasing, parameters). Data-dependent problems (a step both terminated and
/// truncated) are reported by the computation itself.
argument_problem find_standard_problem(const standard_arrays& arrays, const standard_params& params);

/// Turns a view of the caller's 2-D array into the [rows, horizon] view the core
/// reads: time_axis 1 or -1 is batch-major [B, T] (unchanged), 0 or -2 is
/// time-major [T, B] (rows and strides swapped, no copy). Arrays that are not
/// 2-D are left alone for the layout check to name. 64-bit, so that bindings pass
/// the caller's integer unnarrowed (2**32 must not read as 0).
argument_problem apply_time_axis(matrix& m, std::int64_t time_axis, const char* name);

/// apply_time_axis on every [rows, horizon] array of a call (not last_value or
/// the per-row sums, which have no time axis), as every binding needs it.
argument_problem apply_time_axis(standard_arrays& a, std::int64_t time_axis);

/// Checks, then computes on the arrays' device. Throws value_error when a step
/// is both terminated and truncated (naming its row and step).
void compute_standard_estimate(const standard_arrays& arrays, const standard_params& params,
                               gpu_stream stream = nullptr);

}  // namespace puffadv
