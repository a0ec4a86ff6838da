// The estimator family beyond GAE / TD(lambda) / V-trace through the C++ API
// (compute_standard_estimate): each kind against a naive float64 reference
// written here from docs/conventions.md (branches, not the kernels' masked
// arithmetic), in every layout, float32 and float64, outputs poisoned first;
// and bad arguments as std::invalid_argument naming what the caller passed.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <puffadv/conventions.hpp>

#include "reference.hpp"

namespace {

using puff_test::grid;
using puff_test::layout;
using puff_test::strided_array;
using puffadv::estimator;

constexpr double kGamma = 0.9, kLambda = 0.8, kClip = 1.0;

// ---------------------------------------------------------------- float64 reference

struct episodes {
    std::int64_t rows, horizon;
    grid rewards, values, terminated, truncated, bootstrap, next_values, target, behaviour, greedy;
    std::vector<double> last_value;
};

/// Random episodes: ~10 % terminations, ~8 % truncations (never both), both also
/// at the first and last steps of some rows; probabilities in [0.05, 1.05).
/// Values are rounded to T, so the reference reads what the kernel reads.
template <typename T>
episodes random_episodes(std::int64_t rows, std::int64_t horizon, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    episodes e{rows, horizon, grid(rows, horizon), grid(rows, horizon), grid(rows, horizon), grid(rows, horizon),
               grid(rows, horizon), grid(rows, horizon), grid(rows, horizon), grid(rows, horizon),
               grid(rows, horizon), std::vector<double>(static_cast<std::size_t>(rows))};
    auto real = [&](double x) { return static_cast<double>(static_cast<T>(x)); };
    for (std::int64_t r = 0; r < rows; ++r) {
        e.last_value[static_cast<std::size_t>(r)] = real(normal(rng));
        for (std::int64_t t = 0; t < horizon; ++t) {
            const double u = uniform(rng);
            const bool edge = t == 0 || t == horizon - 1;
            e.terminated.at(r, t) = u < (edge ? 0.25 : 0.1) ? 1.0 : 0.0;
            e.truncated.at(r, t) = e.terminated.at(r, t) == 0.0 && uniform(rng) < (edge ? 0.3 : 0.08) ? 1.0 : 0.0;
            e.rewards.at(r, t) = real(normal(rng));
            e.values.at(r, t) = real(normal(rng));
            e.bootstrap.at(r, t) = real(normal(rng));
            e.next_values.at(r, t) = real(normal(rng));
            e.target.at(r, t) = real(0.05 + uniform(rng));
            e.behaviour.at(r, t) = real(0.05 + uniform(rng));
            e.greedy.at(r, t) = uniform(rng) < 0.7 ? 1.0 : 0.0;
        }
    }
    return e;
}

/// What a call passes besides rewards and terminated.
struct call_options {
    bool values = false, truncated = false, last_value = false, bootstrap = false, next_values = false,
         probs = false, log_probs = false, greedy = false, reset_at_start = false;
    std::int64_t n = 1;
};

struct estimate {
    grid advantages, returns;
};

// V'_t: the next state's value as the standard conventions read it.
double value_after(const episodes& e, const call_options& o, std::int64_t r, std::int64_t t) {
    if (o.truncated && e.truncated.at(r, t) != 0.0) return e.bootstrap.at(r, t);
    if (t == e.horizon - 1) {
        if (o.last_value) return e.last_value[static_cast<std::size_t>(r)];
        if (o.bootstrap) return e.bootstrap.at(r, t);
        return 0.0;
    }
    return o.values ? e.values.at(r, t + 1) : 0.0;
}

estimate reference(estimator kind, const episodes& e, const call_options& o) {
    const std::int64_t H = e.horizon;
    estimate out{grid(e.rows, H), grid(e.rows, H)};
    auto term = [&](std::int64_t r, std::int64_t t) { return e.terminated.at(r, t) != 0.0; };
    auto done = [&](std::int64_t r, std::int64_t t) {
        return term(r, t) || (o.truncated && e.truncated.at(r, t) != 0.0);
    };
    auto value = [&](std::int64_t r, std::int64_t t) { return o.values ? e.values.at(r, t) : 0.0; };
    for (std::int64_t r = 0; r < e.rows; ++r) {
        if (kind == estimator::episodic_sum) {
            double c = o.last_value ? e.last_value[static_cast<std::size_t>(r)] : 0.0;
            for (std::int64_t t = 0; t < H; ++t) {
                const bool reset = o.reset_at_start ? term(r, t) : (t > 0 && term(r, t - 1));
                c = e.rewards.at(r, t) + (reset ? 0.0 : kGamma * kLambda * c);
                out.advantages.at(r, t) = out.returns.at(r, t) = c;
            }
            continue;
        }
        if (kind == estimator::n_step_returns) {
            for (std::int64_t t = 0; t < H; ++t) {
                const std::int64_t end = std::min<std::int64_t>(t + o.n, H);  // the window [t, end)
                double w = 0.0;
                for (std::int64_t s = end - 1; s >= t; --s) {
                    const double vp = value_after(e, o, r, s);
                    const double boot = term(r, s) ? 0.0 : kGamma * vp;
                    if (s == end - 1 || done(r, s))
                        w = e.rewards.at(r, s) + boot;
                    else
                        w = e.rewards.at(r, s) + kGamma * ((1 - kLambda) * vp + kLambda * w);
                }
                out.returns.at(r, t) = w;
                out.advantages.at(r, t) = w - value(r, t);
            }
            continue;
        }
        double later = 0.0;  // G_{t+1} or Delta_{t+1}
        for (std::int64_t t = H - 1; t >= 0; --t) {
            const bool cut = done(r, t) || t == H - 1;
            double result = 0.0;
            switch (kind) {
                case estimator::discounted_returns:
                    result = e.rewards.at(r, t) + (term(r, t) ? 0.0 : kGamma * value_after(e, o, r, t)) +
                             (cut ? 0.0 : kGamma * later);
                    out.returns.at(r, t) = out.advantages.at(r, t) = result;
                    break;
                case estimator::retrace: {
                    result = e.rewards.at(r, t) + (term(r, t) ? 0.0 : kGamma * e.next_values.at(r, t)) -
                             e.values.at(r, t);
                    if (!cut) {
                        // With log_probs the call gets log pi and log mu of these same probabilities.
                        const double ratio = e.target.at(r, t + 1) / e.behaviour.at(r, t + 1);
                        result += kGamma * kLambda * std::fmin(kClip, ratio) * later;
                    }
                    out.advantages.at(r, t) = result;
                    out.returns.at(r, t) = result + e.values.at(r, t);
                    break;
                }
                case estimator::q_lambda: {
                    double g;
                    if (cut) {
                        g = e.rewards.at(r, t) + (term(r, t) ? 0.0 : kGamma * e.next_values.at(r, t));
                    } else {
                        const double lt = kLambda * (o.greedy ? e.greedy.at(r, t + 1) : 1.0);
                        g = e.rewards.at(r, t) + kGamma * ((1 - lt) * e.next_values.at(r, t) + lt * later);
                    }
                    result = g;
                    out.returns.at(r, t) = g;
                    out.advantages.at(r, t) = g - e.values.at(r, t);
                    break;
                }
                default: break;
            }
            later = result;
        }
    }
    return out;
}

// ---------------------------------------------------------------- calls

/// Host arrays of one call in one layout and dtype, outputs NaN-poisoned.
template <typename T>
struct family_call {
    static constexpr puffadv::dtype type = sizeof(T) == 4 ? puffadv::dtype::float32 : puffadv::dtype::float64;
    strided_array<T> rewards, values, terminated, truncated, bootstrap, next_values, target, behaviour, greedy;
    strided_array<T> advantages, returns;
    std::vector<T> last_value;
    std::vector<double> sums;
    puffadv::standard_arrays arrays;

