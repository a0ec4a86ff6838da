// The one core entry: the puff advantage as one more kind of
// compute_standard_estimate, and every kind's refused and required arrays named
// as its row of the kinds table says, through the public API.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <puffadv/conventions.hpp>

namespace {

using puffadv::estimator;
using puffadv::matrix;

constexpr std::int64_t rows = 5, horizon = 17;

template <typename T>
matrix view_of(std::vector<T>& data, puffadv::dtype type, std::int64_t n_rows, std::int64_t n_cols) {
    matrix m;
    m.data = data.data();
    m.type = type;
    m.rows = n_rows;
    m.cols = n_cols;
    m.row_stride = n_cols;
    m.col_stride = 1;
    return m;
}

template <typename T>
constexpr puffadv::dtype float_dtype = sizeof(T) == 4 ? puffadv::dtype::float32 : puffadv::dtype::float64;

// One puff-advantage call's buffers: episode ends at the first and last steps
// of some rows, ratios around 1, outputs poisoned with NaN.
template <typename T>
struct puff_buffers {
    std::vector<T> values, rewards, dones, importance, advantages, returns, sums;
    explicit puff_buffers(std::uint64_t seed) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> normal;
        std::uniform_real_distribution<double> uniform(0.5, 1.5);
        const std::size_t size = rows * horizon;
        for (std::size_t i = 0; i < size; ++i) {
            values.push_back(static_cast<T>(normal(rng)));
            rewards.push_back(static_cast<T>(normal(rng)));
            const std::int64_t t = static_cast<std::int64_t>(i) % horizon;
            const bool end = (t == 0 && i % 2 == 0) || (t == horizon - 1 && i % 3 == 0) || normal(rng) > 1.2;
            dones.push_back(end ? T(1) : T(0));
            importance.push_back(static_cast<T>(uniform(rng)));
        }
        advantages.assign(size, std::numeric_limits<T>::quiet_NaN());
        returns.assign(size, std::numeric_limits<T>::quiet_NaN());
        sums.assign(rows, std::numeric_limits<T>::quiet_NaN());
    }
    puffadv::puff_arrays arrays(bool fused) {
        constexpr puffadv::dtype t = float_dtype<T>;
        puffadv::puff_arrays a{view_of(values, t, rows, horizon), view_of(rewards, t, rows, horizon),
                               view_of(dones, t, rows, horizon), view_of(importance, t, rows, horizon),
                               view_of(advantages, t, rows, horizon)};
        for (matrix* m : {&a.values, &a.rewards, &a.dones, &a.importance}) m->writable = false;
        if (fused) {
            a.fused.returns = view_of(returns, t, rows, horizon);
            matrix s = view_of(sums, t, rows, 1);
            s.ndim = 1;
            s.row_stride = 1;
            a.fused.sums = s;
        }
        return a;
    }
};

template <typename T>
void expect_puff_kind_matches(bool fused) {
    const puffadv::puff_params params{0.97, 0.9, 1.1, 0.9};
    puff_buffers<T> direct(7), as_kind(7);
    puffadv::compute_puff_advantage(direct.arrays(fused), params);

    puffadv::standard_arrays s;
    const puffadv::puff_arrays p = as_kind.arrays(fused);
    s.values = p.values;
    s.rewards = p.rewards;
    s.terminated = p.dones;
    s.importance = p.importance;
    s.advantages = p.advantages;
    s.fused = p.fused;
    puffadv::standard_params sp;
    sp.kind = estimator::puff_advantage;
    sp.gamma = params.gamma;
    sp.lambda = params.gae_lambda;
    sp.rho_clip = params.rho_clip;
    sp.c_clip = params.c_clip;
    puffadv::compute_standard_estimate(s, sp);

    for (std::size_t i = 0; i < direct.advantages.size(); ++i) {
        ASSERT_FALSE(std::isnan(direct.advantages[i])) << i;
        ASSERT_EQ(direct.advantages[i], as_kind.advantages[i]) << i;
        if (fused) ASSERT_EQ(direct.returns[i], as_kind.returns[i]) << i;
    }
    if (fused)
        for (std::int64_t r = 0; r < rows; ++r) ASSERT_EQ(direct.sums[r], as_kind.sums[r]) << r;
    // PufferLib's convention: the last step's advantage is 0.
    for (std::int64_t r = 0; r < rows; ++r) EXPECT_EQ(direct.advantages[r * horizon + horizon - 1], T(0));
}

TEST(one_entry, puff_advantage_kind_equals_compute_puff_advantage) {
    expect_puff_kind_matches<float>(false);
    expect_puff_kind_matches<double>(false);
    expect_puff_kind_matches<float>(true);
    expect_puff_kind_matches<double>(true);
}

