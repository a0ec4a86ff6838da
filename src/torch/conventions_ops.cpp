// torch.ops.puffadv.{gae, td_lambda_returns, vtrace}: the standard conventions
// as functional torch operators. One kernel for every device key: the core
// routes by the tensors' device (CPU threads, or the GPU on torch's current
// stream), and find_standard_problem checks every argument. The fake kernels,
// for torch.compile, are in python/puffadv/_torch_conventions.py; the Autograd
// and BackendSelect registrations in python/puffadv/torch.py.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

#include <puffadv/conventions.hpp>

#include "ops.hpp"

namespace puffadv::torch_ops {
namespace {

std::optional<matrix> optional_view(const std::optional<Tensor>& t, const char* name) {
    if (!t || !t->defined()) return std::nullopt;
    return to_matrix(*t, name, false);
}

// Runs one estimator; outputs are fresh contiguous tensors shaped like rewards.
std::tuple<Tensor, Tensor> estimate(estimator kind, const Tensor& rewards, const Tensor& values,
                                    const Tensor& terminated, const std::optional<Tensor>& truncated,
                                    const std::optional<Tensor>& last_value,
                                    const std::optional<Tensor>& bootstrap_values,
                                    const std::optional<Tensor>& importance, double gamma, double lambda,
                                    const char* lambda_name, double rho_clip, double c_clip, double rho_pg_clip,
                                    std::int64_t time_axis, bool want_advantages) {
    require_tensor(rewards, "rewards");  // shapes the outputs
    require_tensor(values, "values");    // sets their dtype
    Tensor returns = empty_output(rewards, values);
    // An unused advantages output is a 0-element tensor: a stable Tensor is never undefined.
    Tensor advantages = want_advantages ? empty_output(rewards, values) : returns;
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
    throw_problem(apply_time_axis(a, time_axis));  // the schema's int64, unnarrowed
    const standard_params p{kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip, lambda_name};
    throw_problem(find_standard_problem(a, p));
    try {
        // The core launches on the current device; the stream is torch's current one there.
        std::optional<torch::stable::accelerator::DeviceGuard> guard;
        if (rewards.is_cuda()) guard.emplace(rewards.get_device_index());
        compute_standard_estimate(a, p, current_stream(rewards));
    } catch (const backend_unavailable& e) {  // no host fallback here: say how to get one
        throw std::runtime_error(std::string(e.what()) +
                                 " (puffadv.gae / vtrace / td_lambda_returns fall back to the host)");
    } catch (const type_error& e) {
        throw_problem({argument_problem::type, e.what()});
    } catch (const gpu_error& e) {
        throw std::runtime_error(std::string("puffadv: ") + e.what());
    }  // value_error is std::invalid_argument already
    return {advantages, returns};
}

std::tuple<Tensor, Tensor> gae_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                                  const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                                  const std::optional<Tensor>& bootstrap_values,
                                  const std::optional<Tensor>& importance, double gamma, double gae_lambda,
                                  double rho_clip, double c_clip, std::int64_t time_axis) {
    return estimate(estimator::gae, rewards, values, terminated, truncated, last_value, bootstrap_values,
                    importance, gamma, gae_lambda, "gae_lambda", rho_clip, c_clip, 1.0, time_axis, true);
}

Tensor td_lambda_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                    const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                    const std::optional<Tensor>& bootstrap_values, const std::optional<Tensor>& importance,
                    double gamma, double lambda_, double rho_clip, double c_clip, std::int64_t time_axis) {
    return std::get<1>(estimate(estimator::td_lambda, rewards, values, terminated, truncated, last_value,
                                bootstrap_values, importance, gamma, lambda_, "lambda_", rho_clip, c_clip, 1.0,
                                time_axis, false));
}

std::tuple<Tensor, Tensor> vtrace_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                                     const std::optional<Tensor>& truncated,
                                     const std::optional<Tensor>& last_value,
                                     const std::optional<Tensor>& bootstrap_values,
                                     const std::optional<Tensor>& importance, double gamma, double lambda_,
                                     double rho_clip, double c_clip, double rho_pg_clip, std::int64_t time_axis) {
    auto [pg, vs] = estimate(estimator::vtrace, rewards, values, terminated, truncated, last_value,
                             bootstrap_values, importance, gamma, lambda_, "lambda_", rho_clip, c_clip,
                             rho_pg_clip, time_axis, true);
    return {vs, pg};
}

}  // namespace
}  // namespace puffadv::torch_ops

// The schemas, written once. Tensor? arguments are the optional arrays.
STABLE_TORCH_LIBRARY_FRAGMENT(puffadv, m) {
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
#define PUFF_CONVENTION_IMPLS(m)                                                   \
    m.impl("gae", TORCH_BOX(&puffadv::torch_ops::gae_op));                         \
    m.impl("td_lambda_returns", TORCH_BOX(&puffadv::torch_ops::td_lambda_op));     \
    m.impl("vtrace", TORCH_BOX(&puffadv::torch_ops::vtrace_op))

STABLE_TORCH_LIBRARY_IMPL(puffadv, CPU, m) { PUFF_CONVENTION_IMPLS(m); }
STABLE_TORCH_LIBRARY_IMPL(puffadv, CUDA, m) { PUFF_CONVENTION_IMPLS(m); }
