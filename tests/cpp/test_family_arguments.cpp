// The estimator family's bad arguments through the C++ API: std::invalid_argument
// (type_error for dtypes) naming what the caller passed.
#include <initializer_list>
#include <limits>
#include <utility>
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "family_reference.hpp"

namespace {

using namespace family_test;

// ---------------------------------------------------------------- bad arguments

/// `call` throws std::invalid_argument (type_error when `type`), its message holding every word.
template <typename F>
void expect_invalid(F&& call, std::initializer_list<std::string> words, bool type = false) {
    try {
        call();
        ADD_FAILURE() << "no exception; expected one naming '" << *words.begin() << "'";
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(dynamic_cast<const puffadv::type_error*>(&e) != nullptr, type) << e.what();
        for (const std::string& word : words)
            EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
                << "message does not mention '" << word << "': " << e.what();
    }
}

call_options options_for(estimator kind) {
    call_options o;
    switch (kind) {
        case estimator::retrace: o.values = o.next_values = o.probs = true; break;
        case estimator::q_lambda: o.values = o.next_values = true; break;
        case estimator::n_step_returns: o.values = o.last_value = true; break;
        default: break;
    }
    return o;
}

TEST(family_arguments, refused_and_missing_arrays_are_named) {
    const episodes e = random_episodes<float>(4, 6, 99);
    auto run = [&](estimator kind, const call_options& o, auto&& edit) {
        family_call<float> call(e, o, layout::row_major);
        edit(call);
        puffadv::compute_standard_estimate(call.arrays, params_of(kind, o));
    };
    auto none = [](family_call<float>&) {};
    // episodic_sum: its own names.
    call_options ep_trunc;
    ep_trunc.truncated = true;
    expect_invalid([&] { run(estimator::episodic_sum, ep_trunc, none); }, {"episodic_sum", "truncated"});
    call_options ep_values;
    ep_values.values = true;
    expect_invalid([&] { run(estimator::episodic_sum, ep_values, none); }, {"episodic_sum", "values"});
    expect_invalid([&] {
        run(estimator::episodic_sum, call_options{}, [](family_call<float>& c) { c.arrays.terminated.cols = 5; });
    }, {"dones", "inputs"});
    call_options seeded;
    seeded.last_value = true;
    expect_invalid([&] {
        run(estimator::episodic_sum, seeded, [](family_call<float>& c) { c.arrays.last_value->rows = 3; });
    }, {"seed", "inputs"});
    // episodic_sum's output is the caller's `out`, not `advantages`.
    expect_invalid([&] {
        run(estimator::episodic_sum, call_options{}, [](family_call<float>& c) { c.arrays.advantages->cols = 5; });
    }, {"out has shape", "inputs"});
    expect_invalid([&] {
        run(estimator::episodic_sum, call_options{}, [](family_call<float>& c) { c.arrays.advantages = c.arrays.rewards; });
    }, {"out overlaps inputs"});
    // retrace.
    call_options rt = options_for(estimator::retrace);
    rt.next_values = false;
    expect_invalid([&] { run(estimator::retrace, rt, none); }, {"retrace", "next_values"});
    rt = options_for(estimator::retrace);
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.behaviour_probs.reset(); });
    }, {"target_probs", "behaviour_probs"});
    rt.last_value = true;
    expect_invalid([&] { run(estimator::retrace, rt, none); }, {"retrace", "last_value"});
    rt = options_for(estimator::retrace);
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.values.reset(); });
    }, {"retrace", "q_values"});
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.values->cols = 5; });
    }, {"q_values", "rewards"});
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.target_probs->type = puffadv::dtype::float64; });
    }, {"target_probs", "float64", "float32"}, /*type=*/true);
    rt.log_probs = true;  // the pair is then the caller's target_log_probs and behaviour_log_probs
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.target_probs->cols = 5; });
    }, {"target_log_probs has shape"});
    expect_invalid([&] {
        run(estimator::retrace, rt, [](family_call<float>& c) { c.arrays.behaviour_probs.reset(); });
    }, {"pass both target_log_probs and behaviour_log_probs, got only target_log_probs"});
    // q_lambda.
    call_options q = options_for(estimator::q_lambda);
    q.probs = true;
    expect_invalid([&] { run(estimator::q_lambda, q, none); }, {"q_lambda", "target_probs"});
    q = options_for(estimator::q_lambda);
    q.greedy = true;
    expect_invalid([&] {
        run(estimator::q_lambda, q, [](family_call<float>& c) { c.arrays.greedy->type = puffadv::dtype::float64; });
    }, {"greedy", "bool"}, /*type=*/true);
    // n_step_returns, discounted_returns.
    call_options ns = options_for(estimator::n_step_returns);
    ns.n = 0;
    expect_invalid([&] { run(estimator::n_step_returns, ns, none); }, {"n must be >= 1", "got 0"});
    ns = options_for(estimator::n_step_returns);
    ns.last_value = false;
    expect_invalid([&] { run(estimator::n_step_returns, ns, none); }, {"bootstrap"});
    ns = options_for(estimator::n_step_returns);
    ns.next_values = true;
    expect_invalid([&] { run(estimator::n_step_returns, ns, none); }, {"n_step_returns", "next_values"});
    call_options dr;
    dr.values = true;
    expect_invalid([&] { run(estimator::discounted_returns, dr, none); }, {"discounted_returns", "values"});
    dr = call_options{};
    dr.truncated = true;
    expect_invalid([&] { run(estimator::discounted_returns, dr, none); }, {"truncated", "bootstrap_values"});
    // gae refuses the family's arrays.
    call_options g = options_for(estimator::n_step_returns);
    g.greedy = true;
    expect_invalid([&] { run(estimator::gae, g, none); }, {"gae", "greedy"});
}