    family_call(const episodes& e, const call_options& o, layout l)
        : rewards(e.rows, e.horizon, l), values(e.rows, e.horizon, l), terminated(e.rows, e.horizon, l),
          truncated(e.rows, e.horizon, l), bootstrap(e.rows, e.horizon, l), next_values(e.rows, e.horizon, l),
          target(e.rows, e.horizon, l), behaviour(e.rows, e.horizon, l), greedy(e.rows, e.horizon, l),
          advantages(e.rows, e.horizon, l), returns(e.rows, e.horizon, l),
          sums(static_cast<std::size_t>(e.rows), std::numeric_limits<double>::quiet_NaN()) {
        rewards.fill_from(e.rewards);
        terminated.fill_from(e.terminated);
        arrays.rewards = rewards.view;
        arrays.terminated = terminated.view;
        auto add = [](strided_array<T>& a, const grid& g, std::optional<puffadv::matrix>& slot) {
            a.fill_from(g);
            slot = a.view;
        };
        if (o.values) add(values, e.values, arrays.values);
        if (o.truncated) add(truncated, e.truncated, arrays.truncated);
        if (o.bootstrap) add(bootstrap, e.bootstrap, arrays.bootstrap_values);
        if (o.next_values) add(next_values, e.next_values, arrays.next_values);
        if (o.greedy) add(greedy, e.greedy, arrays.greedy);
        if (o.probs) {
            grid t = e.target, b = e.behaviour;
            if (o.log_probs)
                for (std::size_t i = 0; i < t.data.size(); ++i)
                    t.data[i] = std::log(t.data[i]), b.data[i] = std::log(b.data[i]);
            add(target, t, arrays.target_probs);
            add(behaviour, b, arrays.behaviour_probs);
        }
        if (o.last_value) {
            last_value.assign(e.last_value.begin(), e.last_value.end());
            puffadv::matrix m;
            m.data = last_value.data();
            m.type = type;
            m.rows = e.rows;
            m.cols = 1;
            m.row_stride = 1;
            m.ndim = 1;
            arrays.last_value = m;
        }
        arrays.advantages = advantages.view;
        arrays.fused.returns = returns.view;
        puffadv::matrix s;
        s.data = sums.data();
        s.type = puffadv::dtype::float64;
        s.rows = e.rows;
        s.cols = 1;
        s.row_stride = 1;
        s.ndim = 1;
        arrays.fused.sums = s;
    }
};

puffadv::standard_params params_of(estimator kind, const call_options& o) {
    puffadv::standard_params p;
    p.kind = kind;
    p.gamma = kGamma;
    p.lambda = kLambda;
    p.c_clip = kClip;
    p.n = o.n;
    p.log_probs = o.log_probs;
    p.reset_at_start = o.reset_at_start;
    return p;
}

struct family_case {
    const char* label;
    estimator kind;
    call_options options;
};

std::vector<family_case> family_cases() {
    std::vector<family_case> cases;
    call_options o;
    o.truncated = o.bootstrap = true;
    cases.push_back({"discounted_returns", estimator::discounted_returns, o});
    cases.push_back({"discounted_returns_no_bootstrap", estimator::discounted_returns, call_options{}});
    call_options lv;
    lv.last_value = true;
    cases.push_back({"discounted_returns_last_value", estimator::discounted_returns, lv});
    call_options rt;
    rt.values = rt.truncated = rt.next_values = rt.probs = true;
    cases.push_back({"retrace", estimator::retrace, rt});
    rt.log_probs = true;
    cases.push_back({"retrace_log_probs", estimator::retrace, rt});
    call_options q;
    q.values = q.truncated = q.next_values = true;
    cases.push_back({"q_lambda_peng", estimator::q_lambda, q});
    q.greedy = true;
    cases.push_back({"q_lambda_watkins", estimator::q_lambda, q});
    // 65 and 100: past 64 steps and short of the 530- and 600-step rows, the O(T) pass.
    for (std::int64_t n : {1, 3, 65, 100, 1000}) {
        call_options ns;
        ns.values = ns.truncated = ns.bootstrap = true;
        ns.n = n;
        cases.push_back({n == 1    ? "n_step_1"
                         : n == 3  ? "n_step_3"
                         : n == 65 ? "n_step_65"
                         : n == 100 ? "n_step_100"
                                    : "n_step_1000",
                         estimator::n_step_returns, ns});
    }
    call_options nl;
    nl.values = nl.last_value = true;
    nl.n = 4;
    cases.push_back({"n_step_4_last_value", estimator::n_step_returns, nl});
    cases.push_back({"episodic_cumsum", estimator::episodic_sum, call_options{}});
    call_options seeded;
    seeded.last_value = true;
    cases.push_back({"episodic_seed", estimator::episodic_sum, seeded});
    seeded.reset_at_start = true;
    cases.push_back({"episodic_starts_at", estimator::episodic_sum, seeded});
    return cases;
}

template <typename T>
void check_episodes(const family_case& c, layout l, const episodes& e) {
    const std::int64_t rows = e.rows, horizon = e.horizon;
    const estimate want = reference(c.kind, e, c.options);
    family_call<T> call(e, c.options, l);
    puffadv::compute_standard_estimate(call.arrays, params_of(c.kind, c.options));
    const double tol = sizeof(T) == 8 ? 1e-12 : 2e-6;
    const std::string where = std::string(c.label) + " " + puff_test::layout_name(l) + " " +
                              (sizeof(T) == 8 ? "float64" : "float32") + " " + std::to_string(rows) + "x" +
                              std::to_string(horizon);
    EXPECT_LT(puff_test::relative_error(call.advantages.to_vector(), want.advantages), tol) << where;
    EXPECT_LT(puff_test::relative_error(call.returns.to_vector(), want.returns), tol) << where;
    for (std::int64_t r = 0; r < rows; ++r) {
        double s = 0.0;
        for (std::int64_t t = 0; t < horizon; ++t) s += want.advantages.at(r, t);
        EXPECT_NEAR(call.sums[static_cast<std::size_t>(r)], s, tol * 10 * (1 + std::fabs(s))) << where << " row " << r;
    }
}

template <typename T>
void check_case(const family_case& c, layout l, std::int64_t rows, std::int64_t horizon) {
    check_episodes<T>(c, l, random_episodes<T>(rows, horizon, 1234 + rows * 7 + horizon));
}

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

TEST(family_arguments, outputs_must_not_alias_the_new_inputs) {
    const episodes e = random_episodes<float>(4, 6, 5);
    call_options rt = options_for(estimator::retrace);
    family_call<float> call(e, rt, layout::row_major);
    call.arrays.advantages = *call.arrays.next_values;
    expect_invalid([&] { puffadv::compute_standard_estimate(call.arrays, params_of(estimator::retrace, rt)); },
                   {"advantages", "overlaps", "next_values"});
}

TEST(family_arguments, a_step_both_terminated_and_truncated_is_named) {
    episodes e = random_episodes<double>(3, 5, 11);
    e.terminated.at(2, 3) = 1.0;
    e.truncated.at(2, 3) = 1.0;
    call_options rt = options_for(estimator::retrace);
    rt.truncated = true;
    family_call<double> call(e, rt, layout::time_major);
    expect_invalid([&] { puffadv::compute_standard_estimate(call.arrays, params_of(estimator::retrace, rt)); },
                   {"row 2", "step 3"});
}

}  // namespace
