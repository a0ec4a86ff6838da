// XLA FFI handlers of the standard conventions (GAE, TD(lambda), V-trace):
// compute_standard_estimate inside jax.jit. Three required inputs, then the
// optional ones that a bit mask says are present; always two outputs
// (advantages, and returns as the fused output). python/puffadv/jax.py hands
// over batch-major [.., B, T] data, so no time_axis reaches the handler.
#include <cstdint>
#include <optional>
#include <utility>

#include <puffadv/conventions.hpp>

#include "ffi_handlers.hpp"
#include "ffi_views.hpp"

namespace puffadv::jax {
namespace {

/// Bits of the `present` attribute; the optional inputs follow in this order.
enum optional_input : std::int32_t {
    has_truncated = 1,
    has_last_value = 2,
    has_bootstrap_values = 4,
    has_importance = 8,
};

template <typename Scalar>
ffi::Error standard_estimate(device where, gpu_stream stream, const ffi::AnyBuffer& rewards,
                             const ffi::AnyBuffer& values, const ffi::AnyBuffer& terminated,
                             const ffi::RemainingArgs& optional, ffi::AnyBuffer& advantages,
                             ffi::AnyBuffer& returns, std::int32_t kind, std::int32_t present,
                             Scalar gamma, Scalar lambda, Scalar rho_clip, Scalar c_clip,
                             Scalar rho_pg_clip) {
    if (kind < 0 || kind > 2)
        return ffi::Error::InvalidArgument("puffadv: kind must be 0 (gae), 1 (td_lambda) or 2 (vtrace)");
    standard_arrays a;
    matrix values_view;
    const std::pair<const ffi::AnyBuffer*, matrix*> required[] = {
        {&rewards, &a.rewards}, {&values, &values_view}, {&terminated, &a.terminated}};
    const char* names[] = {"rewards", "values", "terminated"};
    for (int i = 0; i < 3; ++i)
        if (auto error = to_matrix(*required[i].first, names[i], where, false, *required[i].second);
            error.failure())
            return error;
    a.values = values_view;

    struct slot {
        std::int32_t bit;
        const char* name;
        std::optional<matrix>* view;
        bool vector;  // [rows], not [rows, horizon]
    };
    const slot slots[] = {{has_truncated, "truncated", &a.truncated, false},
                          {has_last_value, "last_value", &a.last_value, true},
                          {has_bootstrap_values, "bootstrap_values", &a.bootstrap_values, false},
                          {has_importance, "importance", &a.importance, false}};
    std::size_t next = 0;
    for (const slot& s : slots) {
        if (!(present & s.bit)) continue;
        auto buffer = optional.get<ffi::AnyBuffer>(next++);
        if (!buffer.has_value())
            return ffi::Error::InvalidArgument(std::string("puffadv: ") + s.name + " is flagged present "
                                               "but its buffer is missing");
        matrix m;
        if (auto error = to_matrix(*buffer, s.name, where, false, m, s.vector); error.failure())
            return error;
        *s.view = m;
    }
    if (next != optional.size())
        return ffi::Error::InvalidArgument("puffadv: more optional inputs than the `present` mask names");

    matrix advantages_view, returns_view;
    if (auto error = to_matrix(advantages, "advantages", where, true, advantages_view); error.failure())
        return error;
    if (auto error = to_matrix(returns, "returns", where, true, returns_view); error.failure())
        return error;
    a.advantages = advantages_view;
    a.fused.returns = returns_view;

    const auto estimator_kind = static_cast<estimator>(kind);
    const standard_params p{estimator_kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip,
                            estimator_kind == estimator::gae ? "gae_lambda" : "lambda_"};
    return run_core([&] { compute_standard_estimate(a, p, stream); });
}

template <typename Scalar>
ffi::Error standard_estimate_cpu(ffi::AnyBuffer rewards, ffi::AnyBuffer values, ffi::AnyBuffer terminated,
                                 ffi::RemainingArgs optional, ffi::Result<ffi::AnyBuffer> advantages,
                                 ffi::Result<ffi::AnyBuffer> returns, std::int32_t kind,
                                 std::int32_t present, Scalar gamma, Scalar lambda, Scalar rho_clip,
                                 Scalar c_clip, Scalar rho_pg_clip) {
    return standard_estimate<Scalar>({device_type::cpu, 0}, nullptr, rewards, values, terminated,
                                     optional, *advantages, *returns, kind, present, gamma, lambda,
                                     rho_clip, c_clip, rho_pg_clip);
}

template <device_type Device, typename Stream, typename Scalar>
ffi::Error standard_estimate_gpu(Stream stream, std::int32_t device_ordinal, ffi::AnyBuffer rewards,
                                 ffi::AnyBuffer values, ffi::AnyBuffer terminated,
                                 ffi::RemainingArgs optional, ffi::Result<ffi::AnyBuffer> advantages,
                                 ffi::Result<ffi::AnyBuffer> returns, std::int32_t kind,
                                 std::int32_t present, Scalar gamma, Scalar lambda, Scalar rho_clip,
                                 Scalar c_clip, Scalar rho_pg_clip) {
    return standard_estimate<Scalar>({Device, device_ordinal}, reinterpret_cast<gpu_stream>(stream),
                                     rewards, values, terminated, optional, *advantages, *returns,
                                     kind, present, gamma, lambda, rho_clip, c_clip, rho_pg_clip);
}

template <typename Scalar, typename Binding>
auto standard_signature(Binding&& binding) {
    return std::move(binding)
        .template Arg<ffi::AnyBuffer>()  // rewards
        .template Arg<ffi::AnyBuffer>()  // values
        .template Arg<ffi::AnyBuffer>()  // terminated
        .RemainingArgs()                 // the optional inputs named by `present`
        .template Ret<ffi::AnyBuffer>()  // advantages (pg advantages for vtrace)
        .template Ret<ffi::AnyBuffer>()  // returns (vs for vtrace)
        .template Attr<std::int32_t>("kind")
        .template Attr<std::int32_t>("present")
        .template Attr<Scalar>("gamma")
        .template Attr<Scalar>("lambda_")
        .template Attr<Scalar>("rho_clip")
        .template Attr<Scalar>("c_clip")
        .template Attr<Scalar>("rho_pg_clip");
}

template <typename Scalar>
auto cpu_binding() {
    return standard_signature<Scalar>(ffi::Ffi::Bind());
}

template <typename Stream, typename Scalar>
auto gpu_binding() {
    return standard_signature<Scalar>(
        ffi::Ffi::Bind().template Ctx<ffi::PlatformStream<Stream>>().template Ctx<ffi::DeviceOrdinal>());
}

XLA_FFI_DEFINE_HANDLER(cpu_f32, standard_estimate_cpu<float>, cpu_binding<float>());
XLA_FFI_DEFINE_HANDLER(cpu_f64, standard_estimate_cpu<double>, cpu_binding<double>());

// GPU handlers: the core runs the conventions' GPU kernels (src/conventions_cuda.cu)
// on XLA's stream. Not marked command-buffer compatible: that has not been tested
// on a GPU for these kernels (the puff advantage's handlers are, and are tested).
#if PUFFADV_HAS_CUDA
XLA_FFI_DEFINE_HANDLER(cuda_f32, (standard_estimate_gpu<device_type::cuda, cudaStream_t, float>),
                       (gpu_binding<cudaStream_t, float>()));
XLA_FFI_DEFINE_HANDLER(cuda_f64, (standard_estimate_gpu<device_type::cuda, cudaStream_t, double>),
                       (gpu_binding<cudaStream_t, double>()));
#endif
#if PUFFADV_HAS_HIP
XLA_FFI_DEFINE_HANDLER(rocm_f32, (standard_estimate_gpu<device_type::rocm, hipStream_t, float>),
                       (gpu_binding<hipStream_t, float>()));
XLA_FFI_DEFINE_HANDLER(rocm_f64, (standard_estimate_gpu<device_type::rocm, hipStream_t, double>),
                       (gpu_binding<hipStream_t, double>()));
#endif

void* address(XLA_FFI_Handler* handler) { return reinterpret_cast<void*>(handler); }

}  // namespace

void add_standard_targets(std::vector<ffi_target>& targets) {
    targets.push_back({"puffadv_standard_estimate_f32", "cpu", address(cpu_f32)});
    targets.push_back({"puffadv_standard_estimate_f64", "cpu", address(cpu_f64)});
#if PUFFADV_HAS_CUDA
    targets.push_back({"puffadv_standard_estimate_f32", "CUDA", address(cuda_f32)});
    targets.push_back({"puffadv_standard_estimate_f64", "CUDA", address(cuda_f64)});
#endif
#if PUFFADV_HAS_HIP
    targets.push_back({"puffadv_standard_estimate_f32", "ROCM", address(rocm_f32)});
    targets.push_back({"puffadv_standard_estimate_f64", "ROCM", address(rocm_f64)});
#endif
}

}  // namespace puffadv::jax
