// TEMPORARY: the routers onto today's kernels (src/cpu/estimate_cpu.cpp,
// src/advantage_cuda.cu, src/advantage_hip.cpp) still pick the puff advantage's
// kernel with this; the core's one entry does not. Delete this file with them.
#include "core/conventions_detail.hpp"

namespace puffadv::detail {

bool puff_needs_general_kernel(const puff_arrays& a) noexcept {
    const dtype t = a.values.type;
    return a.fused.any() || is_reduced(t) || a.dones.type != t || a.advantages.type != t;
}

}  // namespace puffadv::detail
