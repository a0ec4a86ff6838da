// Argument checks of the standard conventions (and of the fused outputs and
// reduced-precision dtypes, which the puff advantage shares), built from the
// blocks in checks.hpp so that every binding reports the same messages.
#include <algorithm>
#include <string>

#include "core/conventions_detail.hpp"

namespace puffadv {
namespace detail {
namespace {

argument_problem type_problem(std::string message) { return {argument_problem::type, std::move(message)}; }
argument_problem value_problem(std::string message) { return {argument_problem::value, std::move(message)}; }

// Unaligned elements are undefined behaviour on the CPU and a fault on a GPU.
argument_problem check_alignment(const matrix& m, const char* name) {
    const auto element = static_cast<std::uintptr_t>(dtype_size(m.type));
    if (m.rows > 0 && m.cols > 0 && element > 1 && reinterpret_cast<std::uintptr_t>(m.data) % element != 0)
        return value_problem(std::string(name) + " is not aligned to its " + std::to_string(element) +
                             "-byte " + dtype_name(m.type) + " elements; pass an aligned copy");
    return {};
}

}  // namespace

argument_problem check_float_input(const matrix& m, const char* name, const matrix& first,
                                   const char* first_name, const char* rule) {
    if (&m == &first) {
        if (!is_float(m.type))
            return type_problem(std::string(name) + " must be float32, float64, bfloat16 or float16, got " +
                                dtype_name(m.type));
        return check_alignment(m, name);
    }
    if (m.type != first.type)
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) + " but " + first_name +
                            " has " + dtype_name(first.type) + "; " + rule);
    return check_alignment(m, name);
}

argument_problem check_flag_input(const matrix& m, const char* name, dtype float_type) {
    if (m.type != dtype::boolean && m.type != dtype::uint8 && m.type != float_type)
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) +
                            "; expected bool, uint8 or the float inputs' dtype " + dtype_name(float_type));
    return check_alignment(m, name);
}

argument_problem check_float_output(const matrix& m, const char* name, dtype float_type) {
    if (m.type != float_type && !(is_reduced(float_type) && m.type == dtype::float32)) {
        std::string expected = dtype_name(float_type);
        if (is_reduced(float_type)) expected += " or float32";
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) + "; expected " + expected);
    }
    return check_alignment(m, name);
}

argument_problem check_vector_layout(const matrix& m, const char* name, const matrix& ref,
                                     const char* ref_name) {
    if (m.ndim != 1) {
        return value_problem(join(name, " must be a 1-D array of ", ref.rows, " (one per row of ",
                                  ref_name, "), got a ", m.ndim, "-D array"));
    }
    if (m.rows != ref.rows) {
        return value_problem(join(name, " has ", m.rows, " elements but ", ref_name, " has ",
                                  ref.rows, " rows; pass one per row"));
    }
    if (m.data == nullptr && m.rows > 0) return value_problem(std::string(name) + " has no data (null pointer)");
    if (!same_device(m.device, ref.device))
        return value_problem(std::string(name) + " is on " + describe_device(m.device) + " but " + ref_name +
                             " is on " + describe_device(ref.device) + "; all arrays must be on one device");
    return check_alignment(m, name);
}

argument_problem check_fused_outputs(const fused_outputs& f, const matrix& ref, const char* ref_name,
                                     dtype float_type, named_arrays inputs, named_arrays outputs) {
    // Every output must be clear of every input and of every other output.
    auto clear_of_others = [&](const matrix& out, const char* name) -> argument_problem {
        // `outputs` holds the reference input itself when a call has no advantages output.
        for (auto [other, other_name] : outputs)
            if (auto problem = check_output(out, name, {{other, other_name}}, other != &ref)) return problem;
        if (f.returns && &out != &*f.returns)
            if (auto problem = check_output(out, name, {{&*f.returns, "returns"}}, true)) return problem;
        for (auto [input, input_name] : inputs)
            if (auto problem = check_output(out, name, {{input, input_name}})) return problem;
        return check_output(out, name, {});
    };
    if (f.returns) {
        if (auto problem = check_array_layout(*f.returns, "returns", ref, ref_name)) return problem;
        if (auto problem = check_float_output(*f.returns, "returns", float_type)) return problem;
        if (auto problem = clear_of_others(*f.returns, "returns")) return problem;
    }
    const std::pair<const std::optional<matrix>*, const char*> sums[] = {
        {&f.abs_sums, "abs_sums"}, {&f.sums, "sums"}, {&f.square_sums, "square_sums"}};
    for (auto [sum, name] : sums) {
        if (!*sum) continue;
        const matrix& m = **sum;
        if (auto problem = check_vector_layout(m, name, ref, ref_name)) return problem;
        if (m.type != dtype::float32 && m.type != dtype::float64)
            return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) +
                                "; expected float32 or float64");
        if (auto problem = clear_of_others(m, name)) return problem;
        for (auto [other, other_name] : sums)
            if (other != sum && *other)
                if (auto problem = check_output(m, name, {{&**other, other_name}}, true)) return problem;
    }
    return {};
}

