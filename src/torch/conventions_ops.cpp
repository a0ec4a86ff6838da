// torch.ops.puffadv.{gae, td_lambda_returns, vtrace}: the standard conventions
// as functional torch operators. One kernel for every device key: the core
// routes by the tensors' device (CPU threads, or the GPU on torch's current
// stream), and find_standard_problem checks every argument. The fake kernels,
// for torch.compile, are in python/puffadv/_torch_conventions.py.
#include <cstdint>
#include <optional>
#include <tuple>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <puffadv/conventions.hpp>

#include "ops.hpp"

namespace puffadv::torch_ops {
namespace {

std::optional<matrix> optional_view(const std::optional<at::Tensor>& t, const char* name) {
    if (!t || !t->defined()) return std::nullopt;
    return to_matrix(*t, name, false);
}

gpu_stream stream_of(const at::Tensor& t) {
    if (!t.is_cuda()) return nullptr;
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(t.device()).native_handle();
}

void throw_as_torch(const argument_problem& problem) {
    TORCH_CHECK_TYPE(problem.kind != argument_problem::type, problem.message);
    TORCH_CHECK_VALUE(problem.kind != argument_problem::value, problem.message);
}

// Runs one estimator; outputs are fresh contiguous tensors shaped like rewards.
std::tuple<at::Tensor, at::Tensor> estimate(estimator kind, const at::Tensor& rewards, const at::Tensor& values,
                                            const at::Tensor& terminated,
                                            const std::optional<at::Tensor>& truncated,
                                            const std::optional<at::Tensor>& last_value,
                                            const std::optional<at::Tensor>& bootstrap_values,
                                            const std::optional<at::Tensor>& importance, double gamma,
                                            double lambda, const char* lambda_name, double rho_clip, double c_clip,
                                            double rho_pg_clip, std::int64_t time_axis, bool want_advantages) {
    require_tensor(rewards, "rewards");  // shapes the outputs
    require_tensor(values, "values");    // sets their dtype
    const auto options = rewards.options().dtype(output_type(values)).memory_format(at::MemoryFormat::Contiguous);
    at::Tensor returns = at::empty(rewards.sizes(), options);
    at::Tensor advantages = want_advantages ? at::empty(rewards.sizes(), options) : at::Tensor();
    standard_arrays a;
    a.rewards = to_matrix(rewards, "rewards", false);
    a.values = to_matrix(values, "values", false);
    a.terminated = to_matrix(terminated, "terminated", false);
    a.truncated = optional_view(truncated, "truncated");
    a.last_value = optional_view(last_value, "last_value");
    a.bootstrap_values = optional_view(bootstrap_values, "bootstrap_values");
    a.importance = optional_view(importance, "importance");
    if (want_advantages) a.advantages = to_matrix(advantages, "advantages", true);
    a.fused.returns = to_matrix(returns, "returns", true);
    throw_as_torch(apply_time_axis(a, time_axis));  // the schema's int64, unnarrowed
    const standard_params p{kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip, lambda_name};
    throw_as_torch(find_standard_problem(a, p));
    try {
        const c10::OptionalDeviceGuard guard(rewards.is_cuda() ? std::optional<c10::Device>(rewards.device())
                                                               : std::nullopt);
        compute_standard_estimate(a, p, stream_of(rewards));
    } catch (const backend_unavailable& e) {  // no host fallback here: say how to get one
        TORCH_CHECK(false, e.what(), " (puffadv.gae / vtrace / td_lambda_returns fall back to the host)");
    } catch (const type_error& e) {
        TORCH_CHECK_TYPE(false, e.what());
    } catch (const value_error& e) {
        TORCH_CHECK_VALUE(false, e.what());
    } catch (const gpu_error& e) {
        TORCH_CHECK(false, "puffadv: ", e.what());
    }
    return {advantages, returns};
}

std::tuple<at::Tensor, at::Tensor> gae_op(const at::Tensor& rewards, const at::Tensor& values,
                                          const at::Tensor& terminated, const std::optional<at::Tensor>& truncated,
                                          const std::optional<at::Tensor>& last_value,
                                          const std::optional<at::Tensor>& bootstrap_values,
                                          const std::optional<at::Tensor>& importance, double gamma,
                                          double gae_lambda, double rho_clip, double c_clip,
                                          std::int64_t time_axis) {
    return estimate(estimator::gae, rewards, values, terminated, truncated, last_value, bootstrap_values,
                    importance, gamma, gae_lambda, "gae_lambda", rho_clip, c_clip, 1.0, time_axis, true);
}

at::Tensor td_lambda_op(const at::Tensor& rewards, const at::Tensor& values, const at::Tensor& terminated,
                        const std::optional<at::Tensor>& truncated, const std::optional<at::Tensor>& last_value,
                        const std::optional<at::Tensor>& bootstrap_values,
                        const std::optional<at::Tensor>& importance, double gamma, double lambda_,
                        double rho_clip, double c_clip, std::int64_t time_axis) {
    return std::get<1>(estimate(estimator::td_lambda, rewards, values, terminated, truncated, last_value,
                                bootstrap_values, importance, gamma, lambda_, "lambda_", rho_clip, c_clip, 1.0,
                                time_axis, false));
}

std::tuple<at::Tensor, at::Tensor> vtrace_op(const at::Tensor& rewards, const at::Tensor& values,
                                             const at::Tensor& terminated,
                                             const std::optional<at::Tensor>& truncated,
                                             const std::optional<at::Tensor>& last_value,
                                             const std::optional<at::Tensor>& bootstrap_values,
                                             const std::optional<at::Tensor>& importance, double gamma,
                                             double lambda_, double rho_clip, double c_clip, double rho_pg_clip,
                                             std::int64_t time_axis) {
    auto [pg, vs] = estimate(estimator::vtrace, rewards, values, terminated, truncated, last_value,
                             bootstrap_values, importance, gamma, lambda_, "lambda_", rho_clip, c_clip,
                             rho_pg_clip, time_axis, true);
    return {vs, pg};
}

// Targets, never differentiated: on the Autograd key the ops run below autograd
// (as under torch.no_grad), as the puff ops do, so no graph is recorded even when
// values requires grad and no backward can return a wrong gradient.
// The call goes back through the dispatcher (to the device kernel, or to the
// fake kernel under torch.compile), never straight to the kernel.
template <const char* Name, typename Signature>
struct below_autograd;
template <const char* Name, typename R, typename... Args>
struct below_autograd<Name, R(Args...)> {
    static R call(Args... args) {
        static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(Name, "").template typed<R(Args...)>();
        const at::AutoDispatchBelowAutograd guard;
        return op.call(args...);
    }
};
constexpr char gae_name[] = "puffadv::gae";
constexpr char td_lambda_name[] = "puffadv::td_lambda_returns";
constexpr char vtrace_name[] = "puffadv::vtrace";

}  // namespace
}  // namespace puffadv::torch_ops

