// CUDA backend: the shared kernels (kernels/*.cuh) compiled by nvcc.
#include "kernels/backend.cuh"

namespace puffadv {
namespace detail {

void puff_advantage_cuda(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    gpu::puff_advantage(arrays, params, stream);
}

gpu_status cuda_status() { return gpu::status(); }

void cuda_synchronize(int device) { gpu::synchronize(device); }

}  // namespace detail

void compute_puff_advantage_cuda(const float* values, const float* rewards, const float* dones,
                                 const float* importance, float* advantages, std::int64_t rows,
                                 std::int64_t horizon, float gamma, float lambda, float rho_clip,
                                 float c_clip, gpu_stream stream) {
    compute_puff_advantage(gpu::device_arrays(device_type::cuda, values, rewards, dones, importance,
                                              advantages, rows, horizon),
                           puff_params{gamma, lambda, rho_clip, c_clip}, stream);
}

}  // namespace puffadv
