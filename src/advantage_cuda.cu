// CUDA backend: the shared kernels (gpu/*.cuh) compiled by nvcc.
#include "core/backends.hpp"
#include "core/conventions_detail.hpp"
#include "gpu/backend.cuh"

namespace puffadv {
namespace detail {

// TEMPORARY router (to be replaced by the one GPU engine): the one backend call
// of core/backends.hpp onto the GPU kernels as they are.
void estimate_cuda(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    if (params.kind != estimator::puff_advantage) return standard_estimate_cuda(arrays, params, stream);
    const puff_arrays puff = as_puff_arrays(arrays);
    if (puff_needs_general_kernel(puff)) return puff_advantage_general_cuda(puff, as_puff_params(params), stream);
    if (puff.values.cols == 0) return;
    gpu::puff_advantage(puff, as_puff_params(params), stream);
}

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
