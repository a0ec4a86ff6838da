// Argument checks of the standard conventions (and of the fused outputs and
// reduced-precision dtypes, which the puff advantage shares), built from the
// blocks in checks.hpp so that every binding reports the same messages.
#include <string>

#include "conventions_detail.hpp"

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
                                     dtype float_type, std::initializer_list<named_matrix> inputs,
                                     std::initializer_list<named_matrix> outputs) {
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

argument_problem find_standard_problem(const standard_arrays& a, const standard_params& p) {
    using namespace detail;
    const matrix& ref = a.rewards;
    if (!a.values) return value_problem("values is required");  // per-kind rules: see the checks commit
    // The 2-D inputs present in this call, with their names.
    named_matrix inputs[6] = {{&a.rewards, "rewards"}, {&*a.values, "values"}, {&a.terminated, "terminated"}};
    int n_inputs = 3;
    if (a.truncated) inputs[n_inputs++] = {&*a.truncated, "truncated"};
    if (a.bootstrap_values) inputs[n_inputs++] = {&*a.bootstrap_values, "bootstrap_values"};
    if (a.importance) inputs[n_inputs++] = {&*a.importance, "importance"};

    for (int i = 0; i < n_inputs; ++i)
        if (auto problem = check_array_layout(*inputs[i].first, inputs[i].second, ref, "rewards")) return problem;
    if (a.last_value)
        if (auto problem = check_vector_layout(*a.last_value, "last_value", ref, "rewards")) return problem;
    if (a.advantages)
        if (auto problem = check_array_layout(*a.advantages, "advantages", ref, "rewards")) return problem;

    if (a.last_value && a.bootstrap_values)
        return value_problem("pass either last_value ([rows]: the value after the last step) or "
                             "bootstrap_values ([rows, horizon]: next-state values at truncations "
                             "and the last step), not both");
    if (!a.last_value && !a.bootstrap_values)
        return value_problem("a bootstrap is needed: pass last_value ([rows]: the value of the "
                             "observation after the last step) or bootstrap_values ([rows, horizon])");
    if (a.truncated && !a.bootstrap_values)
        return value_problem("truncated needs bootstrap_values (the value of each truncated step's "
                             "final observation, which last_value cannot give); or fold the "
                             "truncations into terminated");

    const dtype float_type = a.rewards.type;
    if (auto problem = check_float_input(a.rewards, "rewards", a.rewards, "rewards")) return problem;
    if (auto problem = check_float_input(*a.values, "values", a.rewards, "rewards")) return problem;
    if (a.last_value)
        if (auto problem = check_float_input(*a.last_value, "last_value", a.rewards, "rewards")) return problem;
    if (a.bootstrap_values)
        if (auto problem = check_float_input(*a.bootstrap_values, "bootstrap_values", a.rewards, "rewards"))
            return problem;
    if (a.importance)
        if (auto problem = check_float_input(*a.importance, "importance", a.rewards, "rewards")) return problem;
    if (auto problem = check_flag_input(a.terminated, "terminated", float_type)) return problem;
    if (a.truncated)
        if (auto problem = check_flag_input(*a.truncated, "truncated", float_type)) return problem;

    const std::initializer_list<named_matrix> all_inputs = {
        inputs[0], inputs[1], inputs[2], n_inputs > 3 ? inputs[3] : inputs[0],
        n_inputs > 4 ? inputs[4] : inputs[0], n_inputs > 5 ? inputs[5] : inputs[0],
        a.last_value ? named_matrix{&*a.last_value, "last_value"} : inputs[0]};
    if (a.advantages) {
        if (auto problem = check_float_output(*a.advantages, "advantages", float_type)) return problem;
        for (auto input : all_inputs)
            if (auto problem = check_output(*a.advantages, "advantages", {input})) return problem;
    }
    const matrix* adv = a.advantages ? &*a.advantages : &a.rewards;
    if (auto problem = check_fused_outputs(a.fused, ref, "rewards", float_type, all_inputs,
                                           {{adv, a.advantages ? "advantages" : "rewards"}}))
        return problem;
    if (!a.advantages && !a.fused.any())
        return value_problem("nothing to compute: request advantages, returns or a sum");

    if (auto problem = check_unit_interval(p.gamma, "gamma")) return problem;
    if (auto problem = check_unit_interval(p.lambda, p.lambda_name ? p.lambda_name : "lambda")) return problem;
    if (auto problem = check_non_negative(p.rho_clip, "rho_clip")) return problem;
    if (auto problem = check_non_negative(p.c_clip, "c_clip")) return problem;
    if (auto problem = check_non_negative(p.rho_pg_clip, "rho_pg_clip")) return problem;
    return {};
}

}  // namespace puffadv
