// The CUDA dispatch key of torch.ops.puffadv (HIP tensors too: ROCm torch
// files them under CUDA). Only c10's device-agnostic interface is used, never
// ATen/cuda headers or libc10_cuda, so this file builds against a CPU-only
// torch and the same binary runs CUDA tensors under a CUDA torch.
//
// Without a usable GPU backend in the core, tensors reach this key anyway
// (never the dispatcher's "Could not run ... 'CUDA' backend") and are computed
// on the host, with the core's one-time warning (a UserWarning: c10 has no
// RuntimeWarning), or its error under PUFFADV_FALLBACK=error.
#include "ops.hpp"

#include <cstdint>
#include <string>

#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <puffadv/fallback.hpp>
#include <torch/library.h>

namespace puffadv::torch_ops {
namespace {

gpu_stream current_stream(const c10::Device& device) {
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device).native_handle();
}

// The core's fallback policy (fallback.hpp), shared with the Python layer: one
// setting, one wording, one count. Host copies in, the CPU kernel, one copy
// back: blocking, so never inside a CUDA graph.
void compute_on_host(const at::Tensor& values, const at::Tensor& rewards, const at::Tensor& dones,
                     const at::Tensor& importance, const at::Tensor& advantages,
                     const puff_params& params, const std::string& reason) {
    fallback_mode mode = fallback_mode::warn;
    try {
        mode = current_fallback_mode();
    } catch (const value_error& e) {
        TORCH_CHECK_VALUE(false, e.what());
    }
    TORCH_CHECK(mode != fallback_mode::error, fallback_error_message(reason));
    const auto host = [](const at::Tensor& t) { return t.to(at::kCPU); };
    at::Tensor out = at::empty(advantages.sizes(), advantages.options().device(at::kCPU));
    run(to_arrays(host(values), host(rewards), host(dones), host(importance), out), params, nullptr);
    advantages.copy_(out);
    const auto bytes = static_cast<std::uint64_t>(values.numel()) * 5 * values.element_size();
    if (record_fallback(bytes, reason)) TORCH_WARN(fallback_warning_message(reason, bytes));
}

void puff_advantage_inplace_cuda(const at::Tensor& values, const at::Tensor& rewards,
                                 const at::Tensor& dones, const at::Tensor& importance,
                                 const at::Tensor& advantages, double gamma, double lambda,
                                 double rho_clip, double c_clip) {
    const puff_arrays arrays = to_arrays(values, rewards, dones, importance, advantages);
    const puff_params params{gamma, lambda, rho_clip, c_clip};
    check(arrays, params);  // on the caller's tensors, so messages do not depend on the path
    std::string reason;
    try {
        // The core launches on the current device; the stream is torch's current one there.
        const c10::DeviceGuard guard(values.device());
        run(arrays, params, current_stream(values.device()));
        return;
    } catch (const backend_unavailable& missing) {  // no backend compiled, or no usable device
        reason = missing.what();
    }
    compute_on_host(values, rewards, dones, importance, advantages, params, reason);
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
