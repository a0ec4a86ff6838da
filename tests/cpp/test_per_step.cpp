// Per-step gamma and lambda through the C++ API (standard_arrays::gamma, ::lambda):
// every kind of the family against family_reference.hpp's float64 reference with
// random gamma_t, lambda_t in [0, 1), in every layout (the engine on the caller's
// arrays, dense copies for the padded and reversed strides), float32 and float64;
// and the kinds table's names and refusals for the new arrays.
#include <gtest/gtest.h>

#include <puffadv/puffadv.hpp>

#include "family_reference.hpp"

namespace {

using namespace family_test;

class per_step : public ::testing::TestWithParam<family_case> {};

family_case stepped(family_case c) {
    c.options.per_step = true;
    c.options.per_step_lambda = c.kind != estimator::discounted_returns;
    return c;
}

TEST_P(per_step, matches_the_float64_reference_in_every_layout) {
    const family_case c = stepped(GetParam());
    for (layout l : {layout::row_major, layout::padded, layout::time_major, layout::reversed}) {
        check_case<double>(c, l, 19, 23);
        check_case<float>(c, l, 19, 23);
    }
    check_case<float>(c, layout::time_major, 300, 7);
    check_case<double>(c, layout::row_major, 7, 300);
    check_case<double>(c, layout::row_major, 30, 1);
}

// Every per-step array equal to the scalars: the same results (the engine's kinds bit
// for bit; n-step windows and log-probabilities take their own loop or dense copies).
TEST_P(per_step, constant_arrays_give_the_scalars_results) {
    const family_case& c = GetParam();
    episodes e = random_episodes<double>(9, 31, 5);
    for (double& g : e.gamma.data) g = kGamma;
    for (double& l : e.lambda.data) l = kLambda;
    for (layout l : {layout::row_major, layout::time_major}) {
        family_call<double> plain(e, c.options, l), steps(e, stepped(c).options, l);
        puffadv::compute_standard_estimate(plain.arrays, params_of(c.kind, c.options));
        puffadv::compute_standard_estimate(steps.arrays, params_of(c.kind, c.options));
        const std::pair<strided_array<double>*, strided_array<double>*> outputs[] = {
            {&steps.advantages, &plain.advantages}, {&steps.returns, &plain.returns}};
        for (auto [got, want] : outputs) {
            grid reference(e.rows, e.horizon);
            reference.data = want->to_vector();
            EXPECT_LT(puff_test::relative_error(got->to_vector(), reference), 1e-13) << c.label;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(family, per_step, ::testing::ValuesIn(family_cases()),
                         [](const ::testing::TestParamInfo<family_case>& info) { return info.param.label; });

TEST(per_step_arguments, are_named_as_the_caller_knows_them) {
    const episodes e = random_episodes<float>(3, 5, 9);
    call_options o;
    o.values = o.truncated = o.bootstrap = true;
    o.per_step = true;
    o.n = 2;
    family_call<float> call(e, o, layout::row_major);
    std::vector<double> wide(15, 0.5);
    puffadv::matrix m = *call.arrays.lambda;
    m.data = wide.data();
    m.type = puffadv::dtype::float64;
    call.arrays.lambda = m;
    puffadv::standard_params p = params_of(estimator::n_step_returns, o);
    p.lambda_name = "lambda_";
    EXPECT_EQ(puffadv::find_standard_problem(call.arrays, p).message,
              "lambda_ has dtype float64 but rewards has float32; the float inputs must share one dtype");
    call.arrays.lambda.reset();
    call.arrays.gamma->cols = 4;
    EXPECT_EQ(puffadv::find_standard_problem(call.arrays, p).message.rfind("gamma has shape [3, 4]", 0), 0u)
        << puffadv::find_standard_problem(call.arrays, p).message;
    call.arrays.gamma->cols = 5;
    p.kind = estimator::discounted_returns;
    call.arrays.values.reset();
    call.arrays.lambda = *call.arrays.gamma;
    EXPECT_EQ(puffadv::find_standard_problem(call.arrays, p).message,
              "discounted_returns takes no lambda_ (returns-to-go read no lambda)");
}

TEST(per_step_arguments, the_puff_advantage_keeps_its_scalar_schema) {
    const episodes e = random_episodes<float>(2, 4, 3);
    call_options o;
    o.values = true;
    o.per_step = true;
    family_call<float> call(e, o, layout::row_major);
    puffadv::standard_arrays a;
    a.values = call.values.view;
    a.rewards = call.rewards.view;
    a.terminated = call.terminated.view;
    a.importance = call.values.view;
    a.advantages = call.advantages.view;
    a.gamma = call.gamma.view;
    puffadv::standard_params p;
    p.kind = estimator::puff_advantage;
    p.lambda_name = "gae_lambda";
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "puff_advantage takes no gamma array (PufferLib's schema takes scalars: use gae for per-step "
              "discounts)");
}

// GPU memory with per-step arrays: the GPU producers compute them (issue 29), so
// the call goes to the GPU backend like a scalar one: a build without one (or
// without a device) says so by name, backend_unavailable (the bindings' host
// fallback), before any launch. The tests/hip_cpu per_step cases run the kernels.
TEST(per_step_arguments, gpu_arrays_go_to_the_gpu_backend) {
    std::string remedy = "PUFF_CUDA=ON";
    if (PUFFADV_HAS_CUDA) {
        if (puffadv::query_gpu(puffadv::device_type::cuda).device_count > 0)
            GTEST_SKIP() << "a CUDA device is present: scripts/gpu/new_kernels_check.py covers this build";
        remedy = "no usable device";
    }
    const episodes e = random_episodes<float>(2, 6, 4);
    call_options o;
    o.values = o.last_value = o.per_step = true;
    o.n = 2;
    family_call<float> call(e, o, layout::row_major);  // pointers are never dereferenced: the call stops at dispatch
    auto to_gpu = [](puffadv::matrix& m) { m.device = {puffadv::device_type::cuda, 0}; };
    to_gpu(call.arrays.rewards);
    to_gpu(call.arrays.terminated);
    for (auto* m : {&call.arrays.values, &call.arrays.last_value, &call.arrays.gamma, &call.arrays.lambda,
                    &call.arrays.advantages, &call.arrays.fused.returns, &call.arrays.fused.sums})
        to_gpu(**m);
    try {
        puffadv::compute_standard_estimate(call.arrays, params_of(estimator::n_step_returns, o));
        FAIL() << "no exception";
    } catch (const puffadv::backend_unavailable& e) {
        EXPECT_NE(std::string(e.what()).find(remedy), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).find("per-step"), std::string::npos) << e.what();
    }
}

}  // namespace
