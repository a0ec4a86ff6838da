// XLA FFI handlers: puffadv inside jax.jit. Written against XLA's header-only
// FFI API (xla/ffi/api/ffi.h from jax.ffi.include_dir()); nothing links jaxlib.
//
// Two signatures, as python/puffadv/jax.py and _jax_family.py call them: the
// puff advantage's (PufferLib's four arrays and scalars) and the estimator
// family's (a `kind`, two required inputs, the optional ones a `present` mask
// names). Each turns XLA's buffers into one standard_arrays and makes the core's
// one call (core/layer_call.hpp), so every argument check is the core's own. Each
// is served on every platform, in float32 and float64, by one handler template.
#include "jax/ffi_handlers.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include "core/layer_call.hpp"
#include "jax/ffi_views.hpp"

namespace puffadv::jax {
namespace {

ffi::Error compute(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    return run_core([&] { layer::compute(arrays, params, stream); });
}

// Bindings only grow by their own calls (their move constructor is private), so
// each helper below ends in one.

/// `binding` with `count` (>= 1) more buffer arguments.
template <std::size_t count, typename Binding>
auto buffer_args(Binding&& binding) {
    if constexpr (count == 1)
        return std::move(binding).template Arg<ffi::AnyBuffer>();
    else
        return buffer_args<count - 1>(std::move(binding).template Arg<ffi::AnyBuffer>());
}

/// `binding` with one attribute of type T per name, in order.
template <typename T, typename Binding, typename... Names>
auto attributes(Binding&& binding, const char* name, Names... more) {
    if constexpr (sizeof...(more) == 0)
        return std::move(binding).template Attr<T>(name);
    else
        return attributes<T>(std::move(binding).template Attr<T>(name), more...);
}

/// The puff advantage: values, rewards, dones, importance -> advantages. The
/// four scalars are attributes named as in Python; `Scalar` is float for the
/// float32 target and double for the float64 one, so x64 callers keep full precision.
template <typename Scalar>
struct puff_signature {
    // Command-buffer (CUDA graph) compatible: a call only queues kernels on the
    // given stream. The host-side checks run once when XLA records the graph, and
    // again whenever it re-records for new buffer addresses; shapes never change.
    static constexpr bool graph_safe = true;

    template <typename Binding>
    static auto bind(Binding&& binding) {
        return attributes<Scalar>(buffer_args<4>(std::move(binding))  // values, rewards, dones, importance
                                      .template Ret<ffi::AnyBuffer>(),  // advantages
                                  "gamma", "gae_lambda", "rho_clip", "c_clip");
    }

    static ffi::Error run(device where, gpu_stream stream, ffi::AnyBuffer values, ffi::AnyBuffer rewards,
                          ffi::AnyBuffer dones, ffi::AnyBuffer importance, ffi::Result<ffi::AnyBuffer> advantages,
                          Scalar gamma, Scalar gae_lambda, Scalar rho_clip, Scalar c_clip) {
        puff_arrays a;
        const struct {
            const ffi::AnyBuffer& buffer;
            const char* name;
            matrix& view;
        } arrays[] = {{values, "values", a.values},
                      {rewards, "rewards", a.rewards},
                      {dones, "dones", a.dones},
                      {importance, "importance", a.importance},
                      {*advantages, "advantages", a.advantages}};
        for (const auto& array : arrays) {
            const bool output = &array.view == &a.advantages;
            if (auto error = to_matrix(array.buffer, array.name, where, output, array.view); error.failure())
                return error;
        }
        const puff_params params{gamma, gae_lambda, rho_clip, c_clip};
        return compute(detail::as_standard_call(a), detail::as_standard_params(params), stream);
    }
};

/// Bits of the family's `present` attribute. The optional inputs follow the two
/// required ones (rewards, terminated) in the order of `slots` below, which is
/// not the bits' order: values came last, when discounted returns and episodic
/// sums made it optional (kinds 0, 1, 2, 4, 5, 6 read it).
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
    has_gamma_steps = 512,   // per-step gamma_t
    has_lambda_steps = 1024, // per-step lambda_t
    has_sample_mask = 2048,
};

/// The estimator family (GAE, TD(lambda), V-trace, discounted returns, Retrace,
/// Q(lambda), n-step returns, episodic sums: the `kind` attribute, estimator's
/// value): the returns (the fused output), then the advantages when asked for.
/// _jax_family.py hands over batch-major [.., B, T] data, so no time_axis reaches it.
template <typename Scalar>
struct family_signature {
    // Not marked command-buffer compatible: that has not been tested on a GPU
    // for these kernels (the puff advantage's handlers are, and are tested).
    static constexpr bool graph_safe = false;

