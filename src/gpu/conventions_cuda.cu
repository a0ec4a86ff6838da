// CUDA backend of the conventions: the shared kernels (gpu/*.cuh) compiled by nvcc.
#include "core/conventions_detail.hpp"
#include "gpu/conventions_backend.cuh"

namespace puffadv::detail {

void standard_estimate_cuda(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    gpu::standard_estimate(arrays, params, stream);
}

void puff_advantage_general_cuda(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    gpu::puff_advantage_general(arrays, params, stream);
}

}  // namespace puffadv::detail
