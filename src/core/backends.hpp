// The one interface between the core (estimate.cpp) and its backends: every
// estimator, the puff advantage included (estimator::puff_advantage), reaches a
// backend through one of these calls, with arguments already checked by the one
// argument check and at least one row. The backends pick a traversal and plug
// in the kind's step producer and epilogue; nothing here knows either.
#pragma once

#include <puffadv/conventions.hpp>

namespace puffadv::detail {

/// The CPU engine (src/cpu/): any strides, every dtype the checks accept.
void estimate_cpu(const standard_arrays& arrays, const standard_params& params);

#if PUFFADV_HAS_CUDA
/// The CUDA engine (src/gpu/ compiled by nvcc): asynchronous on `stream`.
void estimate_cuda(const standard_arrays& arrays, const standard_params& params, gpu_stream stream);
#endif
#if PUFFADV_HAS_HIP
/// The HIP engine (the same source compiled as HIP): asynchronous on `stream`.
void estimate_hip(const standard_arrays& arrays, const standard_params& params, gpu_stream stream);
#endif

/// A puff-advantage call in the one call's terms, and back (for the backends
/// that still keep a puff-specific path).
inline standard_arrays as_standard_call(const puff_arrays& a) {
    standard_arrays s;
    s.rewards = a.rewards;
    s.values = a.values;
    s.terminated = a.dones;
    s.importance = a.importance;
    s.advantages = a.advantages;
    s.fused = a.fused;
    return s;
}
inline standard_params as_standard_params(const puff_params& p) {
    standard_params s;
    s.kind = estimator::puff_advantage;
    s.gamma = p.gamma;
    s.lambda = p.gae_lambda;
    s.rho_clip = p.rho_clip;
    s.c_clip = p.c_clip;
    s.lambda_name = "gae_lambda";
    return s;
}
inline puff_arrays as_puff_arrays(const standard_arrays& s) {
    puff_arrays a{*s.values, s.rewards, s.terminated, *s.importance, *s.advantages};
    a.fused = s.fused;
    return a;
}
inline puff_params as_puff_params(const standard_params& s) {
    return {s.gamma, s.lambda, s.rho_clip, s.c_clip};
}

}  // namespace puffadv::detail