    template <typename Binding>
    static auto bind(Binding&& binding) {
        auto arrays = buffer_args<2>(std::move(binding))  // rewards, terminated (episodic_sum: inputs, dones)
                          .RemainingArgs()                 // the optional inputs named by `present`
                          .template Ret<ffi::AnyBuffer>()  // returns (vs for vtrace; the one-output kinds' result)
                          .RemainingRets();                // advantages (vtrace: pg advantages), when asked for
        auto scalars = attributes<Scalar>(attributes<std::int32_t>(std::move(arrays), "kind", "present"), "gamma",
                                          "lambda_", "rho_clip", "c_clip", "rho_pg_clip");
        auto flags =
            attributes<bool>(attributes<std::int64_t>(std::move(scalars), "n"), "log_probs", "reset_at_start");
        return attributes<Scalar>(std::move(flags), "alpha");  // vtrace's leaky mix (issue 29)
    }

    static ffi::Error run(device where, gpu_stream stream, ffi::AnyBuffer rewards, ffi::AnyBuffer terminated,
                          ffi::RemainingArgs optional, ffi::Result<ffi::AnyBuffer> returns,
                          ffi::RemainingRets more_outputs, std::int32_t kind, std::int32_t present, Scalar gamma,
                          Scalar lambda, Scalar rho_clip, Scalar c_clip, Scalar rho_pg_clip, std::int64_t n,
                          bool log_probs, bool reset_at_start, Scalar alpha) {
        if (kind < 0 || kind > static_cast<std::int32_t>(estimator::episodic_sum))
            return ffi::Error::InvalidArgument("puffadv: kind must be 0 (gae) to 7 (episodic_sum), got " +
                                               std::to_string(kind));
        standard_arrays a;
        if (auto error = to_matrix(rewards, "rewards", where, false, a.rewards); error.failure()) return error;
        if (auto error = to_matrix(terminated, "terminated", where, false, a.terminated); error.failure())
            return error;
        if (auto error = view_optional_inputs(optional, present, where, a); error.failure()) return error;
        if (auto error = view_outputs(*returns, more_outputs, where, a); error.failure()) return error;

        standard_params p;
        p.kind = static_cast<estimator>(kind);
        p.gamma = gamma;
        p.lambda = lambda;
        p.rho_clip = rho_clip;
        p.c_clip = c_clip;
        p.rho_pg_clip = rho_pg_clip;
        p.lambda_name = layer::lambda_name(p.kind);
        p.n = n;
        p.log_probs = log_probs;
        p.reset_at_start = reset_at_start;
        p.alpha = alpha;
        return compute(a, p, stream);
    }

    static ffi::Error view_optional_inputs(const ffi::RemainingArgs& optional, std::int32_t present, device where,
                                           standard_arrays& a) {
        using role = detail::argument_role;
        const struct {
            std::int32_t bit;
            const char* name;
            role array;
            bool vector;  // [rows], not [rows, horizon]
        } slots[] = {{has_values, "values", role::values, false},
                     {has_truncated, "truncated", role::truncated, false},
                     {has_last_value, "last_value", role::last_value, true},
                     {has_bootstrap_values, "bootstrap_values", role::bootstrap_values, false},
                     {has_importance, "importance", role::importance, false},
                     {has_next_values, "next_values", role::next_values, false},
                     {has_target_probs, "target_probs", role::target_probs, false},
                     {has_behaviour_probs, "behaviour_probs", role::behaviour_probs, false},
                     {has_greedy, "greedy", role::greedy, false},
                     {has_gamma_steps, "gamma", role::gamma, false},
                     {has_lambda_steps, "lambda", role::lambda, false},
                     {has_sample_mask, "sample_mask", role::sample_mask, false}};
        std::size_t next = 0;
        for (const auto& slot : slots) {
            if (!(present & slot.bit)) continue;
            auto buffer = optional.get<ffi::AnyBuffer>(next++);
            if (!buffer.has_value())
                return ffi::Error::InvalidArgument(std::string("puffadv: ") + slot.name +
                                                   " is flagged present but its buffer is missing");
            matrix view;
            if (auto error = to_matrix(*buffer, slot.name, where, false, view, slot.vector); error.failure())
                return error;
            layer::set_view(a, slot.array, view);
        }
        if (next != optional.size())
            return ffi::Error::InvalidArgument("puffadv: more optional inputs than the `present` mask names");
        return ffi::Error::Success();
    }

    static ffi::Error view_outputs(const ffi::AnyBuffer& returns, const ffi::RemainingRets& more_outputs,
                                   device where, standard_arrays& a) {
        if (auto error = to_matrix(returns, "returns", where, true, a.fused.returns); error.failure()) return error;
        if (more_outputs.size() > 1)
            return ffi::Error::InvalidArgument("puffadv: at most two outputs (returns, advantages)");
        if (more_outputs.size() == 1) {  // advantages, when the caller wants them
            auto advantages = more_outputs.get<ffi::AnyBuffer>(0);
            if (!advantages.has_value()) return advantages.error();
            return to_matrix(**advantages, "advantages", where, true, a.advantages);
        }
        return ffi::Error::Success();
    }
};

/// linear_recurrence: inputs, decay and an optional seed ([.., rows]) -> y. Its own
/// signature, as it reads no flags; batch-major [.., B, T] data, as the family's.
/// `Scalar` only names the target (there are no float attributes).
template <typename Scalar>
struct recurrence_signature {
    static constexpr bool graph_safe = false;