bool puff_needs_general_kernel(const puff_arrays& a) noexcept {
    const dtype t = a.values.type;
    return a.fused.any() || is_reduced(t) || a.dones.type != t || a.advantages.type != t;
}

}  // namespace detail

const char* estimator_name(estimator e) noexcept {
    switch (e) {
        case estimator::gae: return "gae";
        case estimator::td_lambda: return "td_lambda";
        case estimator::vtrace: return "vtrace";
        case estimator::discounted_returns: return "discounted_returns";
        case estimator::retrace: return "retrace";
        case estimator::q_lambda: return "q_lambda";
        case estimator::n_step_returns: return "n_step_returns";
        case estimator::episodic_sum: return "episodic_sum";
        case estimator::puff_advantage: return "puff_advantage";
    }
    return "unknown";
}

estimator estimator_from_name(const std::string& name) {
    constexpr estimator all[] = {estimator::gae,         estimator::td_lambda,      estimator::vtrace,
                                 estimator::discounted_returns, estimator::retrace, estimator::q_lambda,
                                 estimator::n_step_returns, estimator::episodic_sum};
    std::string known;
    for (estimator e : all) {
        if (name == estimator_name(e)) return e;
        known += known.empty() ? "'" : ", '";
        known += estimator_name(e);
        known += "'";
    }
    throw value_error("kind must be one of " + known + ", got '" + name + "'");
}

namespace detail {
std::string time_axis_message(const char* name, const std::string& got) {
    return join("time_axis must be 0 or -2 (time-major [T, B]) or 1 or -1 (batch-major [B, T]) for the 2-D ",
                name, ", got ", got);
}
}  // namespace detail

argument_problem apply_time_axis(matrix& m, std::int64_t time_axis, const char* name) {
    if (m.ndim != 2) return {};
    if (time_axis < -2 || time_axis > 1)
        return {argument_problem::value, detail::time_axis_message(name, std::to_string(time_axis))};
    if (time_axis == 0 || time_axis == -2) {
        std::swap(m.rows, m.cols);
        std::swap(m.row_stride, m.col_stride);
    }
    return {};
}

argument_problem apply_time_axis(standard_arrays& a, std::int64_t time_axis) {
    const std::pair<matrix*, const char*> required[] = {{&a.rewards, "rewards"}, {&a.terminated, "terminated"}};
    for (auto [m, name] : required)
        if (auto problem = apply_time_axis(*m, time_axis, name)) return problem;
    const std::pair<std::optional<matrix>*, const char*> optional[] = {
        {&a.values, "values"},
        {&a.truncated, "truncated"},
        {&a.bootstrap_values, "bootstrap_values"},
        {&a.importance, "importance"},
        {&a.next_values, "next_values"},
        {&a.target_probs, "target_probs"},
        {&a.behaviour_probs, "behaviour_probs"},
        {&a.greedy, "greedy"},
        {&a.advantages, "advantages"},
        {&a.fused.returns, "returns"}};
    for (auto [m, name] : optional)
        if (*m)
            if (auto problem = apply_time_axis(**m, time_axis, name)) return problem;
    return {};
}

