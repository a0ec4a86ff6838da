// What the thin layers (torch operators in src/torch/, XLA FFI handlers in
// src/jax/) share: the one call they make for every kind, the puff advantage
// included (one argument check, one compute), the caller's names, and the one
// map from an array's role to its field.

#pragma once

#include <puffadv/conventions.hpp>
#include <puffadv/puffadv.hpp>

#include "core/backends.hpp"
#include "core/conventions_detail.hpp"
#include "core/kinds.hpp"

namespace puffadv::layer {

/// Every argument check of one call (shapes, dtypes, devices, aliasing, scalars).
inline argument_problem find_problem(const standard_arrays& arrays, const standard_params& params) {
    return find_standard_problem(arrays, params);
}

/// Checks, then computes on the arrays' device (on `stream` for GPU memory);
/// throws the core's errors (backend_unavailable where no GPU backend serves it).
inline void compute(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    compute_standard_estimate(arrays, params, stream);
}

/// The name the caller knows an argument by, for the layers' own messages.
inline const char* caller_name(const standard_params& params, detail::argument_role role) noexcept {
    return detail::argument_name(params, role);
}

/// Puts `view` in the field of `arrays` that holds `role` (kinds.hpp's
/// visit_field: the one map from a role to standard_arrays' fields).
inline void set_view(standard_arrays& arrays, detail::argument_role role, const matrix& view) {
    detail::set_array(arrays, role, view);
}

/// How the caller spells lambda (gae_lambda for GAE and the puff advantage), for messages.
inline const char* lambda_name(estimator kind) noexcept {
    return kind == estimator::gae || kind == estimator::puff_advantage ? "gae_lambda" : "lambda_";
}

}  // namespace puffadv::layer
