// The CUDA dispatch key of torch.ops.puffadv (HIP tensors too: ROCm torch
// files them under CUDA). Only c10's device-agnostic interface is used, never
// ATen/cuda headers or libc10_cuda, so this file builds against a CPU-only
// torch and the same binary runs CUDA tensors under a CUDA torch.
//
// Without a usable GPU backend in the core, tensors reach this key anyway
// (never the dispatcher's "Could not run ... 'CUDA' backend") and are computed
// on the host, with a one-time warning, or an error under PUFFADV_FALLBACK=error.
#include "ops.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

namespace puffadv::torch_ops {
namespace {

constexpr device_type gpu_kind = PUFF_TORCH_ROCM ? device_type::rocm : device_type::cuda;
constexpr const char* gpu_name = PUFF_TORCH_ROCM ? "HIP" : "CUDA";
constexpr const char* gpu_option = PUFF_TORCH_ROCM ? "PUFF_HIP" : "PUFF_CUDA";

// Asked once: whether the core has a backend for this memory and sees a device.
const gpu_status& core_gpu() {
    static const gpu_status status = query_gpu(gpu_kind);
    return status;
}

gpu_stream current_stream(const c10::Device& device) {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
}

// Why the core cannot compute on this device: the first half of the fallback message.
std::string fallback_reason(const at::Tensor& values) {
    std::string reason = "values is on " + values.device().str() + " but ";
    if (!core_gpu().compiled)
        return reason + "this build of puffadv has no " + gpu_name + " backend";
    return reason + "puffadv's " + gpu_name + " backend sees no usable device (" +
           core_gpu().error + ")";
}

// Host copies in, the CPU kernel, one copy back: blocking, so never inside a CUDA graph.
void compute_on_host(const at::Tensor& values, const at::Tensor& rewards, const at::Tensor& dones,
                     const at::Tensor& importance, const at::Tensor& advantages,
                     const puff_params& params) {
    const char* mode = std::getenv("PUFFADV_FALLBACK");
    const std::string rebuild =
        std::string("pip install . -C cmake.define.") + gpu_option + "=ON";
    TORCH_CHECK(mode == nullptr || std::strcmp(mode, "error") != 0, fallback_reason(values),
                ", and PUFFADV_FALLBACK=error forbids the CPU fallback; rebuild with: ", rebuild);
    TORCH_WARN_ONCE(fallback_reason(values),
                    "; computing on the CPU instead, which copies every input to the host and the "
                    "result back on every call (slow). Rebuild with: ", rebuild,
                    " (PUFFADV_FALLBACK=error makes this an error)");
    note_cpu_fallback();
    const auto host = [](const at::Tensor& t) { return t.to(at::kCPU); };
    at::Tensor out = at::empty(advantages.sizes(), advantages.options().device(at::kCPU));
    run(to_arrays(host(values), host(rewards), host(dones), host(importance), out), params, nullptr);
    advantages.copy_(out);
}

void puff_advantage_inplace_cuda(const at::Tensor& values, const at::Tensor& rewards,
                                 const at::Tensor& dones, const at::Tensor& importance,
                                 const at::Tensor& advantages, double gamma, double lambda,
                                 double rho_clip, double c_clip) {
    const puff_arrays arrays = to_arrays(values, rewards, dones, importance, advantages);
    const puff_params params{gamma, lambda, rho_clip, c_clip};
    check(arrays, params);  // on the caller's tensors, so messages do not depend on the path
    if (values.numel() == 0) return;
    if (core_gpu().device_count == 0) {
        compute_on_host(values, rewards, dones, importance, advantages, params);
        return;
    }
    // The core launches on the current device; the stream is torch's current one there.
    const c10::DeviceGuard guard(values.device());
    run(arrays, params, current_stream(values.device()));
}

at::Tensor puff_advantage_cuda(const at::Tensor& values, const at::Tensor& rewards,
                               const at::Tensor& dones, const at::Tensor& importance, double gamma,
                               double lambda, double rho_clip, double c_clip) {
    at::Tensor out = empty_output(values);
    puff_advantage_inplace_cuda(values, rewards, dones, importance, out, gamma, lambda, rho_clip,
                                c_clip);
    return out;
}

std::int64_t current_stream_handle(const at::Tensor& like) {
    return reinterpret_cast<std::intptr_t>(current_stream(like.device()));
}

}  // namespace
}  // namespace puffadv::torch_ops

TORCH_LIBRARY_IMPL(puffadv, CUDA, m) {
    m.impl("compute_puff_advantage", &puffadv::torch_ops::puff_advantage_inplace_cuda);
    m.impl("puff_advantage", &puffadv::torch_ops::puff_advantage_cuda);
    m.impl("_current_stream_handle", &puffadv::torch_ops::current_stream_handle);
}
