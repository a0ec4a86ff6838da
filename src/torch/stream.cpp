// torch's current stream, and what memory the CUDA key's tensors are. No CUDA
// header and no link to libtorch_cuda: the stream comes from the running
// torch's own CUDA shim, looked up when a CUDA tensor arrives, so this file
// builds against a CPU-only torch and the same binary runs CUDA tensors under a
// CUDA torch. Also the two diagnostic ops that test the lookup.
#include "torch/tensors.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include <torch/csrc/stable/library.h>

namespace puffadv::torch_ops {
namespace {

// aoti_torch_get_current_cuda_stream (torch/csrc/inductor/aoti_torch/c/shim.h,
// declared only under USE_CUDA) lives in libtorch_cuda (libtorch_hip under
// ROCm), which a CPU-only torch does not have, so it is found at run time.
// Every CUDA torch the Stable ABI covers exports it. (torch >= 2.13 also has a
// device-generic torch_stream_native_handle, in libtorch_cpu.)
using current_stream_shim = AOTITorchError (*)(int32_t device_index, void** stream);

/// The library of torch's GPU backend if this process has loaded it (RTLD_NOLOAD never loads).
void* loaded_torch_library(const char* name) { return dlopen(name, RTLD_LAZY | RTLD_NOLOAD); }

struct found_shim {
    current_stream_shim function = nullptr;
    std::string where;  // for the test of the lookup: "" when not found
};

// `import torch` loads libtorch_cuda as a dependency of a module imported
// RTLD_LOCAL, so the global scope (RTLD_DEFAULT) usually does not have it.
const found_shim& current_stream_shim_of_this_torch() {
    static const found_shim found = [] {
        constexpr const char* symbol = "aoti_torch_get_current_cuda_stream";
        if (void* global = dlsym(RTLD_DEFAULT, symbol)) {
            return found_shim{reinterpret_cast<current_stream_shim>(global), "global"};
        }
        for (const char* library : {"libtorch_cuda.so", "libtorch_hip.so"}) {
            void* handle = loaded_torch_library(library);
            if (void* local = handle ? dlsym(handle, symbol) : nullptr) {
                return found_shim{reinterpret_cast<current_stream_shim>(local), library};
            }
        }
        return found_shim{};
    }();
    return found;
}

}  // namespace

device_type gpu_memory_type() {
    static const bool rocm = loaded_torch_library("libtorch_hip.so") != nullptr;
    return rocm ? device_type::rocm : device_type::cuda;
}

gpu_stream current_stream(const Tensor& t) {
    if (!t.is_cuda()) return nullptr;
    const current_stream_shim shim = current_stream_shim_of_this_torch().function;
    if (shim == nullptr) {
        throw std::runtime_error(
            "puffadv: this torch has CUDA tensors but no aoti_torch_get_current_cuda_stream in "
            "libtorch_cuda / libtorch_hip, so torch's current stream is unknown");
    }
    void* stream = nullptr;
    if (shim(t.get_device_index(), &stream) != AOTI_TORCH_SUCCESS) {
        throw std::runtime_error("puffadv: torch could not say its current CUDA stream");
    }
    return stream;
}

namespace {

std::int64_t current_stream_handle(const Tensor& like) {
    return reinterpret_cast<std::intptr_t>(current_stream(like));
}

std::string cuda_stream_shim() { return current_stream_shim_of_this_torch().where; }

}  // namespace
}  // namespace puffadv::torch_ops

STABLE_TORCH_LIBRARY_IMPL(puffadv, CUDA, m) {
    m.impl("_current_stream_handle", TORCH_BOX(&puffadv::torch_ops::current_stream_handle));
}

STABLE_TORCH_LIBRARY_IMPL(puffadv, CompositeExplicitAutograd, m) {
    m.impl("_cuda_stream_shim", TORCH_BOX(&puffadv::torch_ops::cuda_stream_shim));
}