// Peng (lambda = 1): G_0 = r_0 + gamma G_1 whatever next_values[0] is. A delta form that adds
// gamma nv_0 and takes gamma lambda nv_0 away again loses 6e-5 of G to nv_0 = 1e3 in float32.
TEST(family_arguments, outputs_must_not_alias_the_new_inputs) {
    const episodes e = random_episodes<float>(4, 6, 5);
    call_options rt = options_for(estimator::retrace);
    family_call<float> call(e, rt, layout::row_major);
    call.arrays.advantages = *call.arrays.next_values;
    expect_invalid([&] { puffadv::compute_standard_estimate(call.arrays, params_of(estimator::retrace, rt)); },
                   {"advantages", "overlaps", "next_values"});
}

// A step flagged both terminated and truncated is terminated (Gymnasium's meaning, issue 33):
// no error, its bootstrap (NaN here) never read; the numbers of the same call with only
// terminated set there. Every case that passes truncated, both layouts, float32/float64,
// at a middle step and at each row's first and last steps.
template <typename T>
void check_both_flags(const family_case& c, layout l) {
    episodes e = random_episodes<T>(3, 70, 11);
    episodes terminated_only = e;
    for (auto [r, t] : {std::pair<std::int64_t, std::int64_t>{2, 3}, {0, 0}, {1, 69}, {2, 69}}) {
        e.terminated.at(r, t) = e.truncated.at(r, t) = 1.0;
        e.bootstrap.at(r, t) = std::numeric_limits<double>::quiet_NaN();
        terminated_only.terminated.at(r, t) = 1.0;
        terminated_only.truncated.at(r, t) = 0.0;
    }
    const estimate want = reference(c.kind, terminated_only, c.options);
    family_call<T> call(e, c.options, l);
    puffadv::compute_standard_estimate(call.arrays, params_of(c.kind, c.options));
    const double tol = sizeof(T) == 8 ? 1e-12 : 2e-6;
    const std::string where = std::string(c.label) + " " + puff_test::layout_name(l);
    EXPECT_LT(puff_test::relative_error(call.advantages.to_vector(), want.advantages), tol) << where;
    EXPECT_LT(puff_test::relative_error(call.returns.to_vector(), want.returns), tol) << where;
}

TEST(family_arguments, a_step_both_terminated_and_truncated_is_terminated) {
    for (const family_case& c : family_cases()) {
        if (!c.options.truncated) continue;
        for (layout l : {layout::row_major, layout::padded, layout::time_major, layout::reversed}) {
            check_both_flags<double>(c, l);
            check_both_flags<float>(c, l);
        }
    }
}

}  // namespace
