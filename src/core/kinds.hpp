// The one table of kinds: for every estimator (the puff advantage included),
// which arrays it reads, requires and refuses, the names its caller knows them
// by, its outputs and its scalars. The argument check (arguments.cpp), the
// dispatch (estimate.cpp) and the bindings read this table and nothing else,
// so adding an estimator adds one entry here (kinds.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include <puffadv/conventions.hpp>

namespace puffadv::detail {

/// The arrays of a call by their part in it (standard_arrays' members). The
/// order is the order in which presence problems are reported. The Python
/// entry (`_core.estimate`) takes its arrays keyed by role_key.
enum class argument_role : std::uint8_t {
    rewards, values, terminated, truncated, last_value, bootstrap_values, importance,
    next_values, target_probs, behaviour_probs, greedy,
    decay,       // linear_recurrence's a_t
    gamma, lambda,  // per-step gamma_t and lambda_t (standard_arrays::gamma, ::lambda)
    sample_mask,  // vtrace: rlax's learnable steps
    advantages,  // the output A_t (episodic_sum's `out`)
    returns, abs_sums, sums, square_sums,  // the fused outputs, optional for every kind
};
inline constexpr int role_count = static_cast<int>(argument_role::square_sums) + 1;
inline constexpr int input_role_count = static_cast<int>(argument_role::advantages);  // the inputs come first
constexpr bool is_output(argument_role r) noexcept { return r >= argument_role::advantages; }

/// Roles whose arrays are [rows] (one value per row), not [rows, horizon].
constexpr bool is_per_row(argument_role r) noexcept {
    return r == argument_role::last_value || r == argument_role::abs_sums || r == argument_role::sums ||
           r == argument_role::square_sums;
}

/// THE map from a role to its field of standard_arrays, the one every layer
/// goes through (the argument check, the bindings, the torch and JAX layers,
/// the CPU engine): calls visit(field) with the role's field, a matrix& for
/// rewards and terminated (in every call), a std::optional<matrix>& for the
/// rest (const where `arrays` is). A new role is one line here (and its key in
/// kinds.cpp). The visitors below return nothing, so the cases agree.
template <typename Arrays, typename Visit>
constexpr void visit_field(Arrays& arrays, argument_role role, Visit&& visit) {
    using r = argument_role;
    switch (role) {
        case r::rewards: return visit(arrays.rewards);
        case r::values: return visit(arrays.values);
        case r::terminated: return visit(arrays.terminated);
        case r::truncated: return visit(arrays.truncated);
        case r::last_value: return visit(arrays.last_value);
        case r::bootstrap_values: return visit(arrays.bootstrap_values);
        case r::importance: return visit(arrays.importance);
        case r::next_values: return visit(arrays.next_values);
        case r::target_probs: return visit(arrays.target_probs);
        case r::behaviour_probs: return visit(arrays.behaviour_probs);
        case r::greedy: return visit(arrays.greedy);
        case r::decay: return visit(arrays.decay);
        case r::gamma: return visit(arrays.gamma);
        case r::lambda: return visit(arrays.lambda);
        case r::sample_mask: return visit(arrays.sample_mask);
        case r::advantages: return visit(arrays.advantages);
        case r::returns: return visit(arrays.fused.returns);
        case r::abs_sums: return visit(arrays.fused.abs_sums);
        case r::sums: return visit(arrays.fused.sums);
        case r::square_sums: return visit(arrays.fused.square_sums);
    }
}

/// The array of `role` in `arrays`, or nullptr where absent (through visit_field).
inline const matrix* array_of(const standard_arrays& arrays, argument_role role) noexcept {
    const matrix* found = nullptr;
    visit_field(arrays, role, [&found](const auto& field) {
        if constexpr (std::is_same_v<std::decay_t<decltype(field)>, matrix>) found = &field;
        else found = field ? &*field : nullptr;
    });
    return found;
}

/// Puts `view` (nullopt: none) in the field of `role` (through visit_field);
/// rewards and terminated, never absent, keep their array when `view` is none.
inline void set_array(standard_arrays& arrays, argument_role role, const std::optional<matrix>& view) {
    visit_field(arrays, role, [&view](auto& field) {
        if constexpr (std::is_same_v<std::decay_t<decltype(field)>, matrix>) {
            if (view) field = *view;
        } else {
            field = view;
        }
    });
}

/// How a kind treats an array.
enum class need : std::uint8_t {
    refused,   ///< "<kind> takes no <name> (<why>)"
    optional,
    required,  ///< the check reports "<kind> needs <name> ..." when it is absent
    both,      ///< required together with the kind's other `both` array (retrace's probabilities)
    always,    ///< an array in every call: the bindings refuse None as a TypeError
};

/// Scalars of standard_params, as bits.
enum scalar : unsigned {
    scalar_gamma = 1u << 0,
    scalar_lambda = 1u << 1,
    scalar_rho_clip = 1u << 2,
    scalar_c_clip = 1u << 3,
    scalar_rho_pg_clip = 1u << 4,
    scalar_n = 1u << 5,
    scalar_log_probs = 1u << 6,
    scalar_reset_at_start = 1u << 7,
    scalar_alpha = 1u << 8,  ///< vtrace: leaky V-trace's mix, in [0, 1]
};

/// One kind's row of the table. Arrays not listed in `inputs` are refused.
struct kind_info {
    struct use {
        argument_role role;
        need presence;  ///< refused ends the list
    };
    struct text {
        argument_role role;
        const char* value;  ///< nullptr ends the list
    };
    estimator kind;
    /// The inputs it reads, in the order the checks name them; the first is the
    /// reference whose shape and device every other array must share, and the
    /// first float input, whose dtype the others must share.
    use inputs[input_role_count + 1];
    need advantages;         ///< the [rows, horizon] output; the fused ones are optional
    bool needs_bootstrap;    ///< exactly one of last_value and bootstrap_values
    const char* dtype_rule;  ///< after "x has dtype T but <reference> has U; "
    unsigned checks;         ///< the scalars the check validates (whether or not read)
    unsigned reads;          ///< the scalars the computation reads
    /// A call with horizon 0 still reaches the backend (which writes the zero
    /// row sums); false: only when fused outputs are requested.
    bool empty_horizon_launches;
    text names[5];           ///< the caller's names where they differ from role_key
    text refusals[6];        ///< "<kind> takes no <name>" + this, where not the role's own reason
    text missing[3];         ///< "<kind>" + this, where not " needs <name> ([rows, horizon])"
    /// Derived from the above when the table is built (kinds.cpp), so that a
    /// call's lookups cost an index each: how it treats each role, and the name.
    need needs[role_count]{};
    const char* names_by_role[role_count]{};
};

/// estimator_from_name, and "puff_advantage" too (the one Python entry takes every kind).
estimator kind_from_name(const std::string& name);

/// The row of `kind`; nullptr (kind_info_of: value_error) for a value outside
/// the enum (the JAX handlers receive the kind as an integer).
const kind_info* find_kind_info(estimator kind) noexcept;
const kind_info& kind_info_of(estimator kind);

/// How `kind` treats `role`.
inline need need_of(const kind_info& info, argument_role role) noexcept {
    return info.needs[static_cast<int>(role)];
}

/// The role's key ("rewards", "values", ..., "gamma_steps", "lambda_steps", ...,
/// "square_sums"), as the Python entry names it.
const char* role_key(argument_role role) noexcept;

/// The name the caller of `kind` knows the array by, for every message
/// (episodic_sum's rewards are its "inputs", its output `out`; retrace's
/// probabilities are target_log_probs and behaviour_log_probs with log_probs).
const char* argument_name(estimator kind, argument_role role, bool log_probs = false) noexcept;
inline const char* argument_name(const standard_params& p, argument_role role) noexcept {
    if (role == argument_role::lambda && p.lambda_name) return p.lambda_name;  // gae_lambda, lambda_, ...
    return argument_name(p.kind, role, p.log_probs);
}

/// Why `kind` refuses `role`, after "<kind> takes no <name>" (possibly empty).
const char* refusal_reason(estimator kind, argument_role role) noexcept;

/// What follows the kind's name when a required array is absent (nullptr: the
/// default " needs <name> ([rows, horizon])").
const char* missing_text(estimator kind, argument_role role) noexcept;

}  // namespace puffadv::detail
