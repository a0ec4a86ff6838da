// The estimator family beyond GAE / TD(lambda) / V-trace through the C++ API
// (compute_standard_estimate): each kind against the naive float64 reference of
// family_reference.hpp, in every layout, float32 and float64, outputs poisoned
// first; NaN isolation and the facts of docs/conventions.md. Bad arguments:
// test_family_arguments.cpp.
#include <gtest/gtest.h>

#include "family_reference.hpp"

namespace {

using namespace family_test;

class family : public ::testing::TestWithParam<family_case> {};

TEST_P(family, matches_the_float64_reference_in_every_layout) {
    for (layout l : {layout::row_major, layout::padded, layout::time_major, layout::reversed}) {
        check_case<double>(GetParam(), l, 19, 23);
        check_case<float>(GetParam(), l, 19, 23);
    }
    // More rows than one block or tile, more steps than one chunk, and the degenerate horizon.
    check_case<float>(GetParam(), layout::time_major, 600, 7);
    check_case<double>(GetParam(), layout::row_major, 11, 600);
    check_case<float>(GetParam(), layout::reversed, 9, 530);
    check_case<double>(GetParam(), layout::row_major, 300, 1);
    // Time-major with few rows: 2, 4 or 8 walked interleaved (W / N steps per vector),
    // 5 to 32 beyond a vector walked flat (each lane's step beside it a vector or more
    // away), the last block partial or whole, one step; 3 and 33 gathered and across rows.
    for (std::int64_t rows : {2, 3, 4, 5, 8, 9, 12, 15, 16, 24, 32, 33})
        for (std::int64_t horizon : {1, 2, 5, 301}) {
            check_case<float>(GetParam(), layout::time_major, rows, horizon);
            check_case<double>(GetParam(), layout::time_major, rows, horizon);
        }
}

// Inputs the definitions never read must not matter, NaN included: bootstrap_values
// away from truncations and the last step, Retrace's probabilities and Q(lambda)'s
// greedy flags at step 0 (only c_{t+1}, greedy_{t+1} are read), next_values at
// terminated steps, and episodic_sum's dones at the last step (ends_at: the reset
// would land past the buffer).
TEST_P(family, never_read_inputs_do_not_matter) {
    const family_case& c = GetParam();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (layout l : {layout::row_major, layout::time_major}) {
        const episodes clean = random_episodes<double>(13, 21, 77);
        episodes e = clean;
        for (std::int64_t r = 0; r < e.rows; ++r) {
            for (std::int64_t t = 0; t < e.horizon; ++t) {
                const bool truncated = c.options.truncated && e.truncated.at(r, t) != 0.0;
                if (!truncated && t != e.horizon - 1) e.bootstrap.at(r, t) = nan;
                if (e.terminated.at(r, t) != 0.0) e.next_values.at(r, t) = nan;
            }
            e.target.at(r, 0) = e.behaviour.at(r, 0) = e.greedy.at(r, 0) = nan;
            if (c.kind == estimator::episodic_sum && !c.options.reset_at_start)
                e.terminated.at(r, e.horizon - 1) = nan;
        }
        const estimate want = reference(c.kind, clean, c.options);
        family_call<double> call(e, c.options, l);
        puffadv::compute_standard_estimate(call.arrays, params_of(c.kind, c.options));
        EXPECT_LT(puff_test::relative_error(call.advantages.to_vector(), want.advantages), 1e-12)
            << c.label << " " << puff_test::layout_name(l);
        EXPECT_LT(puff_test::relative_error(call.returns.to_vector(), want.returns), 1e-12)
            << c.label << " " << puff_test::layout_name(l);
    }
}

// Float flags: any non-zero value (NaN, 2, -1) is set, -0 is clear, in the
// layouts that read them in place (time-major) and those that convert them.
TEST_P(family, float_flags_are_set_when_non_zero) {
    const family_case& c = GetParam();
    const episodes clean = random_episodes<double>(11, 17, 31);
    episodes e = clean;
    const double set_values[] = {std::numeric_limits<double>::quiet_NaN(), 2.0, -1.0};
    int k = 0;
    for (double& flag : e.terminated.data) flag = flag != 0.0 ? set_values[k++ % 3] : (k++ % 2 ? -0.0 : 0.0);
    const estimate want = reference(c.kind, clean, c.options);
    for (layout l : {layout::row_major, layout::time_major, layout::reversed}) {
        family_call<double> call(e, c.options, l);
        puffadv::compute_standard_estimate(call.arrays, params_of(c.kind, c.options));
        EXPECT_LT(puff_test::relative_error(call.advantages.to_vector(), want.advantages), 1e-12)
            << c.label << " " << puff_test::layout_name(l);
    }
}

// A NaN stays in its row: every other row's results are bitwise those of a clean call.
TEST_P(family, a_nan_stays_in_its_row) {
    const family_case& c = GetParam();
    for (layout l : {layout::row_major, layout::time_major}) {
        const episodes clean = random_episodes<float>(12, 19, 5);
        episodes e = clean;
        e.rewards.at(4, 9) = std::numeric_limits<double>::quiet_NaN();
        family_call<float> dirty_call(e, c.options, l), clean_call(clean, c.options, l);
        puffadv::compute_standard_estimate(dirty_call.arrays, params_of(c.kind, c.options));
        puffadv::compute_standard_estimate(clean_call.arrays, params_of(c.kind, c.options));
        bool nan_in_row = false;
        for (std::int64_t r = 0; r < e.rows; ++r)
            for (std::int64_t t = 0; t < e.horizon; ++t) {
                const float got = dirty_call.advantages.at(r, t), want = clean_call.advantages.at(r, t);
                if (r == 4) {
                    nan_in_row |= std::isnan(got);
                    continue;
                }
                EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << c.label << " row " << r << " step " << t;
            }
        EXPECT_TRUE(nan_in_row) << c.label << ": the NaN reward reached no output of its own row";
    }
}

INSTANTIATE_TEST_SUITE_P(kinds, family, ::testing::ValuesIn(family_cases()),
                         [](const ::testing::TestParamInfo<family_case>& info) { return info.param.label; });

TEST(family_facts, n_step_with_n_at_least_the_horizon_is_the_td_lambda_return) {
    const episodes e = random_episodes<double>(5, 9, 7);
    call_options ns;
    ns.values = ns.truncated = ns.bootstrap = true;
    ns.n = 9;
    family_call<double> window(e, ns, layout::row_major);
    puffadv::compute_standard_estimate(window.arrays, params_of(estimator::n_step_returns, ns));
    family_call<double> td(e, ns, layout::row_major);
    puffadv::standard_params p = params_of(estimator::td_lambda, ns);
    puffadv::compute_standard_estimate(td.arrays, p);
    const std::vector<double> a = window.returns.to_vector(), b = td.returns.to_vector();
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12) << i;
}

