// Shared by the C++ tests of the estimator family (test_family.cpp: results;
// test_family_arguments.cpp: bad arguments): random episodes, a naive float64
// reference written from docs/conventions.md (branches, not the kernels' masked
// arithmetic), and host arrays of one call in one layout and dtype.
#pragma once

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

namespace family_test {


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
    grid gamma, lambda;  // per-step gamma_t, lambda_t in [0, 1) (read with call_options::per_step)
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
               grid(rows, horizon), std::vector<double>(static_cast<std::size_t>(rows)), grid(rows, horizon),
               grid(rows, horizon)};
    auto real = [&](double x) { return static_cast<double>(static_cast<T>(x)); };
    std::mt19937_64 steps(seed + 1);  // apart, so the other arrays are those of the seed alone
    for (std::size_t i = 0; i < e.gamma.data.size(); ++i)
        e.gamma.data[i] = real(uniform(steps)), e.lambda.data[i] = real(uniform(steps));
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
         probs = false, log_probs = false, greedy = false, reset_at_start = false, per_step = false,
         per_step_lambda = true;  // with per_step: lambda too (discounted_returns refuses it)
    std::int64_t n = 1;
};

struct estimate {
    grid advantages, returns;
};

// V'_t: the next state's value as the standard conventions read it.
inline double value_after(const episodes& e, const call_options& o, std::int64_t r, std::int64_t t) {
    if (o.truncated && e.truncated.at(r, t) != 0.0) return e.bootstrap.at(r, t);
    if (t == e.horizon - 1) {
        if (o.last_value) return e.last_value[static_cast<std::size_t>(r)];
        if (o.bootstrap) return e.bootstrap.at(r, t);
        return 0.0;
    }
    return o.values ? e.values.at(r, t + 1) : 0.0;
}

inline estimate reference(estimator kind, const episodes& e, const call_options& o) {
    const std::int64_t H = e.horizon;
    estimate out{grid(e.rows, H), grid(e.rows, H)};
    auto term = [&](std::int64_t r, std::int64_t t) { return e.terminated.at(r, t) != 0.0; };
    auto done = [&](std::int64_t r, std::int64_t t) {
        return term(r, t) || (o.truncated && e.truncated.at(r, t) != 0.0);
    };
    auto value = [&](std::int64_t r, std::int64_t t) { return o.values ? e.values.at(r, t) : 0.0; };
    // gamma_t and lambda_t, each read at step t (docs/semantics.md: per-step discounts and lambda).
    auto gamma_at = [&](std::int64_t r, std::int64_t t) { return o.per_step ? e.gamma.at(r, t) : kGamma; };
    auto lambda_at = [&](std::int64_t r, std::int64_t t) {
        return o.per_step && o.per_step_lambda ? e.lambda.at(r, t) : kLambda;
    };
    for (std::int64_t r = 0; r < e.rows; ++r) {
        if (kind == estimator::episodic_sum) {
            double c = o.last_value ? e.last_value[static_cast<std::size_t>(r)] : 0.0;
            for (std::int64_t t = 0; t < H; ++t) {
                const bool reset = o.reset_at_start ? term(r, t) : (t > 0 && term(r, t - 1));
                c = e.rewards.at(r, t) + (reset ? 0.0 : gamma_at(r, t) * lambda_at(r, t) * c);
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
                    const double g = gamma_at(r, s), l = lambda_at(r, s);
                    const double boot = term(r, s) ? 0.0 : g * vp;
                    if (s == end - 1 || done(r, s))
                        w = e.rewards.at(r, s) + boot;
                    else
                        w = e.rewards.at(r, s) + g * ((1 - l) * vp + l * w);
                }
                out.returns.at(r, t) = w;
                out.advantages.at(r, t) = w - value(r, t);
            }
            continue;
        }
        double later = 0.0;  // G_{t+1} or Delta_{t+1}
        for (std::int64_t t = H - 1; t >= 0; --t) {
            const bool cut = done(r, t) || t == H - 1;
            const double gamma_t = gamma_at(r, t), lambda_t = lambda_at(r, t);  // step t's
            double result = 0.0;
            switch (kind) {
                case estimator::discounted_returns:
                    result = e.rewards.at(r, t) + (term(r, t) ? 0.0 : gamma_t * value_after(e, o, r, t)) +
                             (cut ? 0.0 : gamma_t * later);
                    out.returns.at(r, t) = out.advantages.at(r, t) = result;
                    break;
                case estimator::retrace: {
                    result = e.rewards.at(r, t) + (term(r, t) ? 0.0 : gamma_t * e.next_values.at(r, t)) -
                             e.values.at(r, t);
                    if (!cut) {
                        // With log_probs the call gets log pi and log mu of these same probabilities.
                        const double ratio = e.target.at(r, t + 1) / e.behaviour.at(r, t + 1);
                        result += gamma_t * lambda_t * std::fmin(kClip, ratio) * later;
                    }
                    out.advantages.at(r, t) = result;
                    out.returns.at(r, t) = result + e.values.at(r, t);
                    break;
                }
                case estimator::q_lambda: {
                    double g;
                    if (cut) {
                        g = e.rewards.at(r, t) + (term(r, t) ? 0.0 : gamma_t * e.next_values.at(r, t));
                    } else {
                        const double lt = lambda_t * (o.greedy ? e.greedy.at(r, t + 1) : 1.0);
                        g = e.rewards.at(r, t) + gamma_t * ((1 - lt) * e.next_values.at(r, t) + lt * later);
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
    strided_array<T> advantages, returns, gamma, lambda;
    std::vector<T> last_value;
    std::vector<double> sums;
    puffadv::standard_arrays arrays;

    family_call(const episodes& e, const call_options& o, layout l)
        : rewards(e.rows, e.horizon, l), values(e.rows, e.horizon, l), terminated(e.rows, e.horizon, l),
          truncated(e.rows, e.horizon, l), bootstrap(e.rows, e.horizon, l), next_values(e.rows, e.horizon, l),
          target(e.rows, e.horizon, l), behaviour(e.rows, e.horizon, l), greedy(e.rows, e.horizon, l),
          advantages(e.rows, e.horizon, l), returns(e.rows, e.horizon, l), gamma(e.rows, e.horizon, l),
          lambda(e.rows, e.horizon, l),
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
        if (o.per_step) add(gamma, e.gamma, arrays.gamma);
        if (o.per_step && o.per_step_lambda) add(lambda, e.lambda, arrays.lambda);
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

inline puffadv::standard_params params_of(estimator kind, const call_options& o) {
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

inline std::vector<family_case> family_cases() {
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

}  // namespace family_test
