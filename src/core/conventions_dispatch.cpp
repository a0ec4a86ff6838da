// Routes a checked standard-convention call to the backend that owns its memory.
#include "core/conventions_detail.hpp"
#include "core/gpu_backend.hpp"

namespace puffadv {

void compute_standard_estimate(const standard_arrays& arrays, const standard_params& params,
                               gpu_stream stream) {
    detail::throw_problem(find_standard_problem(arrays, params));
    (void)stream;
    // rows > 0 with horizon 0 still runs on the CPU: the row sums are zeros then.
    if (arrays.rewards.rows == 0) return;
    switch (arrays.rewards.device.type) {
        case device_type::cpu:
            detail::standard_estimate_cpu(arrays, params);
            return;
        case device_type::cuda:
            detail::require_gpu_backend(arrays.rewards.device);  // backend_unavailable: the caller may fall back
#if PUFFADV_HAS_CUDA
            detail::standard_estimate_cuda(arrays, params, stream);
#endif
            return;
        case device_type::rocm:
            detail::require_gpu_backend(arrays.rewards.device);
#if PUFFADV_HAS_HIP
            detail::standard_estimate_hip(arrays, params, stream);
#endif
            return;
    }
}

}  // namespace puffadv
