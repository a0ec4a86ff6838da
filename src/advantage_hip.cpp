// HIP backend: the same kernels (kernels/*.cuh) compiled as LANGUAGE HIP;
// kernels/vendor.cuh maps the CUDA names (PUFF_HIP is set by the build).
#include "kernels/backend.cuh"

namespace puffadv {
namespace detail {

void puff_advantage_hip(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    gpu::puff_advantage(arrays, params, stream);
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