// 64 < n < T: one O(T) pass per row. Episodes ending rarely (flags kept at the first and
// last steps and at one step in 151 of the others) leave many windows of 65 and 100 whole,
// so the part of the TD(lambda) return past each window is what the pass subtracts.
TEST(family_facts, n_step_long_windows_match_the_reference) {
    for (std::int64_t horizon : {200, 333}) {
        episodes sparse = random_episodes<float>(5, horizon, 99 + horizon);
        for (std::int64_t r = 0; r < sparse.rows; ++r)
            for (std::int64_t t = 1; t + 1 < horizon; ++t)
                if ((r * 131 + t * 7) % 151 != 0) sparse.terminated.at(r, t) = sparse.truncated.at(r, t) = 0.0;
        for (std::int64_t n : {std::int64_t{65}, std::int64_t{100}, horizon - 1, horizon - 2}) {
            family_case c{"n_step_long", estimator::n_step_returns, {}};
            c.options.values = c.options.truncated = c.options.bootstrap = true;
            c.options.n = n;
            family_case last = c;
            last.options.truncated = last.options.bootstrap = false;
            last.options.last_value = true;
            for (layout l : {layout::row_major, layout::padded, layout::time_major, layout::reversed}) {
                SCOPED_TRACE("n = " + std::to_string(n));
                check_episodes<float>(c, l, sparse);
                check_episodes<double>(c, l, sparse);
                check_episodes<double>(last, l, sparse);
            }
        }
    }
}

// A long row whose O(T n) windows took minutes: 1 x 200000, n = T - 1, well within a second.
TEST(family_facts, n_step_long_window_on_a_long_row_is_fast) {
    const std::int64_t horizon = 200000;
    const episodes e = random_episodes<float>(1, horizon, 3);
    call_options o;
    o.values = o.truncated = o.bootstrap = true;
    o.n = horizon - 1;
    family_call<float> call(e, o, layout::row_major);
    const auto started = std::chrono::steady_clock::now();
    puffadv::compute_standard_estimate(call.arrays, params_of(estimator::n_step_returns, o));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    EXPECT_LT(seconds, 2.0);
    // Every window of this row reaches an episode end or the row's: the TD(lambda) return.
    family_call<float> td(e, o, layout::row_major);
    puffadv::compute_standard_estimate(td.arrays, params_of(estimator::td_lambda, o));
    const std::vector<double> got = call.returns.to_vector(), want = td.returns.to_vector();
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i)
        diff += (got[i] - want[i]) * (got[i] - want[i]), norm += want[i] * want[i];
    EXPECT_LT(std::sqrt(diff / norm), 2e-6);
}

