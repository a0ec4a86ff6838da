// XLA FFI handlers: puffadv inside jax.jit. Written against XLA's header-only
// FFI API (xla/ffi/api/ffi.h from jax.ffi.include_dir()); nothing links jaxlib.
// Each handler turns XLA's buffers into puffadv::matrix views and calls the
// core's compute_puff_advantage, so every argument check is the core's own.
#include "jax/ffi_handlers.hpp"

#include <utility>

#include <puffadv/puffadv.hpp>

#include "jax/ffi_views.hpp"

namespace puffadv::jax {
namespace {

template <typename Scalar>
ffi::Error puff_advantage(device where, gpu_stream stream, const ffi::AnyBuffer& values,
                          const ffi::AnyBuffer& rewards, const ffi::AnyBuffer& dones,
                          const ffi::AnyBuffer& importance, ffi::AnyBuffer& advantages, Scalar gamma,
                          Scalar gae_lambda, Scalar rho_clip, Scalar c_clip) {
    puff_arrays arrays;
    const std::pair<const ffi::AnyBuffer*, matrix*> inputs[] = {
        {&values, &arrays.values}, {&rewards, &arrays.rewards}, {&dones, &arrays.dones},
        {&importance, &arrays.importance}};
    const char* names[] = {"values", "rewards", "dones", "importance"};
    for (int i = 0; i < 4; ++i) {
        auto error = to_matrix(*inputs[i].first, names[i], where, false, *inputs[i].second);
        if (error.failure()) return error;
    }
    auto error = to_matrix(advantages, "advantages", where, true, arrays.advantages);
    if (error.failure()) return error;
    return run_core([&] {
        compute_puff_advantage(arrays, puff_params{gamma, gae_lambda, rho_clip, c_clip}, stream);
    });
}

template <typename Scalar>
ffi::Error puff_advantage_cpu(ffi::AnyBuffer values, ffi::AnyBuffer rewards, ffi::AnyBuffer dones,
                              ffi::AnyBuffer importance, ffi::Result<ffi::AnyBuffer> advantages,
                              Scalar gamma, Scalar gae_lambda, Scalar rho_clip, Scalar c_clip) {
    return puff_advantage<Scalar>({device_type::cpu, 0}, nullptr, values, rewards, dones, importance,
                                  *advantages, gamma, gae_lambda, rho_clip, c_clip);
}

// CUDA and ROCm: the kernel is queued on XLA's stream for the device XLA runs
// this op on; nothing synchronises and nothing is allocated.
template <device_type Device, typename Stream, typename Scalar>
ffi::Error puff_advantage_gpu(Stream stream, std::int32_t device_ordinal, ffi::AnyBuffer values,
                              ffi::AnyBuffer rewards, ffi::AnyBuffer dones,
                              ffi::AnyBuffer importance, ffi::Result<ffi::AnyBuffer> advantages,
                              Scalar gamma, Scalar gae_lambda, Scalar rho_clip, Scalar c_clip) {
    return puff_advantage<Scalar>({Device, device_ordinal}, reinterpret_cast<gpu_stream>(stream),
                                  values, rewards, dones, importance, *advantages, gamma,
                                  gae_lambda, rho_clip, c_clip);
}

// The four scalars are attributes named as in Python; `Scalar` is float for the
// float32 targets and double for the float64 ones, so x64 callers keep full precision.
template <typename Scalar, typename Binding>
auto with_params(Binding&& binding) {
    return std::move(binding)
        .template Attr<Scalar>("gamma")
        .template Attr<Scalar>("gae_lambda")
        .template Attr<Scalar>("rho_clip")
        .template Attr<Scalar>("c_clip");
}

template <typename Binding>
auto with_arrays(Binding&& binding) {
    return std::move(binding)
        .template Arg<ffi::AnyBuffer>()   // values
        .template Arg<ffi::AnyBuffer>()   // rewards
        .template Arg<ffi::AnyBuffer>()   // dones
        .template Arg<ffi::AnyBuffer>()   // importance
        .template Ret<ffi::AnyBuffer>();  // advantages
}

template <typename Scalar>
auto cpu_binding() {
    return with_params<Scalar>(with_arrays(ffi::Ffi::Bind()));
}

template <typename Stream, typename Scalar>
auto gpu_binding() {
    return with_params<Scalar>(with_arrays(
        ffi::Ffi::Bind().template Ctx<ffi::PlatformStream<Stream>>().template Ctx<ffi::DeviceOrdinal>()));
}

XLA_FFI_DEFINE_HANDLER(cpu_f32, puff_advantage_cpu<float>, cpu_binding<float>());
XLA_FFI_DEFINE_HANDLER(cpu_f64, puff_advantage_cpu<double>, cpu_binding<double>());

// Command-buffer (CUDA graph) compatible: a call only queues kernels on the
// given stream. The host-side checks run once when XLA records the graph, and
// again whenever it re-records for new buffer addresses; shapes never change.
#if PUFFADV_HAS_CUDA
XLA_FFI_DEFINE_HANDLER(cuda_f32, (puff_advantage_gpu<device_type::cuda, cudaStream_t, float>),
                       (gpu_binding<cudaStream_t, float>()),
                       {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER(cuda_f64, (puff_advantage_gpu<device_type::cuda, cudaStream_t, double>),
                       (gpu_binding<cudaStream_t, double>()),
                       {ffi::Traits::kCmdBufferCompatible});
#endif
#if PUFFADV_HAS_HIP
XLA_FFI_DEFINE_HANDLER(rocm_f32, (puff_advantage_gpu<device_type::rocm, hipStream_t, float>),
                       (gpu_binding<hipStream_t, float>()),
                       {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER(rocm_f64, (puff_advantage_gpu<device_type::rocm, hipStream_t, double>),
                       (gpu_binding<hipStream_t, double>()),
                       {ffi::Traits::kCmdBufferCompatible});
#endif

void* address(XLA_FFI_Handler* handler) { return reinterpret_cast<void*>(handler); }

}  // namespace

std::vector<ffi_target> ffi_targets() {
    std::vector<ffi_target> targets = {
        {"puffadv_puff_advantage_f32", "cpu", address(cpu_f32)},
        {"puffadv_puff_advantage_f64", "cpu", address(cpu_f64)},
    };
#if PUFFADV_HAS_CUDA
    targets.push_back({"puffadv_puff_advantage_f32", "CUDA", address(cuda_f32)});
    targets.push_back({"puffadv_puff_advantage_f64", "CUDA", address(cuda_f64)});
#endif
#if PUFFADV_HAS_HIP
    targets.push_back({"puffadv_puff_advantage_f32", "ROCM", address(rocm_f32)});
    targets.push_back({"puffadv_puff_advantage_f64", "ROCM", address(rocm_f64)});
#endif
    add_standard_targets(targets);
    return targets;
}

int ffi_api_major() { return XLA_FFI_API_MAJOR; }
int ffi_api_minor() { return XLA_FFI_API_MINOR; }

}  // namespace puffadv::jax