namespace detail {

const char* argument_name(estimator kind, argument_role role, bool log_probs) noexcept {
    const bool episodic = kind == estimator::episodic_sum;
    const bool action_values = kind == estimator::retrace || kind == estimator::q_lambda;
    switch (role) {
        case argument_role::rewards: return episodic ? "inputs" : "rewards";
        case argument_role::values: return action_values ? "q_values" : "values";
        case argument_role::terminated: return episodic ? "dones" : "terminated";
        case argument_role::truncated: return "truncated";
        case argument_role::last_value: return episodic ? "seed" : "last_value";
        case argument_role::bootstrap_values: return "bootstrap_values";
        case argument_role::importance: return "importance";
        case argument_role::next_values: return "next_values";
        case argument_role::target_probs: return log_probs ? "target_log_probs" : "target_probs";
        case argument_role::behaviour_probs: return log_probs ? "behaviour_log_probs" : "behaviour_probs";
        case argument_role::greedy: return "greedy";
        case argument_role::advantages: return episodic ? "out" : "advantages";
    }
    return "?";
}

namespace {

enum class need : std::uint8_t { refused, optional, required };

// Which optional arrays each kind reads (rewards and terminated always). The
// bootstrap pair has its own rules on top: see find_standard_problem.
struct kind_rules {
    need values, truncated, last_value, bootstrap_values, importance, next_values, probs, greedy;
    bool needs_bootstrap;  // exactly one of last_value and bootstrap_values
};

kind_rules rules_of(estimator kind) {
    using n = need;
    switch (kind) {
        case estimator::gae:
        case estimator::td_lambda:
        case estimator::vtrace:
            return {n::required, n::optional, n::optional, n::optional, n::optional,
                    n::refused,  n::refused,  n::refused,  true};
        case estimator::n_step_returns:
            return {n::required, n::optional, n::optional, n::optional, n::refused,
                    n::refused,  n::refused,  n::refused,  true};
        case estimator::discounted_returns:  // the bootstrap is optional (absent: 0)
            return {n::refused, n::optional, n::optional, n::optional, n::refused,
                    n::refused, n::refused,  n::refused,  false};
        case estimator::retrace:
            return {n::required, n::optional, n::refused,  n::refused, n::refused,
                    n::required, n::required, n::refused, false};
        case estimator::q_lambda:
            return {n::required, n::optional, n::refused, n::refused, n::refused,
                    n::required, n::refused,  n::optional, false};
        case estimator::episodic_sum:
            return {n::refused, n::refused, n::optional, n::refused, n::refused,
                    n::refused, n::refused, n::refused,  false};
    }
    return {};
}

// Why a kind refuses an array, after "<kind> takes no <name>".
const char* refusal_reason(estimator kind, argument_role role) {
    switch (role) {
        case argument_role::values:
            return kind == estimator::episodic_sum ? " (it sums its inputs)"
                                                   : " (returns-to-go read only rewards and the bootstrap)";
        case argument_role::last_value:
        case argument_role::bootstrap_values:
            if (kind == estimator::retrace || kind == estimator::q_lambda)
                return " (next_values is its bootstrap at every step)";
            return kind == estimator::episodic_sum ? " (a segment ends at dones; pass seed for C_{-1})" : "";
        case argument_role::truncated:
            return " (a segment ends at any of dones)";
        case argument_role::importance:
            return kind == estimator::retrace ? " (target_probs and behaviour_probs give its ratios)"
                                              : " (only gae, td_lambda and vtrace take importance ratios)";
        case argument_role::next_values: return " (only retrace and q_lambda take next_values)";
        case argument_role::target_probs:
        case argument_role::behaviour_probs: return " (only retrace takes probabilities)";
        case argument_role::greedy: return " (only q_lambda takes greedy flags)";
        default: return "";
    }
}

}  // namespace
}  // namespace detail

