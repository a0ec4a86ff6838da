// TEMPORARY router (to be replaced by the one CPU engine): the one backend call
// of core/backends.hpp onto the CPU kernels as they are.
#include "core/backends.hpp"
#include "core/conventions_detail.hpp"
#include "core/gpu_backend.hpp"

namespace puffadv::detail {

void estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    if (params.kind != estimator::puff_advantage) return standard_estimate_cpu(arrays, params);
    const puff_arrays puff = as_puff_arrays(arrays);
    if (puff_needs_general_kernel(puff)) return puff_advantage_general_cpu(puff, as_puff_params(params));
    if (puff.values.cols == 0) return;
    puff_advantage_cpu(puff, as_puff_params(params));
}

}  // namespace puffadv::detail
