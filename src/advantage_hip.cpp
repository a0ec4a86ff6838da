// HIP backend: the same engine (gpu/engine.cuh) compiled as LANGUAGE HIP;
// gpu/vendor.cuh maps the CUDA names (PUFF_HIP is set by the build).
#include "core/backends.hpp"
#include "core/gpu_backend.hpp"
#include "gpu/engine.cuh"

namespace puffadv {
namespace detail {

void estimate_hip(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    gpu::estimate(arrays, params, static_cast<hipStream_t>(stream));
}

gpu_status hip_status() { return gpu::status(); }

void hip_synchronize(int device) { gpu::synchronize(device); }

}  // namespace detail

void compute_puff_advantage_hip(const float* values, const float* rewards, const float* dones,
                                const float* importance, float* advantages, std::int64_t rows,
                                std::int64_t horizon, float gamma, float lambda, float rho_clip,
                                float c_clip, gpu_stream stream) {
    compute_puff_advantage(gpu::device_arrays(device_type::rocm, values, rewards, dones, importance,
                                              advantages, rows, horizon),
                           puff_params{gamma, lambda, rho_clip, c_clip}, stream);
}

}  // namespace puffadv