TEST(one_entry, puff_advantage_kind_checks_as_find_puff_problem) {
    puff_buffers<float> b(3);
    puffadv::puff_arrays p = b.arrays(false);
    p.rewards.cols = 4;
    const puffadv::argument_problem puff = puffadv::find_puff_problem(p, {0.99, 0.95, 1.0, 1.0});
    ASSERT_TRUE(puff);
    EXPECT_EQ(puff.message,
              "rewards has shape [5, 4] but values has shape [5, 17]; all arrays must share one [rows, horizon] shape");
    p = b.arrays(false);
    p.importance.type = puffadv::dtype::float64;
    EXPECT_EQ(puffadv::find_puff_problem(p, {0.99, 0.95, 1.0, 1.0}).message,
              "importance has dtype float64 but values has float32; all arrays must share one dtype");
    p = b.arrays(false);
    EXPECT_EQ(puffadv::find_puff_problem(p, {0.99, 1.5, 1.0, 1.0}).message,
              "gae_lambda must be finite and in [0, 1], got 1.5");
}

// Every input role filled; `take` picks which a call passes.
struct all_arrays {
    std::vector<float> floats[8];  // rewards, values, last_value, bootstrap, importance, next, target, behaviour
    std::vector<std::uint8_t> flags[4];  // terminated, truncated, greedy, sample_mask
    std::vector<float> out;
    all_arrays() {
        for (auto& f : floats) f.assign(rows * horizon, 0.5f);
        for (auto& f : flags) f.assign(rows * horizon, 0);
        out.assign(rows * horizon, 0.0f);
    }
    matrix f(int i) { return view_of(floats[i], puffadv::dtype::float32, rows, horizon); }
    matrix flag(int i) { return view_of(flags[i], puffadv::dtype::uint8, rows, horizon); }
};

enum role { values, truncated, last_value, bootstrap_values, importance, next_values, target_probs,
            behaviour_probs, greedy, sample_mask, role_end };
const char* const role_names[] = {"values", "truncated", "last_value", "bootstrap_values", "importance",
                                  "next_values", "target_probs", "behaviour_probs", "greedy", "sample_mask"};

puffadv::standard_arrays call_with(all_arrays& all, const std::vector<role>& roles) {
    puffadv::standard_arrays a;
    a.rewards = all.f(0);
    a.terminated = all.flag(0);
    a.advantages = view_of(all.out, puffadv::dtype::float32, rows, horizon);
    for (role r : roles) {
        switch (r) {
            case values: a.values = all.f(1); break;
            case truncated: a.truncated = all.flag(1); break;
            case last_value: {
                matrix m = view_of(all.floats[2], puffadv::dtype::float32, rows, 1);
                m.ndim = 1;
                m.row_stride = 1;
                a.last_value = m;
                break;
            }
            case bootstrap_values: a.bootstrap_values = all.f(3); break;
            case importance: a.importance = all.f(4); break;
            case next_values: a.next_values = all.f(5); break;
            case target_probs: a.target_probs = all.f(6); break;
            case behaviour_probs: a.behaviour_probs = all.f(7); break;
            case greedy: a.greedy = all.flag(2); break;
            case sample_mask: a.sample_mask = all.flag(3); break;
            case role_end: break;
        }
    }
    return a;
}

struct kind_case {
    estimator kind;
    std::vector<role> valid;  // a call this kind accepts
    std::vector<std::string> refused;  // the message when each role outside `valid` (and not optional) is added
};

std::string message_of(all_arrays& all, estimator kind, const std::vector<role>& roles) {
    puffadv::standard_params p;
    p.kind = kind;
    return puffadv::find_standard_problem(call_with(all, roles), p).message;
}

