// torch.ops.puffadv.{gae, td_lambda_returns, vtrace, discounted_returns,
// n_step_returns, retrace, q_lambda, episodic_cumsum, eligibility_traces}: the
// estimator family as functional torch operators, each a kind of one estimate(). One kernel for every device key: the core
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

#include "core/conventions_detail.hpp"
#include "torch/ops.hpp"

namespace puffadv::torch_ops {
namespace {

std::optional<matrix> optional_view(const std::optional<Tensor>& t, const char* name) {
    if (!t || !t->defined()) return std::nullopt;
    return to_matrix(*t, name, false);
}

// One call's tensors by the core's roles (standard_arrays); absent optional
// tensors stay std::nullopt. Each is named as the caller knows it, from the
// core's table (episodic_sum's rewards are its `inputs`, q_lambda's values its
// `q_values`).
struct op_inputs {
    const Tensor& rewards;
    const Tensor* values;  // nullptr: the kind reads none (discounted_returns, episodic_sum)
    const Tensor& terminated;
    std::optional<Tensor> truncated, last_value, bootstrap_values, importance;
    std::optional<Tensor> next_values, target_probs, behaviour_probs, greedy;
};

// Runs one estimator, whatever its kind; outputs are fresh contiguous tensors
// shaped like rewards, of the values' output type (the rewards' without values).
std::tuple<Tensor, Tensor> estimate(const op_inputs& in, const standard_params& p, std::int64_t time_axis,
                                    bool want_advantages) {
    using detail::argument_role;
    const auto name = [&p](argument_role role) { return detail::argument_name(p, role); };
    require_tensor(in.rewards, name(argument_role::rewards));  // shapes the outputs
    if (in.values) require_tensor(*in.values, name(argument_role::values));
    const Tensor& typed = in.values ? *in.values : in.rewards;  // sets their dtype
    Tensor returns = empty_output(in.rewards, typed);
    // An unused advantages output is the returns tensor: a stable Tensor is never undefined.
    Tensor advantages = want_advantages ? empty_output(in.rewards, typed) : returns;
    standard_arrays a;
    a.rewards = to_matrix(in.rewards, name(argument_role::rewards), false);
    if (in.values) a.values = to_matrix(*in.values, name(argument_role::values), false);
    a.terminated = to_matrix(in.terminated, name(argument_role::terminated), false);
    const std::tuple<const std::optional<Tensor>&, std::optional<matrix>&, argument_role> optional[] = {
        {in.truncated, a.truncated, argument_role::truncated},
        {in.last_value, a.last_value, argument_role::last_value},
        {in.bootstrap_values, a.bootstrap_values, argument_role::bootstrap_values},
        {in.importance, a.importance, argument_role::importance},
        {in.next_values, a.next_values, argument_role::next_values},
        {in.target_probs, a.target_probs, argument_role::target_probs},
        {in.behaviour_probs, a.behaviour_probs, argument_role::behaviour_probs},
        {in.greedy, a.greedy, argument_role::greedy}};
    for (const auto& [tensor, view, role] : optional) view = optional_view(tensor, name(role));
    if (want_advantages) a.advantages = to_matrix(advantages, name(argument_role::advantages), true);
    a.fused.returns = to_matrix(returns, "returns", true);
    throw_problem(apply_time_axis(a, time_axis));  // the schema's int64, unnarrowed
    throw_problem(find_standard_problem(a, p));
    try {
        // The core launches on the current device; the stream is torch's current one there.
        std::optional<torch::stable::accelerator::DeviceGuard> guard;
        if (in.rewards.is_cuda()) guard.emplace(in.rewards.get_device_index());
        compute_standard_estimate(a, p, current_stream(in.rewards));
    } catch (const backend_unavailable& e) {  // no host fallback here: say how to get one
        throw std::runtime_error(std::string(e.what()) +
                                 " (the functions of the puffadv module fall back to the host)");
    } catch (const type_error& e) {
        throw_problem({argument_problem::type, e.what()});
    } catch (const gpu_error& e) {
        throw std::runtime_error(std::string("puffadv: ") + e.what());
    }  // value_error is std::invalid_argument already
    return {advantages, returns};
}

standard_params params(estimator kind, double gamma, double lambda, const char* lambda_name) {
    standard_params p;
    p.kind = kind;
    p.gamma = gamma;
    p.lambda = lambda;
    p.lambda_name = lambda_name;
    return p;
}

std::tuple<Tensor, Tensor> gae_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                                  const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                                  const std::optional<Tensor>& bootstrap_values,
                                  const std::optional<Tensor>& importance, double gamma, double gae_lambda,
                                  double rho_clip, double c_clip, std::int64_t time_axis) {
    op_inputs in{rewards, &values, terminated, truncated, last_value, bootstrap_values, importance};
    standard_params p = params(estimator::gae, gamma, gae_lambda, "gae_lambda");
    p.rho_clip = rho_clip;
    p.c_clip = c_clip;
    return estimate(in, p, time_axis, true);
}

Tensor td_lambda_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                    const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                    const std::optional<Tensor>& bootstrap_values, const std::optional<Tensor>& importance,
                    double gamma, double lambda_, double rho_clip, double c_clip, std::int64_t time_axis) {
    op_inputs in{rewards, &values, terminated, truncated, last_value, bootstrap_values, importance};
    standard_params p = params(estimator::td_lambda, gamma, lambda_, "lambda_");
    p.rho_clip = rho_clip;
    p.c_clip = c_clip;
    return std::get<1>(estimate(in, p, time_axis, false));
}

