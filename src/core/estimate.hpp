// The one core entry: every kind, the puff advantage included, is checked by
// find_problem and computed by estimate. The public entry points
// (compute_standard_estimate, compute_puff_advantage, compute_puff_advantage_cpu,
// find_standard_problem, find_puff_problem, ...) are thin wrappers over these.
#pragma once

#include <puffadv/conventions.hpp>

namespace puffadv::detail {

/// Every argument check of a call (shapes, dtypes, devices, aliasing, scalars),
/// driven by the kind's row of the kinds table (core/kinds.hpp).
argument_problem find_problem(const standard_arrays& arrays, const standard_params& params);

/// Checks once, then computes on the arrays' device through the backend call
/// (core/backends.hpp): CPU threads, or kernels queued on `stream`. rows == 0
/// launches nothing; horizon 0 as the kind's row says. Throws
/// backend_unavailable when this build or machine has no backend for the
/// device (the bindings then fall back to the CPU).
void estimate(const standard_arrays& arrays, const standard_params& params, gpu_stream stream);

}  // namespace puffadv::detail