// The schemas, written once. Tensor? arguments are the optional arrays.
TORCH_LIBRARY_FRAGMENT(puffadv, m) {
    m.def("gae(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
          "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
          "float gamma=0.99, float gae_lambda=0.95, float rho_clip=1.0, float c_clip=1.0, "
          "int time_axis=-1) -> (Tensor advantages, Tensor returns)");
    m.def("td_lambda_returns(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
          "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
          "float gamma=0.99, float lambda_=0.95, float rho_clip=1.0, float c_clip=1.0, "
          "int time_axis=-1) -> Tensor");
    m.def("vtrace(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
          "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
          "float gamma=0.99, float lambda_=1.0, float rho_clip=1.0, float c_clip=1.0, "
          "float rho_pg_clip=1.0, int time_axis=-1) -> (Tensor vs, Tensor pg_advantages)");
}

// One kernel for CPU and CUDA (HIP under ROCm torch): the core routes by device.
#define PUFF_CONVENTION_IMPLS(m)                                                                       \
    m.impl("gae", &puffadv::torch_ops::gae_op);                                                        \
    m.impl("td_lambda_returns", &puffadv::torch_ops::td_lambda_op);                                    \
    m.impl("vtrace", &puffadv::torch_ops::vtrace_op)

TORCH_LIBRARY_IMPL(puffadv, CPU, m) { PUFF_CONVENTION_IMPLS(m); }
TORCH_LIBRARY_IMPL(puffadv, CUDA, m) { PUFF_CONVENTION_IMPLS(m); }

TORCH_LIBRARY_IMPL(puffadv, Autograd, m) {
    using namespace puffadv::torch_ops;
    m.impl("gae", &below_autograd<gae_name, decltype(gae_op)>::call);
    m.impl("td_lambda_returns", &below_autograd<td_lambda_name, decltype(td_lambda_op)>::call);
    m.impl("vtrace", &below_autograd<vtrace_name, decltype(vtrace_op)>::call);
}
