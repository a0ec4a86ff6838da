// torch.ops.puffadv's estimator operators, one row each: name, schema (written
// once, here), the core's kind, what each schema argument is, what it returns.
// One kernel (ops.cpp) serves every row on the CPU and CUDA keys; adding an
// estimator's operator is one more row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <puffadv/conventions.hpp>

namespace puffadv::torch_ops {

/// What one argument of a schema is. Tensors first, by their role in the
/// core's call (detail::argument_role's order, which is also the order their
/// errors come in); then the scalars.
enum class arg : std::uint8_t {
    rewards, values, terminated, truncated, last_value, bootstrap_values, importance,
    next_values, target_probs, behaviour_probs, greedy, decay,
    gamma_steps, lambda_steps,  // per-step gamma_t and lambda_t (optional tensors, last in each schema)
    sample_mask,
    advantages,  // an output the caller passes (the in-place op)
    gamma, lambda, rho_clip, c_clip, rho_pg_clip, n, log_probs, reset_at_start, time_axis,
    reverse,  // linear_recurrence's direction
    alpha,  // vtrace: leaky V-trace's mix (issue 29)
};
inline constexpr std::size_t tensor_roles = static_cast<std::size_t>(arg::advantages) + 1;
constexpr bool is_tensor(arg a) { return static_cast<std::size_t>(a) < tensor_roles; }

struct op_argument {
    arg what = arg::rewards;
    bool optional = false;  // `Tensor?` in the schema: None is an absent array
    constexpr op_argument() = default;
    constexpr op_argument(arg a, bool is_optional = false) : what(a), optional(is_optional) {}
};
constexpr op_argument optional(arg a) { return {a, true}; }

/// What an op returns, in the schema's order: fresh tensors shaped like its shape tensor.
enum class result : std::uint8_t {
    advantages,  // the kind's A_t (vtrace: pg advantages; episodic sums: their sums)
    returns,     // the fused returns (vtrace: vs)
};

template <typename T, std::size_t Capacity>
struct fixed_list {
    T items[Capacity]{};
    std::size_t size = 0;
    constexpr fixed_list(std::initializer_list<T> list) {
        for (const T& item : list) items[size++] = item;
    }
    constexpr fixed_list(const fixed_list& head, std::initializer_list<T> tail) : fixed_list(head) {
        for (const T& item : tail) items[size++] = item;
    }
    constexpr const T* begin() const { return items; }
    constexpr const T* end() const { return items + size; }
};

using op_arguments = fixed_list<op_argument, 20>;

struct op_spec {
    const char* name;
    const char* schema;
    estimator kind;
    /// The outputs are shaped like this tensor; its device runs the call; its
    /// errors come first.
    arg shape_of;
    /// Valid GPU tensors without a usable GPU backend: computed on the host (the
    /// core's fallback policy) or refused, saying which functions fall back.
    bool host_fallback;
    op_arguments arguments;
    fixed_list<result, 2> results;
};

namespace table {  // argument lists that several rows begin with
constexpr op_argument truncated_ = optional(arg::truncated), last_value_ = optional(arg::last_value),
                      bootstrap_ = optional(arg::bootstrap_values);
/// The state-value estimators' arrays (n-step returns take no importance).
constexpr op_arguments value_inputs = {arg::rewards,   arg::values,  arg::terminated,
                                       truncated_,     last_value_,  bootstrap_};
constexpr op_arguments off_policy_value_inputs = {value_inputs, {optional(arg::importance)}};
/// Issue 29's arrays, appended after time_axis so that every earlier argument keeps its place.
constexpr op_argument next_values_ = optional(arg::next_values), sample_mask_ = optional(arg::sample_mask);
/// The puff advantage's inputs (PufferLib's order).
constexpr op_arguments puff_inputs = {arg::values, arg::rewards, arg::terminated, arg::importance};
}  // namespace table

// clang-format off
inline constexpr op_spec op_table[] = {
    // PufferLib's torch.ops.pufferlib.compute_puff_advantage, character for character.
    {"compute_puff_advantage",
     "compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
     "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
     "float rho_clip, float c_clip) -> ()",
     estimator::puff_advantage, arg::values, true,
     {table::puff_inputs, {arg::advantages, arg::gamma, arg::lambda, arg::rho_clip, arg::c_clip}},
     {}},
    // Functional form for torch.compile: nothing mutated, and `gae_lambda`
    // because tracing passes arguments by name, which `lambda=` cannot be.
    {"puff_advantage",
     "puff_advantage(Tensor values, Tensor rewards, Tensor dones, Tensor importance, "
     "float gamma, float gae_lambda, float rho_clip, float c_clip) -> Tensor",
     estimator::puff_advantage, arg::values, true,
     {table::puff_inputs, {arg::gamma, arg::lambda, arg::rho_clip, arg::c_clip}},
     {result::advantages}},
    // The estimator family: Tensor? arguments are the optional arrays.
    {"gae",
     "gae(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
     "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
     "float gamma=0.99, float gae_lambda=0.95, float rho_clip=1.0, float c_clip=1.0, "
     "int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None, Tensor? next_values=None) "
     "-> (Tensor advantages, Tensor returns)",
     estimator::gae, arg::rewards, false,
     {table::off_policy_value_inputs, {arg::gamma, arg::lambda, arg::rho_clip, arg::c_clip, arg::time_axis,
      optional(arg::gamma_steps), optional(arg::lambda_steps), table::next_values_}},
     {result::advantages, result::returns}},
    {"td_lambda_returns",
     "td_lambda_returns(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
     "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
     "float gamma=0.99, float lambda_=0.95, float rho_clip=1.0, float c_clip=1.0, "
     "int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None, Tensor? next_values=None) -> Tensor",
     estimator::td_lambda, arg::rewards, false,
     {table::off_policy_value_inputs, {arg::gamma, arg::lambda, arg::rho_clip, arg::c_clip, arg::time_axis,
      optional(arg::gamma_steps), optional(arg::lambda_steps), table::next_values_}},
     {result::returns}},
    {"vtrace",
     "vtrace(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
     "Tensor? last_value=None, Tensor? bootstrap_values=None, Tensor? importance=None, "
     "float gamma=0.99, float lambda_=1.0, float rho_clip=1.0, float c_clip=1.0, "
     "float rho_pg_clip=1.0, int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None, "
     "Tensor? next_values=None, Tensor? sample_mask=None, float alpha=1.0) -> (Tensor vs, Tensor pg_advantages)",
     estimator::vtrace, arg::rewards, false,
     {table::off_policy_value_inputs,
      {arg::gamma, arg::lambda, arg::rho_clip, arg::c_clip, arg::rho_pg_clip, arg::time_axis,
       optional(arg::gamma_steps), optional(arg::lambda_steps), table::next_values_, table::sample_mask_, arg::alpha}},
     {result::returns, result::advantages}},
    // lambda is not read: the returns-to-go are TD(1) on zero values.
    {"discounted_returns",
     "discounted_returns(Tensor rewards, Tensor terminated, Tensor? truncated=None, "
     "Tensor? last_value=None, Tensor? bootstrap_values=None, float gamma=0.99, "
     "int? time_axis=None, Tensor? gamma_steps=None) -> Tensor",
     estimator::discounted_returns, arg::rewards, false,
     {arg::rewards, arg::terminated, table::truncated_, table::last_value_, table::bootstrap_, arg::gamma,
      arg::time_axis, optional(arg::gamma_steps)},
     {result::returns}},
    {"n_step_returns",
     "n_step_returns(Tensor rewards, Tensor values, Tensor terminated, Tensor? truncated=None, "
     "Tensor? last_value=None, Tensor? bootstrap_values=None, int n=1, float gamma=0.99, "
     "float lambda_=1.0, int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None, "
     "Tensor? next_values=None) -> Tensor",
     estimator::n_step_returns, arg::rewards, false,
     {table::value_inputs, {arg::n, arg::gamma, arg::lambda, arg::time_axis,
      optional(arg::gamma_steps), optional(arg::lambda_steps), table::next_values_}},
     {result::returns}},
    {"retrace",
     "retrace(Tensor rewards, Tensor q_values, Tensor next_values, Tensor terminated, "
     "Tensor? truncated=None, Tensor? target_probs=None, Tensor? behaviour_probs=None, "
     "bool log_probs=False, float gamma=0.99, float lambda_=1.0, float c_clip=1.0, "
     "int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None) "
     "-> (Tensor returns, Tensor advantages)",
     estimator::retrace, arg::rewards, false,
     {arg::rewards, arg::values, arg::next_values, arg::terminated, table::truncated_, optional(arg::target_probs),
      optional(arg::behaviour_probs), arg::log_probs, arg::gamma, arg::lambda, arg::c_clip, arg::time_axis,
      optional(arg::gamma_steps), optional(arg::lambda_steps)},
     {result::returns, result::advantages}},
    {"q_lambda",
     "q_lambda(Tensor rewards, Tensor q_values, Tensor next_values, Tensor terminated, "
     "Tensor? truncated=None, Tensor? greedy=None, float gamma=0.99, float lambda_=0.9, "
     "int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None) "
     "-> (Tensor returns, Tensor advantages)",
     estimator::q_lambda, arg::rewards, false,
     {arg::rewards, arg::values, arg::next_values, arg::terminated, table::truncated_, optional(arg::greedy),
      arg::gamma, arg::lambda, arg::time_axis, optional(arg::gamma_steps), optional(arg::lambda_steps)},
     {result::returns, result::advantages}},
    // episodic_sum: C_t = inputs_t + gamma lambda (1 - reset_t) C_{t-1}; `seed` is C_{-1}.
    {"episodic_cumsum",
     "episodic_cumsum(Tensor inputs, Tensor dones, Tensor? seed=None, bool reset_at_start=False, "
     "int? time_axis=None) -> Tensor",
     estimator::episodic_sum, arg::rewards, false,
     {arg::rewards, arg::terminated, table::last_value_, arg::reset_at_start, arg::time_axis},
     {result::returns}},
    {"eligibility_traces",
     "eligibility_traces(Tensor inputs, Tensor dones, float gamma, float lambda_, "
     "Tensor? seed=None, int? time_axis=None, Tensor? gamma_steps=None, Tensor? lambda_steps=None) -> Tensor",
     estimator::episodic_sum, arg::rewards, false,
     {arg::rewards, arg::terminated, arg::gamma, arg::lambda, table::last_value_, arg::time_axis,
      optional(arg::gamma_steps), optional(arg::lambda_steps)},
     {result::returns}},
    // The engine's scan: y_t = inputs_t + decay_t y_{t-1} (reverse: y_{t+1}); `seed` is the y
    // outside the row. Direction and layout are required: neither is ever guessed.
    {"linear_recurrence",
     "linear_recurrence(Tensor inputs, Tensor decay, Tensor? seed=None, *, bool reverse, int time_axis) -> Tensor",
     estimator::linear_recurrence, arg::rewards, false,
     {arg::rewards, arg::decay, table::last_value_, arg::reverse, arg::time_axis},
     {result::returns}},
};
// clang-format on

}  // namespace puffadv::torch_ops