std::tuple<Tensor, Tensor> vtrace_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                                     const std::optional<Tensor>& truncated,
                                     const std::optional<Tensor>& last_value,
                                     const std::optional<Tensor>& bootstrap_values,
                                     const std::optional<Tensor>& importance, double gamma, double lambda_,
                                     double rho_clip, double c_clip, double rho_pg_clip, std::int64_t time_axis) {
    op_inputs in{rewards, &values, terminated, truncated, last_value, bootstrap_values, importance};
    standard_params p = params(estimator::vtrace, gamma, lambda_, "lambda_");
    p.rho_clip = rho_clip;
    p.c_clip = c_clip;
    p.rho_pg_clip = rho_pg_clip;
    auto [pg, vs] = estimate(in, p, time_axis, true);
    return {vs, pg};
}

Tensor discounted_returns_op(const Tensor& rewards, const Tensor& terminated,
                             const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                             const std::optional<Tensor>& bootstrap_values, double gamma,
                             std::int64_t time_axis) {
    op_inputs in{rewards, nullptr, terminated, truncated, last_value, bootstrap_values};
    // lambda is not read: the returns-to-go are TD(1) on zero values.
    return std::get<1>(estimate(in, params(estimator::discounted_returns, gamma, 1.0, "lambda_"), time_axis,
                                false));
}

Tensor n_step_returns_op(const Tensor& rewards, const Tensor& values, const Tensor& terminated,
                         const std::optional<Tensor>& truncated, const std::optional<Tensor>& last_value,
                         const std::optional<Tensor>& bootstrap_values, std::int64_t n, double gamma,
                         double lambda_, std::int64_t time_axis) {
    op_inputs in{rewards, &values, terminated, truncated, last_value, bootstrap_values};
    standard_params p = params(estimator::n_step_returns, gamma, lambda_, "lambda_");
    p.n = n;
    return std::get<1>(estimate(in, p, time_axis, false));
}

std::tuple<Tensor, Tensor> retrace_op(const Tensor& rewards, const Tensor& q_values, const Tensor& next_values,
                                      const Tensor& terminated, const std::optional<Tensor>& truncated,
                                      const std::optional<Tensor>& target_probs,
                                      const std::optional<Tensor>& behaviour_probs, bool log_probs,
                                      double gamma, double lambda_, double c_clip, std::int64_t time_axis) {
    op_inputs in{rewards, &q_values, terminated, truncated};
    in.next_values = next_values;
    in.target_probs = target_probs;
    in.behaviour_probs = behaviour_probs;
    standard_params p = params(estimator::retrace, gamma, lambda_, "lambda_");
    p.c_clip = c_clip;
    p.log_probs = log_probs;
    auto [advantages, returns] = estimate(in, p, time_axis, true);
    return {returns, advantages};
}

std::tuple<Tensor, Tensor> q_lambda_op(const Tensor& rewards, const Tensor& q_values, const Tensor& next_values,
                                       const Tensor& terminated, const std::optional<Tensor>& truncated,
                                       const std::optional<Tensor>& greedy, double gamma, double lambda_,
                                       std::int64_t time_axis) {
    op_inputs in{rewards, &q_values, terminated, truncated};
    in.next_values = next_values;
    in.greedy = greedy;
    auto [advantages, returns] =
        estimate(in, params(estimator::q_lambda, gamma, lambda_, "lambda_"), time_axis, true);
    return {returns, advantages};
}