    template <typename Binding>
    static auto bind(Binding&& binding) {
        return attributes<bool>(buffer_args<2>(std::move(binding))  // inputs, decay
                                    .RemainingArgs()                 // seed, when given
                                    .template Ret<ffi::AnyBuffer>(),  // y
                                "reverse");
    }

    static ffi::Error run(device where, gpu_stream stream, ffi::AnyBuffer inputs, ffi::AnyBuffer decay,
                          ffi::RemainingArgs seed, ffi::Result<ffi::AnyBuffer> out, bool reverse) {
        standard_arrays a;
        if (auto error = to_matrix(inputs, "inputs", where, false, a.rewards); error.failure()) return error;
        if (auto error = to_matrix(decay, "decay", where, false, a.decay); error.failure()) return error;
        if (seed.size() > 1) return ffi::Error::InvalidArgument("puffadv: at most one seed");
        if (seed.size() == 1) {
            auto buffer = seed.get<ffi::AnyBuffer>(0);
            if (!buffer.has_value()) return buffer.error();
            if (auto error = to_matrix(*buffer, "seed", where, false, a.last_value, true); error.failure())
                return error;
        }
        if (auto error = to_matrix(*out, "out", where, true, a.advantages); error.failure()) return error;
        standard_params p;
        p.kind = estimator::linear_recurrence;
        p.gamma = p.lambda = 1.0;
        p.reverse = reverse;
        return compute(a, p, stream);
    }
};

/// A signature's handler on the CPU: the buffers are host memory, no stream.
template <typename Signature>
struct on_cpu {
    static constexpr bool graph_safe = false;
    static auto binding() { return Signature::bind(ffi::Ffi::Bind()); }
    template <typename... Args>
    ffi::Error operator()(Args&&... args) const {
        return Signature::run(device{device_type::cpu, 0}, nullptr, std::forward<Args>(args)...);
    }
};

/// On CUDA and ROCm: the kernels are queued on XLA's stream for the device XLA
/// runs this op on; nothing synchronises and nothing is allocated.
template <device_type Device, typename Stream, typename Signature>
struct on_gpu {
    static constexpr bool graph_safe = Signature::graph_safe;
    static auto binding() {
        return Signature::bind(
            ffi::Ffi::Bind().template Ctx<ffi::PlatformStream<Stream>>().template Ctx<ffi::DeviceOrdinal>());
    }
    template <typename... Args>
    ffi::Error operator()(Stream stream, std::int32_t device_ordinal, Args&&... args) const {
        return Signature::run(device{Device, device_ordinal}, reinterpret_cast<gpu_stream>(stream),
                              std::forward<Args>(args)...);
    }
};

/// The XLA_FFI_Handler of a signature on a platform (what XLA_FFI_DEFINE_HANDLER
/// defines, for any of them): bound once, on the first call, and never freed.
template <typename Platform>
XLA_FFI_Error* handler(XLA_FFI_CallFrame* call_frame) {
    static auto* bound = [] {
        if constexpr (Platform::graph_safe)
            return Platform::binding().To(Platform{}, {ffi::Traits::kCmdBufferCompatible}).release();
        else
            return Platform::binding().To(Platform{}).release();
    }();
    return bound->Call(call_frame);
}

/// A signature's handlers, named `f32` and `f64` after their Scalar: CPU always,
/// CUDA / ROCm when compiled.
template <template <typename> class Signature>
void add_targets(std::vector<ffi_target>& targets, const char* f32, const char* f64) {
    const auto add = [&](const char* name, const char* platform, XLA_FFI_Handler* handler) {
        targets.push_back({name, platform, reinterpret_cast<void*>(handler)});
    };
    add(f32, "cpu", &handler<on_cpu<Signature<float>>>);
    add(f64, "cpu", &handler<on_cpu<Signature<double>>>);
#if PUFFADV_HAS_CUDA
    add(f32, "CUDA", &handler<on_gpu<device_type::cuda, cudaStream_t, Signature<float>>>);
    add(f64, "CUDA", &handler<on_gpu<device_type::cuda, cudaStream_t, Signature<double>>>);
#endif
#if PUFFADV_HAS_HIP
    add(f32, "ROCM", &handler<on_gpu<device_type::rocm, hipStream_t, Signature<float>>>);
    add(f64, "ROCM", &handler<on_gpu<device_type::rocm, hipStream_t, Signature<double>>>);
#endif
}

}  // namespace

std::vector<ffi_target> ffi_targets() {
    // The names python/puffadv/jax.py and _jax_family.py call.
    std::vector<ffi_target> targets;
    add_targets<puff_signature>(targets, "puffadv_puff_advantage_f32", "puffadv_puff_advantage_f64");
    add_targets<family_signature>(targets, "puffadv_standard_estimate_f32", "puffadv_standard_estimate_f64");
    add_targets<recurrence_signature>(targets, "puffadv_linear_recurrence_f32", "puffadv_linear_recurrence_f64");
    return targets;
}

int ffi_api_major() { return XLA_FFI_API_MAJOR; }
int ffi_api_minor() { return XLA_FFI_API_MINOR; }

}  // namespace puffadv::jax
