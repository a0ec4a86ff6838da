// What this build contains (fixed at compile time) and what is usable now.
#include <cstdlib>
#include <string>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#include "core/gpu_backend.hpp"

namespace puffadv {

build_info get_build_info() {
    build_info info;
    info.version = PUFFADV_VERSION;
    info.has_cuda = PUFFADV_HAS_CUDA != 0;
    info.has_hip = PUFFADV_HAS_HIP != 0;
    info.gpu_architectures = PUFF_GPU_ARCHITECTURES;
    info.build_type = PUFF_BUILD_TYPE;
    info.compiler = PUFF_CXX_COMPILER;
    info.cxx_flags = PUFF_CXX_FLAGS;
    info.openmp = false;  // CPU threads are puffadv's own pool since issue 15
    info.sanitizers = PUFF_SANITIZE != 0;
    return info;
}

gpu_status query_gpu(device_type type) {
    switch (type) {
        case device_type::cuda:
#if PUFFADV_HAS_CUDA
            return detail::cuda_status();
#else
            break;
#endif
        case device_type::rocm:
#if PUFFADV_HAS_HIP
            return detail::hip_status();
#else
            break;
#endif
        case device_type::cpu: {
            gpu_status cpu;
            cpu.compiled = true;
            cpu.device_count = 1;
            return cpu;
        }
    }
    gpu_status missing;
    missing.error = std::string("this build has no ") + device_type_name(type) + " backend";
    return missing;
}

namespace {
// Per calling thread; 0: unpinned. Pool workers never ask.
thread_local int pinned_threads = 0;

int threads_from_environment() {
    // Read on every call: a trainer may change it between calls.
    if (const char* env = std::getenv("PUFFADV_NUM_THREADS")) {
        char* end = nullptr;
        const long n = std::strtol(env, &end, 10);
        if (end != env && *end == '\0' && n >= 1) return n > 1024 ? 1024 : static_cast<int>(n);
    }
#if defined(__linux__)
    // The cores this process may run on (taskset, cgroups, containers), not the machine's.
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 0)
        return CPU_COUNT(&allowed);
#endif
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
}
}  // namespace

int cpu_thread_count() {
    return pinned_threads > 0 ? pinned_threads : threads_from_environment();
}

void pin_cpu_thread_count(bool pin) {
    pinned_threads = pin ? threads_from_environment() : 0;
}

}  // namespace puffadv
