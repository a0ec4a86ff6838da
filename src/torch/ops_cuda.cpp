// The CUDA dispatch key of torch.ops.puffadv (HIP tensors too: ROCm torch
// files them under CUDA). No CUDA header and no link to libtorch_cuda: torch's
// current stream comes from the running torch's own CUDA shim, looked up when a
// CUDA tensor arrives, so this file builds against a CPU-only torch and the same
// binary runs CUDA tensors under a CUDA torch.
//
// Without a usable GPU backend in the core, tensors reach this key anyway
// (never the dispatcher's "Could not run ... 'CUDA' backend") and are computed
// on the host, counted by the core (puffadv.torch turns the first one into its
// RuntimeWarning: a c10 warning from a torch.ops call only reaches stderr), or
// refused under PUFFADV_FALLBACK=error.
#include "torch/ops.hpp"

#include <dlfcn.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <puffadv/fallback.hpp>

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

// The core's fallback policy (fallback.hpp), shared with the Python layer: one
// setting, one wording, one count. Host copies in, the CPU kernel, one copy
// back: blocking, so never inside a CUDA graph.
void compute_on_host(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                     const Tensor& importance, Tensor advantages, const puff_params& params,
                     const std::string& reason) {
    const fallback_mode mode = current_fallback_mode();  // a bad setting: value_error, a ValueError
    if (mode == fallback_mode::error) throw std::runtime_error(fallback_error_message(reason));
    const torch::stable::Device cpu(torch::headeronly::DeviceType::CPU);
    const auto host = [&](const Tensor& t) { return torch::stable::to(t, cpu); };
    Tensor out = torch::stable::new_empty(advantages, advantages.sizes(), std::nullopt, std::nullopt, cpu);
    run(to_arrays(host(values), host(rewards), host(dones), host(importance), out), params, nullptr);
    torch::stable::copy_(advantages, out);
    const auto bytes = static_cast<std::uint64_t>(values.numel()) * 5 * values.element_size();
    record_fallback(bytes, reason);  // the first one: a RuntimeWarning from _torch_kernels.py
}

void puff_advantage_inplace_cuda(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                                 const Tensor& importance, const Tensor& advantages, double gamma,
                                 double lambda, double rho_clip, double c_clip) {
    const puff_arrays arrays = to_arrays(values, rewards, dones, importance, advantages);
    const puff_params params{gamma, lambda, rho_clip, c_clip};
    check(arrays, params);  // on the caller's tensors, so messages do not depend on the path
    std::string reason;
    try {
        // The core launches on the current device; the stream is torch's current one there.
        const torch::stable::accelerator::DeviceGuard guard(values.get_device_index());
        run(arrays, params, current_stream(values));
        return;
    } catch (const backend_unavailable& missing) {  // no backend compiled, or no usable device
        reason = missing.what();
    }
    compute_on_host(values, rewards, dones, importance, advantages, params, reason);
}

Tensor puff_advantage_cuda(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                           const Tensor& importance, double gamma, double lambda, double rho_clip,
                           double c_clip) {
    require_tensor(values, "values");
    Tensor out = empty_output(values, values);
    puff_advantage_inplace_cuda(values, rewards, dones, importance, out, gamma, lambda, rho_clip, c_clip);
    return out;
}

std::int64_t current_stream_handle(const Tensor& like) {
    return reinterpret_cast<std::intptr_t>(current_stream(like));
}

std::string cuda_stream_shim() { return current_stream_shim_of_this_torch().where; }

}  // namespace
}  // namespace puffadv::torch_ops

STABLE_TORCH_LIBRARY_IMPL(puffadv, CUDA, m) {
    m.impl("compute_puff_advantage", TORCH_BOX(&puffadv::torch_ops::puff_advantage_inplace_cuda));
    m.impl("puff_advantage", TORCH_BOX(&puffadv::torch_ops::puff_advantage_cuda));
    m.impl("_current_stream_handle", TORCH_BOX(&puffadv::torch_ops::current_stream_handle));
}

STABLE_TORCH_LIBRARY_IMPL(puffadv, CompositeExplicitAutograd, m) {
    m.impl("_cuda_stream_shim", TORCH_BOX(&puffadv::torch_ops::cuda_stream_shim));
}