argument_problem find_standard_problem(const standard_arrays& a, const standard_params& p) {
    using namespace detail;
    using role = argument_role;
    const estimator kind = p.kind;
    auto name = [&p](role r) { return argument_name(p, r); };
    const kind_rules rules = rules_of(kind);

    // Presence: what this kind needs and what it refuses.
    const std::pair<const std::optional<matrix>*, role> optional_inputs[] = {
        {&a.values, role::values},           {&a.truncated, role::truncated},
        {&a.last_value, role::last_value},   {&a.bootstrap_values, role::bootstrap_values},
        {&a.importance, role::importance},   {&a.next_values, role::next_values},
        {&a.target_probs, role::target_probs}, {&a.behaviour_probs, role::behaviour_probs},
        {&a.greedy, role::greedy}};
    auto need_of = [&rules](role r) {
        switch (r) {
            case role::values: return rules.values;
            case role::truncated: return rules.truncated;
            case role::last_value: return rules.last_value;
            case role::bootstrap_values: return rules.bootstrap_values;
            case role::importance: return rules.importance;
            case role::next_values: return rules.next_values;
            case role::target_probs:
            case role::behaviour_probs: return rules.probs;
            case role::greedy: return rules.greedy;
            default: return need::required;
        }
    };
    for (auto [m, r] : optional_inputs) {
        const need n = need_of(r);
        if (n == need::refused && *m)
            return value_problem(join(estimator_name(kind), " takes no ", name(r), refusal_reason(kind, r)));
        if (n == need::required && !*m && r != role::target_probs && r != role::behaviour_probs) {
            if (r == role::next_values)
                return value_problem(join(estimator_name(kind), " needs next_values ([rows, horizon]: ",
                                          kind == estimator::retrace ? "E_pi[Q(s_{t+1}, .)]" : "max_a Q(s_{t+1}, a)",
                                          ", the bootstrap of every step)"));
            return value_problem(join(estimator_name(kind), " needs ", name(r), " ([rows, horizon])"));
        }
    }
    if (rules.probs == need::required && (!a.target_probs || !a.behaviour_probs)) {
        if (a.target_probs || a.behaviour_probs)
            return value_problem(join("pass both ", name(role::target_probs), " and ",
                                      name(role::behaviour_probs), ", got only ",
                                      name(a.target_probs ? role::target_probs : role::behaviour_probs)));
        return value_problem(join(estimator_name(kind), " needs target_probs and behaviour_probs ([rows, horizon]: "
                                  "pi(a_t|s_t) and mu(a_t|s_t) of the taken actions, or their logs with "
                                  "log_probs)"));
    }

    const matrix& ref = a.rewards;
    const char* ref_name = name(role::rewards);
    // The 2-D inputs present in this call, with their names.
    named_matrix inputs[10] = {{&a.rewards, ref_name}, {&a.terminated, name(role::terminated)}};
    std::size_t n_inputs = 2;
    for (auto [m, r] : optional_inputs)
        if (*m && r != role::last_value) inputs[n_inputs++] = {&**m, name(r)};
    for (std::size_t i = 0; i < n_inputs; ++i)
        if (auto problem = check_array_layout(*inputs[i].first, inputs[i].second, ref, ref_name)) return problem;
    if (a.last_value)
        if (auto problem = check_vector_layout(*a.last_value, name(role::last_value), ref, ref_name))
            return problem;
    const char* advantages_name = name(role::advantages);
    if (a.advantages)
        if (auto problem = check_array_layout(*a.advantages, advantages_name, ref, ref_name)) return problem;

    if (a.last_value && a.bootstrap_values)
        return value_problem("pass either last_value ([rows]: the value after the last step) or "
                             "bootstrap_values ([rows, horizon]: next-state values at truncations "
                             "and the last step), not both");
    if (rules.needs_bootstrap && !a.last_value && !a.bootstrap_values)
        return value_problem("a bootstrap is needed: pass last_value ([rows]: the value of the "
                             "observation after the last step) or bootstrap_values ([rows, horizon])");
    if (a.truncated && rules.bootstrap_values != need::refused && !a.bootstrap_values)
        return value_problem("truncated needs bootstrap_values (the value of each truncated step's "
                             "final observation, which last_value cannot give); or fold the "
                             "truncations into terminated");

    // Floats share the first float input's dtype; flags are bool, uint8 or that dtype.
    const dtype float_type = a.rewards.type;
    if (auto problem = check_float_input(a.rewards, ref_name, a.rewards, ref_name)) return problem;
    const std::pair<const std::optional<matrix>*, role> floats[] = {
        {&a.values, role::values},           {&a.last_value, role::last_value},
        {&a.bootstrap_values, role::bootstrap_values}, {&a.importance, role::importance},
        {&a.next_values, role::next_values}, {&a.target_probs, role::target_probs},
        {&a.behaviour_probs, role::behaviour_probs}};
    for (auto [m, r] : floats)
        if (*m)
            if (auto problem = check_float_input(**m, name(r), a.rewards, ref_name)) return problem;
    if (auto problem = check_flag_input(a.terminated, name(role::terminated), float_type)) return problem;
    for (auto [m, r] : {std::pair{&a.truncated, role::truncated}, std::pair{&a.greedy, role::greedy}})
        if (*m)
            if (auto problem = check_flag_input(**m, name(r), float_type)) return problem;

    // Outputs must be clear of every input, last_value included.
    named_matrix all_inputs[11];
    std::copy(inputs, inputs + n_inputs, all_inputs);
    std::size_t n_all = n_inputs;
    if (a.last_value) all_inputs[n_all++] = {&*a.last_value, name(role::last_value)};
    if (a.advantages) {
        if (auto problem = check_float_output(*a.advantages, advantages_name, float_type)) return problem;
        if (auto problem = check_output(*a.advantages, advantages_name, {all_inputs, n_all})) return problem;
    }
    // Without an advantages output, the fused outputs' "other output" is the reference input itself.
    const named_matrix outputs[] = {a.advantages ? named_matrix{&*a.advantages, advantages_name}
                                                 : named_matrix{&a.rewards, ref_name}};
    if (auto problem = check_fused_outputs(a.fused, ref, ref_name, float_type, {all_inputs, n_all}, outputs))
        return problem;
    if (!a.advantages && !a.fused.any())
        return value_problem("nothing to compute: request advantages, returns or a sum");

    if (auto problem = check_unit_interval(p.gamma, "gamma")) return problem;
    if (auto problem = check_unit_interval(p.lambda, p.lambda_name ? p.lambda_name : "lambda")) return problem;
    if (auto problem = check_non_negative(p.rho_clip, "rho_clip")) return problem;
    if (auto problem = check_non_negative(p.c_clip, "c_clip")) return problem;
    if (auto problem = check_non_negative(p.rho_pg_clip, "rho_pg_clip")) return problem;
    if (p.n < 1)
        return value_problem(join("n must be >= 1 (the number of steps in each return's window), got ", p.n));
    return {};
}

}  // namespace puffadv