TEST(one_entry, every_kind_names_its_refused_arrays) {
    const std::string importance_reason = " (only gae, td_lambda and vtrace take importance ratios)";
    const std::string next_reason =
        " (only gae, td_lambda, vtrace, n_step_returns, retrace and q_lambda take next_values)";
    const std::string probs_reason = " (only retrace takes probabilities)";
    const std::string greedy_reason = " (only q_lambda takes greedy flags)";
    const std::string bootstrap_reason = " (next_values is its bootstrap at every step)";
    struct refusal {
        estimator kind;
        std::vector<role> valid;
        role extra;
        std::string message;
    };
    const std::vector<role> gae_call{values, last_value};
    const std::vector<role> retrace_call{values, next_values, target_probs, behaviour_probs};
    const std::vector<role> q_call{values, next_values};
    const std::vector<refusal> cases = {
        // next_values replaces the bootstrap pair (issue 29).
        {estimator::gae, gae_call, next_values, "gae takes no last_value with next_values" + bootstrap_reason},
        {estimator::n_step_returns, {values, bootstrap_values}, next_values,
         "n_step_returns takes no bootstrap_values with next_values" + bootstrap_reason},
        {estimator::td_lambda, {values, next_values}, importance,
         "td_lambda takes no importance with next_values (it then scans the lambda-return r_t + gamma "
         "(1 - terminated_t) [(1 - lambda) next_values_t + lambda G_{t+1}], which has no ratios; vtrace "
         "gives off-policy targets)"},
        {estimator::gae, gae_call, sample_mask, "gae takes no sample_mask (only vtrace takes a sample_mask)"},
        {estimator::retrace, retrace_call, sample_mask, "retrace takes no sample_mask (only vtrace takes a sample_mask)"},
        {estimator::gae, gae_call, target_probs, "gae takes no target_probs" + probs_reason},
        {estimator::vtrace, gae_call, greedy, "vtrace takes no greedy" + greedy_reason},
        {estimator::td_lambda, gae_call, behaviour_probs, "td_lambda takes no behaviour_probs" + probs_reason},
        {estimator::n_step_returns, gae_call, importance, "n_step_returns takes no importance" + importance_reason},
        {estimator::discounted_returns, {}, values,
         "discounted_returns takes no values (returns-to-go read only rewards and the bootstrap)"},
        {estimator::discounted_returns, {}, importance, "discounted_returns takes no importance" + importance_reason},
        {estimator::retrace, retrace_call, last_value, "retrace takes no last_value" + bootstrap_reason},
        {estimator::retrace, retrace_call, bootstrap_values, "retrace takes no bootstrap_values" + bootstrap_reason},
        {estimator::retrace, retrace_call, importance,
         "retrace takes no importance (target_probs and behaviour_probs give its ratios)"},
        {estimator::retrace, retrace_call, greedy, "retrace takes no greedy" + greedy_reason},
        {estimator::q_lambda, q_call, last_value, "q_lambda takes no last_value" + bootstrap_reason},
        {estimator::q_lambda, q_call, target_probs, "q_lambda takes no target_probs" + probs_reason},
        {estimator::q_lambda, q_call, importance, "q_lambda takes no importance" + importance_reason},
        {estimator::episodic_sum, {}, values, "episodic_sum takes no values (it sums its inputs)"},
        {estimator::episodic_sum, {}, truncated, "episodic_sum takes no truncated (a segment ends at any of dones)"},
        {estimator::episodic_sum, {}, bootstrap_values,
         "episodic_sum takes no bootstrap_values (a segment ends at dones; pass seed for C_{-1})"},
        {estimator::episodic_sum, {}, next_values, "episodic_sum takes no next_values" + next_reason},
        {estimator::puff_advantage, {values, importance}, truncated,
         "puff_advantage takes no truncated (PufferLib's dones end an episode: fold truncations into dones)"},
        {estimator::puff_advantage, {values, importance}, last_value,
         "puff_advantage takes no last_value (the last step's advantage is 0, as in PufferLib)"},
        {estimator::puff_advantage, {values, importance}, next_values,
         "puff_advantage takes no next_values" + next_reason},
    };
    all_arrays all;
    for (const refusal& c : cases) {
        EXPECT_EQ(message_of(all, c.kind, c.valid), "") << puffadv::estimator_name(c.kind);
        std::vector<role> with = c.valid;
        with.push_back(c.extra);
        EXPECT_EQ(message_of(all, c.kind, with), c.message);
    }
}

TEST(one_entry, every_kind_names_its_missing_arrays) {
    struct missing {
        estimator kind;
        std::vector<role> roles;
        std::string message;
    };
    const std::vector<missing> cases = {
        {estimator::gae, {last_value}, "gae needs values ([rows, horizon])"},
        {estimator::td_lambda, {}, "td_lambda needs values ([rows, horizon])"},
        {estimator::vtrace, {values},
         "a bootstrap is needed: pass last_value ([rows]: the value of the observation after the last step) "
         "or bootstrap_values ([rows, horizon])"},
        {estimator::n_step_returns, {last_value}, "n_step_returns needs values ([rows, horizon])"},
        {estimator::retrace, {values, target_probs, behaviour_probs},
         "retrace needs next_values ([rows, horizon]: E_pi[Q(s_{t+1}, .)], the bootstrap of every step)"},
        {estimator::retrace, {values, next_values},
         "retrace needs target_probs and behaviour_probs ([rows, horizon]: pi(a_t|s_t) and mu(a_t|s_t) of the "
         "taken actions, or their logs with log_probs)"},
        {estimator::retrace, {values, next_values, behaviour_probs},
         "pass both target_probs and behaviour_probs, got only behaviour_probs"},
        {estimator::q_lambda, {values},
         "q_lambda needs next_values ([rows, horizon]: max_a Q(s_{t+1}, a), the bootstrap of every step)"},
        {estimator::q_lambda, {next_values}, "q_lambda needs q_values ([rows, horizon])"},
        {estimator::puff_advantage, {importance}, "puff_advantage needs values ([rows, horizon])"},
        {estimator::puff_advantage, {values}, "puff_advantage needs importance ([rows, horizon])"},
    };
    all_arrays all;
    for (const missing& c : cases) EXPECT_EQ(message_of(all, c.kind, c.roles), c.message);

    // The puff advantage's output is part of every call.
    puffadv::standard_arrays a = call_with(all, {values, importance});
    a.advantages.reset();
    puffadv::standard_params p;
    p.kind = estimator::puff_advantage;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message, "puff_advantage needs advantages ([rows, horizon])");
}

