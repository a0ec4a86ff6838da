// Private interface between estimate.cpp and the GPU backends. Each backend
// (advantage_cuda.cu, advantage_hip.cpp) implements these for its runtime;
// arguments arrive already checked by the one argument check (arguments.cpp).
#pragma once

#include <puffadv/puffadv.hpp>

namespace puffadv::detail {

#if PUFFADV_HAS_CUDA
gpu_status cuda_status();
void cuda_synchronize(int device);
#endif

#if PUFFADV_HAS_HIP
gpu_status hip_status();
void hip_synchronize(int device);
#endif

/// Throws backend_unavailable unless this build has a backend for `d` (a GPU
/// device) and it sees a device. Every GPU entry point calls it after its checks,
/// so that the Python layer (and the torch ops) can fall back to the CPU.
void require_gpu_backend(const device& d);


}  // namespace puffadv::detail
