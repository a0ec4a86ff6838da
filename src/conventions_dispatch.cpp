// Routes a checked standard-convention call to the backend that owns its memory.
#include "conventions_detail.hpp"

namespace puffadv {

void compute_standard_estimate(const standard_arrays& arrays, const standard_params& params,
                               gpu_stream stream) {
    detail::throw_problem(find_standard_problem(arrays, params));
    (void)stream;
    // rows > 0 with horizon 0 still runs on the CPU: the row sums are zeros then.
    if (arrays.rewards.rows == 0) return;
    if (arrays.rewards.device.type == device_type::cpu) {
        detail::standard_estimate_cpu(arrays, params);
        return;
    }
    throw type_error(std::string("rewards is on ") + detail::describe_device(arrays.rewards.device) +
                     " but puffadv's standard conventions (GAE, TD(lambda), V-trace) have no GPU "
                     "kernel in this build; pass host arrays");
}

}  // namespace puffadv