TEST(one_entry, each_kind_is_named_as_its_caller_knows_it) {
    all_arrays all;
    puffadv::standard_params p;
    p.kind = estimator::episodic_sum;
    puffadv::standard_arrays a = call_with(all, {});
    a.terminated.cols = 3;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "dones has shape [5, 3] but inputs has shape [5, 17]; all arrays must share one [rows, horizon] shape");
    p.kind = estimator::puff_advantage;
    a = call_with(all, {values, importance});
    a.terminated.type = puffadv::dtype::float64;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "dones has dtype float64; expected bool, uint8 or the float inputs' dtype float32");
    // The family checks rho_pg_clip and n whatever its kind; the puff advantage reads neither.
    a = call_with(all, {values, importance});
    p.n = 0;
    p.rho_pg_clip = -1;
    EXPECT_FALSE(puffadv::find_standard_problem(a, p));
    p.kind = estimator::gae;
    a = call_with(all, {values, last_value});
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message, "rho_pg_clip must be finite and >= 0, got -1");
}

TEST(one_entry, empty_calls_launch_nothing) {
    // rows == 0 and horizon 0: no kernel, no error; the family's zero sums still written.
    all_arrays all;
    puffadv::standard_params p;
    p.kind = estimator::puff_advantage;
    puffadv::standard_arrays a = call_with(all, {values, importance});
    for (matrix* m : {&a.rewards, &*a.values, &a.terminated, &*a.importance, &*a.advantages}) m->cols = 0;
    EXPECT_NO_THROW(puffadv::compute_standard_estimate(a, p));
    p.kind = estimator::gae;
    a = call_with(all, {values, last_value});
    for (matrix* m : {&a.rewards, &*a.values, &a.terminated, &*a.advantages}) m->cols = 0;
    std::vector<float> sums(rows, std::numeric_limits<float>::quiet_NaN());
    matrix s = view_of(sums, puffadv::dtype::float32, rows, 1);
    s.ndim = 1;
    s.row_stride = 1;
    a.fused.sums = s;
    puffadv::compute_standard_estimate(a, p);
    for (float v : sums) EXPECT_EQ(v, 0.0f);
}

}  // namespace

// Issue 31: a time-major call's messages give the caller's [T, B] shapes and
// strides (apply_time_axis marks the transposed views), a 1-D output one stride.
TEST(one_entry, time_major_messages_give_the_callers_shapes_and_strides) {
    std::vector<float> r(rows * horizon, 0.5f), v(rows * horizon + horizon, 0.25f), out(rows * horizon);
    std::vector<std::uint8_t> t(rows * horizon, 0);
    std::vector<float> lv(rows, 1.0f);
    puffadv::standard_arrays a;
    a.rewards = view_of(r, puffadv::dtype::float32, horizon, rows);  // [T, B] as the caller holds it
    a.values = view_of(v, puffadv::dtype::float32, horizon + 1, rows);
    a.terminated = view_of(t, puffadv::dtype::uint8, horizon, rows);
    a.last_value = view_of(lv, puffadv::dtype::float32, rows, 1);
    a.last_value->ndim = 1;
    puffadv::standard_params p;
    p.kind = estimator::gae;
    ASSERT_FALSE(puffadv::apply_time_axis(a, 0));
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "values has shape [18, 5] but rewards has shape [17, 5]; all arrays must share one [rows, horizon] shape");
    a.values = view_of(v, puffadv::dtype::float32, horizon, rows);
    a.advantages = view_of(out, puffadv::dtype::float32, horizon, rows);
    a.advantages->col_stride = 0;  // the B rows of each step on one element: [T, B] strides [5, 0]
    ASSERT_FALSE(puffadv::apply_time_axis(*a.values, 0, "values"));
    ASSERT_FALSE(puffadv::apply_time_axis(*a.advantages, 0, "advantages"));
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "advantages has overlapping elements (strides [5, 0]); pass an array whose elements are distinct");
    a.advantages.reset();
    std::vector<float> sums(rows);
    a.fused.sums = view_of(sums, puffadv::dtype::float32, rows, 1);
    a.fused.sums->ndim = 1;
    a.fused.sums->row_stride = 0;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "sums has overlapping elements (strides [0]); pass an array whose elements are distinct");
}
