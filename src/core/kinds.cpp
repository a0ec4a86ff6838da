// The one table of kinds (kinds.hpp): every estimator's arrays, names, outputs
// and scalars, read by the argument check, the dispatch and the bindings.
#include "core/kinds.hpp"

#include <iterator>
#include <string>

namespace puffadv {
namespace detail {
namespace {

using r = argument_role;
using n = need;

constexpr unsigned clipped = scalar_gamma | scalar_lambda | scalar_rho_clip | scalar_c_clip;
// The family checks every scalar of its call, whichever its kind reads.
constexpr unsigned family_checks = clipped | scalar_rho_pg_clip | scalar_n;
// value_vjp: the forward's clips and leaky alpha, read where importance ratios are given.
constexpr unsigned value_vjp_scalars = clipped | scalar_alpha;

// kind_info's two flags, by name.
constexpr bool needs_bootstrap = true, bootstrap_not_needed = false;
constexpr bool launches_at_horizon_0 = true, launches_at_horizon_0_for_fused_only = false;

constexpr const char* family_dtypes = "the float inputs must share one dtype";
constexpr const char* next_values_bootstrap = " (next_values is its bootstrap at every step)";

// Each role's key, and its own reason for a refusal where kinds share one.
struct role_row {
    const char* key;
    const char* log_probs_name;  // with standard_params::log_probs
    const char* refusal;
    const char* caller = nullptr;  // the caller's name where it is not the key (the per-step arrays')
};
constexpr role_row roles[role_count] = {
    {"rewards", nullptr, ""},
    {"values", nullptr, ""},
    {"terminated", nullptr, ""},
    {"truncated", nullptr, ""},
    {"last_value", nullptr, ""},
    {"bootstrap_values", nullptr, ""},
    {"importance", nullptr, " (only gae, td_lambda and vtrace take importance ratios)"},
    {"next_values", nullptr,
     " (only gae, td_lambda, vtrace, n_step_returns, retrace and q_lambda take next_values)"},
    {"target_probs", "target_log_probs", " (only retrace takes probabilities)"},
    {"behaviour_probs", "behaviour_log_probs", " (only retrace takes probabilities)"},
    {"greedy", nullptr, " (only q_lambda takes greedy flags)"},
    {"decay", nullptr, " (only linear_recurrence takes decay)"},
    {"gamma_steps", nullptr, "", "gamma"},
    {"lambda_steps", nullptr, "", "lambda"},  // argument_name(params, ...) says the call's lambda_name
    {"sample_mask", nullptr, " (only vtrace takes a sample_mask)"},
    {"advantages", nullptr, ""},
    {"returns", nullptr, ""},
    {"abs_sums", nullptr, ""},
    {"sums", nullptr, ""},
    {"square_sums", nullptr, ""},
};

constexpr const char* find_text(const kind_info::text* list, std::size_t size, argument_role role) noexcept {
    for (std::size_t i = 0; i < size && list[i].value; ++i)
        if (list[i].role == role) return list[i].value;
    return nullptr;
}

// Fills a row's derived lookups from what the row says.
constexpr kind_info complete(kind_info info) {
    for (int i = 0; i < role_count; ++i) {
        const auto role = static_cast<argument_role>(i);
        need n = need::refused;
        if (role == argument_role::advantages)
            n = info.advantages;
        else if (is_output(role))
            n = need::optional;
        for (const kind_info::use& u : info.inputs) {
            if (u.presence == need::refused) break;
            if (u.role == role) n = u.presence;
        }
        info.needs[i] = n;
        const char* name = find_text(info.names, std::size(info.names), role);
        info.names_by_role[i] = name ? name : roles[i].caller ? roles[i].caller : roles[i].key;
    }
    return info;
}

// The GAE-shaped kinds differ only in their outputs' meaning (conventions.hpp);
// next_values (the bootstrap at every step) stands in for the bootstrap pair,
// and V-trace alone takes rlax's sample_mask.
constexpr kind_info clipped_kind(estimator kind, unsigned reads) {
    const bool masked = kind == estimator::vtrace;
    return complete({kind,
            {{r::rewards, n::always}, {r::terminated, n::always}, {r::values, n::required},
             {r::truncated, n::optional}, {r::last_value, n::optional}, {r::bootstrap_values, n::optional},
             {r::importance, n::optional}, {r::gamma, n::optional}, {r::lambda, n::optional},
             {r::next_values, n::optional},
             {masked ? r::sample_mask : r::rewards, masked ? n::optional : n::refused}},
            n::optional, needs_bootstrap, family_dtypes, family_checks | (masked ? scalar_alpha : 0u), reads,
            launches_at_horizon_0, {}, {}, {}});
}

// Each row: {kind, inputs in check order (the first the reference), the advantages
// output, the bootstrap rule, the dtype rule's wording, the scalars checked and
// read, horizon 0, the caller's names, refusal reasons, missing-array messages}.
constexpr kind_info table[] = {
    clipped_kind(estimator::gae, clipped),
    clipped_kind(estimator::td_lambda, clipped),
    clipped_kind(estimator::vtrace, clipped | scalar_rho_pg_clip | scalar_alpha),
    complete({estimator::discounted_returns,  // the bootstrap is optional (absent: 0)
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::truncated, n::optional},
      {r::last_value, n::optional}, {r::bootstrap_values, n::optional}, {r::gamma, n::optional}},
     n::optional, bootstrap_not_needed, family_dtypes, family_checks, scalar_gamma, launches_at_horizon_0, {},
     {{r::values, " (returns-to-go read only rewards and the bootstrap)"},
      {r::lambda, " (returns-to-go read no lambda)"}}, {}}),
    complete({estimator::retrace,
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::values, n::required},
      {r::truncated, n::optional}, {r::next_values, n::required}, {r::target_probs, n::both},
      {r::behaviour_probs, n::both}, {r::gamma, n::optional}, {r::lambda, n::optional}},
     n::optional, bootstrap_not_needed, family_dtypes, family_checks,
     scalar_gamma | scalar_lambda | scalar_c_clip | scalar_log_probs, launches_at_horizon_0,
     {{r::values, "q_values"}},
     {{r::last_value, next_values_bootstrap}, {r::bootstrap_values, next_values_bootstrap},
      {r::importance, " (target_probs and behaviour_probs give its ratios)"}},
     {{r::next_values, " needs next_values ([rows, horizon]: E_pi[Q(s_{t+1}, .)], the bootstrap of every step)"},
      {r::target_probs, " needs target_probs and behaviour_probs ([rows, horizon]: pi(a_t|s_t) and "
                        "mu(a_t|s_t) of the taken actions, or their logs with log_probs)"}}}),
    complete({estimator::q_lambda,
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::values, n::required},
      {r::truncated, n::optional}, {r::next_values, n::required}, {r::greedy, n::optional},
      {r::gamma, n::optional}, {r::lambda, n::optional}},
     n::optional, bootstrap_not_needed, family_dtypes, family_checks, scalar_gamma | scalar_lambda,
     launches_at_horizon_0,
     {{r::values, "q_values"}},
     {{r::last_value, next_values_bootstrap}, {r::bootstrap_values, next_values_bootstrap}},
     {{r::next_values, " needs next_values ([rows, horizon]: max_a Q(s_{t+1}, a), the bootstrap of every step)"}}}),
    complete({estimator::n_step_returns,
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::values, n::required},
      {r::truncated, n::optional}, {r::last_value, n::optional}, {r::bootstrap_values, n::optional},
      {r::gamma, n::optional}, {r::lambda, n::optional}, {r::next_values, n::optional}},
     n::optional, needs_bootstrap, family_dtypes, family_checks, scalar_gamma | scalar_lambda | scalar_n,
     launches_at_horizon_0, {}, {}, {}}),
    complete({estimator::episodic_sum,  // the forward scan: rewards are its inputs, terminated its dones
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::last_value, n::optional},
      {r::gamma, n::optional}, {r::lambda, n::optional}},
     n::optional, bootstrap_not_needed, family_dtypes, family_checks,
     scalar_gamma | scalar_lambda | scalar_reset_at_start, launches_at_horizon_0,
     {{r::rewards, "inputs"}, {r::terminated, "dones"}, {r::last_value, "seed"}, {r::advantages, "out"}},
     {{r::values, " (it sums its inputs)"}, {r::truncated, " (a segment ends at any of dones)"},
      {r::bootstrap_values, " (a segment ends at dones; pass seed for C_{-1})"}},
     {}}),
    // PufferLib's schema: five arrays in every call, values the reference; its
    // dones end an episode, and the last step's advantage is 0 (no bootstrap).
    complete({estimator::puff_advantage,
     {{r::values, n::always}, {r::rewards, n::always}, {r::terminated, n::always}, {r::importance, n::always}},
     n::always, bootstrap_not_needed, "all arrays must share one dtype", clipped, clipped,
     launches_at_horizon_0_for_fused_only,
     {{r::terminated, "dones"}},
     {{r::truncated, " (PufferLib's dones end an episode: fold truncations into dones)"},
      {r::last_value, " (the last step's advantage is 0, as in PufferLib)"},
      {r::bootstrap_values, " (the last step's advantage is 0, as in PufferLib)"},
      {r::gamma, " array (PufferLib's schema takes scalars: use gae for per-step discounts)"},
      {r::lambda, " array (PufferLib's schema takes scalars: use gae for per-step lambdas)"}},
     {}}),
    // The engine's scan itself: y_t = inputs_t + decay_t y_{t-/+1}, y outside the row = seed.
    complete({estimator::linear_recurrence,
     {{r::rewards, n::always}, {r::decay, n::always}, {r::last_value, n::optional}},
     n::optional, bootstrap_not_needed, "the float inputs must share one dtype", 0, 0, launches_at_horizon_0,
     {{r::rewards, "inputs"}, {r::last_value, "seed"}, {r::advantages, "out"}},
     {{r::terminated, " (a step's decay ends or keeps the recurrence: pass 0 where it resets)"},
      {r::bootstrap_values, " (pass seed for the y outside the row)"}},
     {}}),
    // The backward of gae / td_lambda (bootstrap pair; with ratios: V-trace's vs too) and
    // discounted_returns (lambda 1), run forwards: the cotangents in the inputs' places, the
    // gradients in the outputs'. The ratios are the forward's own (importance).
    complete({estimator::value_vjp,
     {{r::rewards, n::always}, {r::terminated, n::always}, {r::values, n::optional}, {r::truncated, n::optional},
      {r::importance, n::optional}, {r::gamma, n::optional}, {r::lambda, n::optional}},
     n::always, bootstrap_not_needed, family_dtypes, value_vjp_scalars, value_vjp_scalars, launches_at_horizon_0,
     {{r::rewards, "grad_total"}, {r::values, "grad_returns"}, {r::advantages, "grad_rewards"},
      {r::returns, "grad_values"}},
     {{r::last_value, " (the bootstrap's gradient is read off grad_rewards)"},
      {r::bootstrap_values, " (the bootstrap's gradient is read off grad_rewards)"},
      {r::next_values, " (independent next values: grad_values is grad_returns - grad_rewards)"}},
     {}}),
};