TEST(family_facts, estimator_names_round_trip) {
    for (estimator k : {estimator::gae, estimator::td_lambda, estimator::vtrace, estimator::discounted_returns,
                        estimator::retrace, estimator::q_lambda, estimator::n_step_returns, estimator::episodic_sum})
        EXPECT_EQ(puffadv::estimator_from_name(puffadv::estimator_name(k)), k);
    EXPECT_EQ(static_cast<int>(estimator::discounted_returns), 3);
    EXPECT_EQ(static_cast<int>(estimator::episodic_sum), 7);
    try {
        puffadv::estimator_from_name("retrace_lambda");
        ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& error) {
        EXPECT_NE(std::string(error.what()).find("'retrace_lambda'"), std::string::npos) << error.what();
        EXPECT_NE(std::string(error.what()).find("'n_step_returns'"), std::string::npos) << error.what();
    }
}

TEST(family_facts, q_lambda_float32_rounding_scales_with_the_returns_not_next_values) {
    // One row of two steps, time-contiguous (the tile path) or with steps 2 apart (the block path).
    for (const std::int64_t step : {1, 2}) {
        // Step 1 at index `step`: {x0, x1, x1, x1} serves both strides.
        const float r[4] = {-0.5357f, 0.3616f, 0.3616f, 0.3616f}, q[4] = {-0.2188f, -1.2459f, -1.2459f, -1.2459f},
                    nv[4] = {1e3f, 0.0f, 0.0f, 0.0f};
        const bool term[4] = {false, true, true, true};
        float got[4] = {NAN, NAN, NAN, NAN};
        auto view = [step](const void* data, puffadv::dtype type) {
            puffadv::matrix m;
            m.data = const_cast<void*>(data);
            m.type = type;
            m.rows = 1;
            m.cols = 2;
            m.row_stride = 4;
            m.col_stride = step;
            return m;
        };
        auto at = [step](const auto* x, int t) { return x[t * step]; };
        puffadv::standard_arrays a;
        a.rewards = view(r, puffadv::dtype::float32);
        a.values = view(q, puffadv::dtype::float32);
        a.next_values = view(nv, puffadv::dtype::float32);
        a.terminated = view(term, puffadv::dtype::boolean);
        a.fused.returns = view(got, puffadv::dtype::float32);
        puffadv::standard_params p;
        p.kind = estimator::q_lambda;
        p.gamma = 0.9;
        p.lambda = 1.0;
        puffadv::compute_standard_estimate(a, p);
        const double want0 = double(r[0]) + 0.9 * double(r[1]);
        EXPECT_LT(std::fabs(at(got, 0) - want0) / std::fabs(want0), 1e-6) << "step " << step << ": " << at(got, 0);
        EXPECT_NEAR(at(got, 1), r[1], 1e-6) << "step " << step;
    }
}

// The target G does not read q_values (rlax: lambda-returns over r, discount and max_a Q(s_{t+1}, a)):
// a NaN in q_values[:, t] makes advantages[:, t] = G_t - q_t alone NaN; every return and every other
// advantage is bitwise that of a clean call. Steps 0, 255 and 256 (both sides of a tile's chunk) and
// the last, in the time-contiguous (tile) and time-major (block) paths.
TEST(family_facts, q_lambda_nan_q_value_reaches_its_own_advantage_only) {
    for (const bool watkins : {false, true})
        for (layout l : {layout::row_major, layout::time_major}) {
            call_options o;
            o.values = o.truncated = o.next_values = true;
            o.greedy = watkins;
            const episodes clean = random_episodes<float>(12, 300, 11);
            episodes e = clean;
            const std::int64_t nan_steps[] = {0, 100, 255, 256, 299};
            for (std::int64_t r = 0; r < e.rows; ++r)
                for (std::int64_t t : nan_steps) e.values.at(r, t) = std::numeric_limits<double>::quiet_NaN();
            family_call<float> dirty_call(e, o, l), clean_call(clean, o, l);
            puffadv::compute_standard_estimate(dirty_call.arrays, params_of(estimator::q_lambda, o));
            puffadv::compute_standard_estimate(clean_call.arrays, params_of(estimator::q_lambda, o));
            const std::string where = std::string(watkins ? "watkins " : "peng ") + puff_test::layout_name(l);
            for (std::int64_t r = 0; r < e.rows; ++r)
                for (std::int64_t t = 0; t < e.horizon; ++t) {
                    const float g = dirty_call.returns.at(r, t), g_clean = clean_call.returns.at(r, t);
                    EXPECT_EQ(std::memcmp(&g, &g_clean, sizeof g), 0) << where << " row " << r << " step " << t;
                    const float a = dirty_call.advantages.at(r, t), a_clean = clean_call.advantages.at(r, t);
                    if (std::isnan(e.values.at(r, t)))
                        EXPECT_TRUE(std::isnan(a)) << where << " row " << r << " step " << t;
                    else
                        EXPECT_EQ(std::memcmp(&a, &a_clean, sizeof a), 0) << where << " row " << r << " step " << t;
                }
        }
}

}  // namespace
