// The one argument check: every kind, the puff advantage included, is checked
// by find_problem, driven by its row of the kinds table (kinds.cpp), so every
// binding reports the same messages. find_puff_problem and
// find_standard_problem are its public faces.
#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "core/backends.hpp"  // as_standard_call: the puff advantage as one more kind
#include "core/checks.hpp"
#include "core/conventions_detail.hpp"
#include "core/estimate.hpp"
#include "core/kinds.hpp"

namespace puffadv {
namespace detail {
namespace {

argument_problem value_problem(std::string message) { return {argument_problem::value, std::move(message)}; }

// The call's arrays by role; null where absent.
struct by_role {
    const matrix* items[role_count] = {};
    by_role(const standard_arrays& a, bool refuses_terminated) {
        for (int r = 0; r < role_count; ++r) items[r] = array_of(a, static_cast<argument_role>(r));
        // A kind that reads no flags (linear_recurrence) leaves terminated empty: absent.
        if (refuses_terminated && !a.terminated.data) items[static_cast<int>(argument_role::terminated)] = nullptr;
    }
    const matrix* operator[](argument_role r) const { return items[static_cast<int>(r)]; }
};

bool is_flag(argument_role r) {
    return r == argument_role::terminated || r == argument_role::truncated || r == argument_role::greedy ||
           r == argument_role::sample_mask;
}

// What this kind needs and what it refuses, in role order.
argument_problem check_presence(const by_role& arrays, const kind_info& info, const standard_params& p) {
    const char* kind = estimator_name(p.kind);
    auto name = [&p](argument_role r) { return argument_name(p, r); };
    argument_role pair[2] = {};
    int paired = 0;
    for (int i = 0; i < input_role_count; ++i) {
        const auto r = static_cast<argument_role>(i);
        const need n = need_of(info, r);
        if (n == need::both && paired < 2) pair[paired++] = r;
        if (n == need::refused && arrays[r])
            return value_problem(join(kind, " takes no ", name(r), refusal_reason(p.kind, r)));
        if ((n == need::required || n == need::always) && !arrays[r]) {
            if (const char* text = missing_text(p.kind, r)) return value_problem(join(kind, text));
            return value_problem(join(kind, " needs ", name(r), " ([rows, horizon])"));
        }
    }
    if (need_of(info, argument_role::advantages) == need::always && !arrays[argument_role::advantages])
        return value_problem(join(kind, " needs ", name(argument_role::advantages), " ([rows, horizon])"));
    if (paired == 2 && (!arrays[pair[0]] || !arrays[pair[1]])) {
        if (arrays[pair[0]] || arrays[pair[1]])
            return value_problem(join("pass both ", name(pair[0]), " and ", name(pair[1]), ", got only ",
                                      name(arrays[pair[0]] ? pair[0] : pair[1])));
        return value_problem(join(kind, missing_text(p.kind, pair[0])));
    }
    return {};
}

// next_values is the bootstrap of every step: it replaces the bootstrap pair,
// and truncated then only cuts the recursion.
argument_problem check_next_values(const standard_arrays& a, const standard_params& p) {
    const char* kind = estimator_name(p.kind);
    for (const auto& [m, role] : {std::pair{&a.last_value, argument_role::last_value},
                                  std::pair{&a.bootstrap_values, argument_role::bootstrap_values}})
        if (*m)
            return value_problem(join(kind, " takes no ", argument_name(p, role),
                                      " with next_values (next_values is its bootstrap at every step)"));
    // With next_values TD(lambda) scans the lambda-return itself (TorchRL's and
    // rlax's form), which weighs no importance ratios.
    if (p.kind == estimator::td_lambda && a.importance)
        return value_problem("td_lambda takes no importance with next_values (it then scans the "
                             "lambda-return r_t + gamma (1 - terminated_t) [(1 - lambda) next_values_t + "
                             "lambda G_{t+1}], which has no ratios; vtrace gives off-policy targets)");
    return {};
}

// The bootstrap pair's rules, on top of what each kind takes.
argument_problem check_bootstrap(const standard_arrays& a, const kind_info& info, const standard_params& p) {
    if (a.next_values && need_of(info, argument_role::bootstrap_values) != need::refused)
        return check_next_values(a, p);
    if (a.last_value && a.bootstrap_values)
        return value_problem("pass either last_value ([rows]: the value after the last step) or "
                             "bootstrap_values ([rows, horizon]: next-state values at truncations "
                             "and the last step), not both");
    if (info.needs_bootstrap && !a.last_value && !a.bootstrap_values)
        return value_problem("a bootstrap is needed: pass last_value ([rows]: the value of the "
                             "observation after the last step) or bootstrap_values ([rows, horizon])");
    if (a.truncated && need_of(info, argument_role::bootstrap_values) != need::refused && !a.bootstrap_values)
        return value_problem("truncated needs bootstrap_values (the value of each truncated step's "
                             "final observation, which last_value cannot give); or fold the "
                             "truncations into terminated");
    return {};
}

argument_problem check_scalars(const standard_params& p, unsigned checks) {
    if (auto problem = check_unit_interval(p.gamma, "gamma")) return problem;
    if (auto problem = check_unit_interval(p.lambda, p.lambda_name ? p.lambda_name : "lambda")) return problem;
    if (auto problem = check_non_negative(p.rho_clip, "rho_clip")) return problem;
    if (auto problem = check_non_negative(p.c_clip, "c_clip")) return problem;
    if (checks & scalar_rho_pg_clip)
        if (auto problem = check_non_negative(p.rho_pg_clip, "rho_pg_clip")) return problem;
    if (checks & scalar_alpha)
        if (auto problem = check_unit_interval(p.alpha, "alpha")) return problem;
    if ((checks & scalar_n) && p.n < 1)
        return value_problem(join("n must be >= 1 (the number of steps in each return's window), got ", p.n));
    return {};
}

}  // namespace

argument_problem find_problem(const standard_arrays& a, const standard_params& p) {
    const kind_info* known = find_kind_info(p.kind);
    if (!known) return value_problem(join("unknown estimator kind ", static_cast<int>(p.kind)));
    const kind_info& info = *known;
    const by_role arrays(a, need_of(info, argument_role::terminated) == need::refused);
    if (auto problem = check_presence(arrays, info, p)) return problem;

    // The inputs present, in the kind's order: the first is the reference for
    // shapes, devices and the float dtype; last_value, 1-D, is checked apart.
    const argument_role ref_role = info.inputs[0].role;
    const matrix& ref = *arrays[ref_role];
    const char* ref_name = argument_name(p, ref_role);
    named_matrix inputs[input_role_count];
    argument_role roles[input_role_count];
    std::size_t n_inputs = 0;
    for (const kind_info::use& u : info.inputs) {
        if (u.presence == need::refused) break;
        if (arrays[u.role] && u.role != argument_role::last_value) {
            roles[n_inputs] = u.role;
            inputs[n_inputs++] = {arrays[u.role], argument_name(p, u.role)};
        }
    }
    for (std::size_t i = 0; i < n_inputs; ++i)
        if (auto problem = check_array_layout(*inputs[i].first, inputs[i].second, ref, ref_name)) return problem;
    const char* last_value_name = argument_name(p, argument_role::last_value);
    if (a.last_value)
        if (auto problem = check_vector_layout(*a.last_value, last_value_name, ref, ref_name)) return problem;
    const char* advantages_name = argument_name(p, argument_role::advantages);
    if (a.advantages)
        if (auto problem = check_array_layout(*a.advantages, advantages_name, ref, ref_name)) return problem;

    if (auto problem = check_bootstrap(a, info, p)) return problem;

    // Floats share the reference's dtype (last_value among them, in its place in
    // the kind's order); flags are bool, uint8 or that dtype.
    const dtype float_type = ref.type;
    for (const kind_info::use& u : info.inputs) {
        if (u.presence == need::refused) break;
        if (arrays[u.role] && !is_flag(u.role))
            if (auto problem = check_float_input(*arrays[u.role], argument_name(p, u.role), ref, ref_name,
                                                 info.dtype_rule))
                return problem;
    }
    for (std::size_t i = 0; i < n_inputs; ++i)
        if (is_flag(roles[i]))
            if (auto problem = check_flag_input(*inputs[i].first, inputs[i].second, float_type)) return problem;

    // Outputs must be clear of every input, last_value included.
    named_matrix all_inputs[input_role_count];
    std::copy(inputs, inputs + n_inputs, all_inputs);
    std::size_t n_all = n_inputs;
    if (a.last_value) all_inputs[n_all++] = {&*a.last_value, last_value_name};
    if (a.advantages) {
        if (auto problem = check_float_output(*a.advantages, advantages_name, float_type)) return problem;
        if (auto problem = check_output(*a.advantages, advantages_name, {all_inputs, n_all})) return problem;
    }
    // Without an advantages output, the fused outputs' "other output" is the reference input itself.
    const named_matrix outputs[] = {a.advantages ? named_matrix{&*a.advantages, advantages_name}
                                                 : named_matrix{&ref, ref_name}};
    if (auto problem = check_fused_outputs(a.fused, ref, ref_name, float_type, {all_inputs, n_all}, outputs))
        return problem;
    if (!a.advantages && !a.fused.any())
        return value_problem("nothing to compute: request advantages, returns or a sum");
    return check_scalars(p, info.checks);
}

std::string time_axis_message(const char* name, const std::string& got) {
    return join("time_axis must be 0 or -2 (time-major [T, B]) or 1 or -1 (batch-major [B, T]) for the 2-D ",
                name, ", got ", got);
}

std::string time_axis_required_message(const char* function) {
    return join(function, "() needs time_axis, which has no default: time_axis=0 for time-major arrays "
                "([T, B] or [T, *B], as SB3, CleanRL and skrl store them) or time_axis=-1 for batch-major "
                "ones ([B, T] or [*B, T], as PufferLib and TorchRL store them; -2 for [*B, T, 1])");
}

}  // namespace detail

argument_problem find_standard_problem(const standard_arrays& arrays, const standard_params& params) {
    return detail::find_problem(arrays, params);
}

argument_problem find_puff_problem(const puff_arrays& arrays, const puff_params& params) {
    return detail::find_problem(detail::as_standard_call(arrays), detail::as_standard_params(params));
}

void check_puff_arguments(const puff_arrays& arrays, const puff_params& params) {
    detail::throw_problem(find_puff_problem(arrays, params));
}

argument_problem apply_time_axis(matrix& m, std::int64_t time_axis, const char* name) {
    if (m.ndim != 2) return {};
    if (time_axis < -2 || time_axis > 1)
        return {argument_problem::value, detail::time_axis_message(name, std::to_string(time_axis))};
    if (time_axis == 0 || time_axis == -2) {
        std::swap(m.rows, m.cols);
        std::swap(m.row_stride, m.col_stride);
        m.time_major = true;
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
        {&a.decay, "decay"},
        {&a.gamma, "gamma"},
        {&a.lambda, "lambda"},
        {&a.sample_mask, "sample_mask"},
        {&a.advantages, "advantages"},
        {&a.fused.returns, "returns"}};
    for (auto [m, name] : optional)
        if (*m)
            if (auto problem = apply_time_axis(**m, time_axis, name)) return problem;
    return {};
}

namespace detail {

argument_problem apply_time_axis(standard_arrays& a, std::int64_t time_axis, const standard_params& p) {
    // rewards and terminated first (never absent), then by role: the order above,
    // each array under its kind's own name (episodic_sum's `inputs`, ...).
    const auto apply = [&](argument_role role) -> argument_problem {
        if (is_per_row(role)) return {};
        argument_problem problem;
        visit_field(a, role, [&](auto& field) {
            if constexpr (std::is_same_v<std::decay_t<decltype(field)>, matrix>)
                problem = puffadv::apply_time_axis(field, time_axis, argument_name(p, role));
            else if (field)
                problem = puffadv::apply_time_axis(*field, time_axis, argument_name(p, role));
        });
        return problem;
    };
    for (const argument_role first : {argument_role::rewards, argument_role::terminated})
        if (auto problem = apply(first)) return problem;
    for (int r = 0; r < role_count; ++r) {
        const auto role = static_cast<argument_role>(r);
        if (role == argument_role::rewards || role == argument_role::terminated) continue;
        if (auto problem = apply(role)) return problem;
    }
    return {};
}

}  // namespace detail

}  // namespace puffadv