// The table is indexed by the enum's value.
constexpr bool in_enum_order() {
    for (std::size_t i = 0; i < std::size(table); ++i)
        if (static_cast<std::size_t>(table[i].kind) != i) return false;
    return true;
}
static_assert(in_enum_order(), "kinds table rows must follow the estimator enum");

}  // namespace

const kind_info* find_kind_info(estimator kind) noexcept {
    const auto i = static_cast<std::size_t>(kind);
    return i < std::size(table) ? &table[i] : nullptr;
}

const kind_info& kind_info_of(estimator kind) {
    if (const kind_info* info = find_kind_info(kind)) return *info;
    throw value_error("unknown estimator kind " + std::to_string(static_cast<int>(kind)));
}

const char* role_key(argument_role role) noexcept { return roles[static_cast<int>(role)].key; }

const char* argument_name(estimator kind, argument_role role, bool log_probs) noexcept {
    const role_row& row = roles[static_cast<int>(role)];
    if (log_probs && row.log_probs_name) return row.log_probs_name;
    const kind_info* info = find_kind_info(kind);
    return info ? info->names_by_role[static_cast<int>(role)] : row.key;
}

const char* refusal_reason(estimator kind, argument_role role) noexcept {
    if (const kind_info* info = find_kind_info(kind))
        if (const char* reason = find_text(info->refusals, std::size(info->refusals), role)) return reason;
    return roles[static_cast<int>(role)].refusal;
}

const char* missing_text(estimator kind, argument_role role) noexcept {
    const kind_info* info = find_kind_info(kind);
    return info ? find_text(info->missing, std::size(info->missing), role) : nullptr;
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
        case estimator::linear_recurrence: return "linear_recurrence";
        case estimator::value_vjp: return "value_vjp";
    }
    return "unknown";
}

estimator estimator_from_name(const std::string& name) {
    std::string known;  // the family's kinds: the puff advantage has entry points of its own
    for (const detail::kind_info& info : detail::table) {
        if (info.kind == estimator::puff_advantage) continue;
        if (name == estimator_name(info.kind)) return info.kind;
        known += known.empty() ? "'" : ", '";
        known += estimator_name(info.kind);
        known += "'";
    }
    throw value_error("kind must be one of " + known + ", got '" + name + "'");
}

namespace detail {
estimator kind_from_name(const std::string& name) {
    if (name == estimator_name(estimator::puff_advantage)) return estimator::puff_advantage;
    return estimator_from_name(name);
}
}  // namespace detail

}  // namespace puffadv