// episodic_sum: C_t = inputs_t + gamma lambda (1 - reset_t) C_{t-1}.
Tensor episodic_sum(const Tensor& inputs, const Tensor& dones, const std::optional<Tensor>& seed,
                    const standard_params& p, std::int64_t time_axis) {
    op_inputs in{inputs, nullptr, dones, std::nullopt, seed};
    return std::get<1>(estimate(in, p, time_axis, false));
}

Tensor episodic_cumsum_op(const Tensor& inputs, const Tensor& dones, const std::optional<Tensor>& seed,
                          bool reset_at_start, std::int64_t time_axis) {
    standard_params p = params(estimator::episodic_sum, 1.0, 1.0, "lambda_");
    p.reset_at_start = reset_at_start;
    return episodic_sum(inputs, dones, seed, p, time_axis);
}

Tensor eligibility_traces_op(const Tensor& inputs, const Tensor& dones, double gamma, double lambda_,
                             const std::optional<Tensor>& seed, std::int64_t time_axis) {
    return episodic_sum(inputs, dones, seed, params(estimator::episodic_sum, gamma, lambda_, "lambda_"),
                        time_axis);
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
    m.def("discounted_returns(Tensor rewards, Tensor terminated, Tensor? truncated=None, "
          "Tensor? last_value=None, Tensor? bootstrap_values=None, float gamma=0.99, "
          "int time_axis=-1) -> Tensor");
    m.def("n_step_returns(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
          "Tensor? last_value=None, Tensor? bootstrap_values=None, int n=1, float gamma=0.99, "
          "float lambda_=1.0, int time_axis=-1) -> Tensor");
    m.def("retrace(Tensor rewards, Tensor q_values, Tensor next_values, Tensor terminated, "
          "Tensor? truncated=None, Tensor? target_probs=None, Tensor? behaviour_probs=None, "
          "bool log_probs=False, float gamma=0.99, float lambda_=1.0, float c_clip=1.0, "
          "int time_axis=-1) -> (Tensor returns, Tensor advantages)");
    m.def("q_lambda(Tensor rewards, Tensor q_values, Tensor next_values, Tensor terminated, "
          "Tensor? truncated=None, Tensor? greedy=None, float gamma=0.99, float lambda_=0.9, "
          "int time_axis=-1) -> (Tensor returns, Tensor advantages)");
    m.def("episodic_cumsum(Tensor inputs, Tensor dones, Tensor? seed=None, bool reset_at_start=False, "
          "int time_axis=-1) -> Tensor");
    m.def("eligibility_traces(Tensor inputs, Tensor dones, float gamma, float lambda_, "
          "Tensor? seed=None, int time_axis=-1) -> Tensor");
}

// One kernel for CPU and CUDA (HIP under ROCm torch): the core routes by device.
#define PUFF_CONVENTION_IMPLS(m)                                                   \
    m.impl("gae", TORCH_BOX(&puffadv::torch_ops::gae_op));                         \
    m.impl("td_lambda_returns", TORCH_BOX(&puffadv::torch_ops::td_lambda_op));     \
    m.impl("vtrace", TORCH_BOX(&puffadv::torch_ops::vtrace_op));                   \
    m.impl("discounted_returns", TORCH_BOX(&puffadv::torch_ops::discounted_returns_op)); \
    m.impl("n_step_returns", TORCH_BOX(&puffadv::torch_ops::n_step_returns_op));   \
    m.impl("retrace", TORCH_BOX(&puffadv::torch_ops::retrace_op));                 \
    m.impl("q_lambda", TORCH_BOX(&puffadv::torch_ops::q_lambda_op));               \
    m.impl("episodic_cumsum", TORCH_BOX(&puffadv::torch_ops::episodic_cumsum_op)); \
    m.impl("eligibility_traces", TORCH_BOX(&puffadv::torch_ops::eligibility_traces_op))

STABLE_TORCH_LIBRARY_IMPL(puffadv, CPU, m) { PUFF_CONVENTION_IMPLS(m); }
STABLE_TORCH_LIBRARY_IMPL(puffadv, CUDA, m) { PUFF_CONVENTION_IMPLS(m); }
