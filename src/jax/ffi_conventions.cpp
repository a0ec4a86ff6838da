// XLA FFI handlers of the estimator family (GAE, TD(lambda), V-trace, discounted
// returns, Retrace, Q(lambda), n-step returns, episodic sums: the `kind`
// attribute, estimator's value): compute_standard_estimate inside jax.jit. Two
// required inputs, then the optional ones that a bit mask says are present; the
// returns (the fused output), then the advantages when asked for.
// python/puffadv/_jax_family.py hands over batch-major [.., B, T] data, so no
// time_axis reaches the handler.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <puffadv/conventions.hpp>

#include "jax/ffi_handlers.hpp"
#include "jax/ffi_views.hpp"

namespace puffadv::jax {
namespace {

/// Bits of the `present` attribute. The optional inputs follow the two required
/// ones (rewards, terminated) in the order of `slots` below, which is not the
/// bits' order: values came last, when discounted returns and episodic sums
/// made it optional (kinds 0, 1, 2, 4, 5, 6 read it).
enum optional_input : std::int32_t {
    has_truncated = 1,
    has_last_value = 2,
    has_bootstrap_values = 4,
    has_importance = 8,
    has_next_values = 16,
    has_target_probs = 32,
    has_behaviour_probs = 64,
    has_greedy = 128,
    has_values = 256,
};

/// The scalars of a call (XLA attributes), in the handler's Scalar type.
template <typename Scalar>
struct scalars {
    Scalar gamma, lambda, rho_clip, c_clip, rho_pg_clip;
    std::int64_t n;
    bool log_probs, reset_at_start;
};

template <typename Scalar>
ffi::Error standard_estimate(device where, gpu_stream stream, const ffi::AnyBuffer& rewards,
                             const ffi::AnyBuffer& terminated, const ffi::RemainingArgs& optional,
                             ffi::AnyBuffer& returns, const ffi::RemainingRets& more_outputs, std::int32_t kind,
                             std::int32_t present, const scalars<Scalar>& s) {
    if (kind < 0 || kind > static_cast<std::int32_t>(estimator::episodic_sum))
        return ffi::Error::InvalidArgument("puffadv: kind must be 0 (gae) to 7 (episodic_sum), got " +
                                           std::to_string(kind));
    standard_arrays a;
    if (auto error = to_matrix(rewards, "rewards", where, false, a.rewards); error.failure()) return error;
    if (auto error = to_matrix(terminated, "terminated", where, false, a.terminated); error.failure())
        return error;

    struct slot {
        std::int32_t bit;
        const char* name;
        std::optional<matrix>* view;
        bool vector;  // [rows], not [rows, horizon]
    };
    const slot slots[] = {{has_values, "values", &a.values, false},
                          {has_truncated, "truncated", &a.truncated, false},
                          {has_last_value, "last_value", &a.last_value, true},
                          {has_bootstrap_values, "bootstrap_values", &a.bootstrap_values, false},
                          {has_importance, "importance", &a.importance, false},
                          {has_next_values, "next_values", &a.next_values, false},
                          {has_target_probs, "target_probs", &a.target_probs, false},
                          {has_behaviour_probs, "behaviour_probs", &a.behaviour_probs, false},
                          {has_greedy, "greedy", &a.greedy, false}};
    std::size_t next = 0;
    for (const slot& slot : slots) {
        if (!(present & slot.bit)) continue;
        auto buffer = optional.get<ffi::AnyBuffer>(next++);
        if (!buffer.has_value())
            return ffi::Error::InvalidArgument(std::string("puffadv: ") + slot.name + " is flagged present "
                                               "but its buffer is missing");
        matrix m;
        if (auto error = to_matrix(*buffer, slot.name, where, false, m, slot.vector); error.failure())
            return error;
        *slot.view = m;
    }
    if (next != optional.size())
        return ffi::Error::InvalidArgument("puffadv: more optional inputs than the `present` mask names");

    matrix returns_view;
    if (auto error = to_matrix(returns, "returns", where, true, returns_view); error.failure()) return error;
    a.fused.returns = returns_view;
    if (more_outputs.size() > 1)
        return ffi::Error::InvalidArgument("puffadv: at most two outputs (returns, advantages)");
    if (more_outputs.size() == 1) {  // advantages, when the caller wants them
        auto advantages = more_outputs.get<ffi::AnyBuffer>(0);
        if (!advantages.has_value()) return advantages.error();
        matrix advantages_view;
        if (auto error = to_matrix(**advantages, "advantages", where, true, advantages_view); error.failure())
            return error;
        a.advantages = advantages_view;
    }

    standard_params p;
    p.kind = static_cast<estimator>(kind);
    p.gamma = s.gamma;
    p.lambda = s.lambda;
    p.rho_clip = s.rho_clip;
    p.c_clip = s.c_clip;
    p.rho_pg_clip = s.rho_pg_clip;
    p.lambda_name = p.kind == estimator::gae ? "gae_lambda" : "lambda_";
    p.n = s.n;
    p.log_probs = s.log_probs;
    p.reset_at_start = s.reset_at_start;
    return run_core([&] { compute_standard_estimate(a, p, stream); });
}

template <typename Scalar>
ffi::Error standard_estimate_cpu(ffi::AnyBuffer rewards, ffi::AnyBuffer terminated, ffi::RemainingArgs optional,
                                 ffi::Result<ffi::AnyBuffer> returns, ffi::RemainingRets more_outputs,
                                 std::int32_t kind, std::int32_t present, Scalar gamma, Scalar lambda,
                                 Scalar rho_clip, Scalar c_clip, Scalar rho_pg_clip, std::int64_t n,
                                 bool log_probs, bool reset_at_start) {
    return standard_estimate<Scalar>({device_type::cpu, 0}, nullptr, rewards, terminated, optional, *returns,
                                     more_outputs, kind, present,
                                     {gamma, lambda, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start});
}

template <device_type Device, typename Stream, typename Scalar>
ffi::Error standard_estimate_gpu(Stream stream, std::int32_t device_ordinal, ffi::AnyBuffer rewards,
                                 ffi::AnyBuffer terminated, ffi::RemainingArgs optional,
                                 ffi::Result<ffi::AnyBuffer> returns, ffi::RemainingRets more_outputs,
                                 std::int32_t kind, std::int32_t present, Scalar gamma, Scalar lambda,
                                 Scalar rho_clip, Scalar c_clip, Scalar rho_pg_clip, std::int64_t n,
                                 bool log_probs, bool reset_at_start) {
    return standard_estimate<Scalar>({Device, device_ordinal}, reinterpret_cast<gpu_stream>(stream), rewards,
                                     terminated, optional, *returns, more_outputs, kind, present,
                                     {gamma, lambda, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start});
}

template <typename Scalar, typename Binding>
auto standard_signature(Binding&& binding) {
    return std::move(binding)
        .template Arg<ffi::AnyBuffer>()  // rewards (episodic_sum: inputs)
        .template Arg<ffi::AnyBuffer>()  // terminated (episodic_sum: dones)
        .RemainingArgs()                 // the optional inputs named by `present`
        .template Ret<ffi::AnyBuffer>()  // returns (vs for vtrace; the result of the one-output kinds)
        .RemainingRets()                 // advantages (pg advantages for vtrace), when asked for
        .template Attr<std::int32_t>("kind")
        .template Attr<std::int32_t>("present")
        .template Attr<Scalar>("gamma")
        .template Attr<Scalar>("lambda_")
        .template Attr<Scalar>("rho_clip")
        .template Attr<Scalar>("c_clip")
        .template Attr<Scalar>("rho_pg_clip")
        .template Attr<std::int64_t>("n")
        .template Attr<bool>("log_probs")
        .template Attr<bool>("reset_at_start");
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

// GPU handlers: the core runs the conventions' GPU kernels (src/gpu/conventions_cuda.cu)
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
