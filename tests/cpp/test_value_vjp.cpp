// value_vjp (the backward of GAE / TD(lambda) with the bootstrap pair and of
// discounted returns) through the C++ API, against a float64 reference that
// knows nothing of adjoints: the forward is linear in rewards and values, so
// dL/dr_t and dL/dV_t are L of the forward run on the unit input at (row, t),
// L = sum(w_A * A + w_R * (A + V)). Random per-step or scalar gamma / lambda,
// importance ratios on both sides of their clips (leaky V-trace's alpha too),
// episode ends at the first and last steps, truncations (some steps flagged
// both), row-major, time-major and strided views, float32 and float64; errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <puffadv/conventions.hpp>

#include "strided_grid.hpp"

namespace {

using puffadv::dtype;
using puffadv::estimator;
using puffadv::matrix;

using puffadv_test::dtype_of;
using puffadv_test::grid;
using puffadv_test::layout;

struct episode {
    std::int64_t horizon;
    std::vector<double> gamma, lambda;  // per step
    std::vector<bool> terminated, truncated;
    std::vector<double> rho, c;  // the clipped ratios (1 without ratios)
};

struct ratio_case {
    bool present = false;
    double rho_clip = 1.0, c_clip = 1.0, alpha = 1.0;
    double clipped(double x, double clip) const { return alpha * std::min(x, clip) + (1 - alpha) * x; }
};

// One row's GAE (lambda = 1 and no values: discounted returns), bootstrap 0, in float64.
std::vector<double> forward(const episode& e, const std::vector<double>& r, const std::vector<double>& v) {
    const std::int64_t T = e.horizon;
    std::vector<double> a(std::size_t(T), 0.0);
    double later = 0;
    for (std::int64_t t = T - 1; t >= 0; --t) {
        const std::size_t i = std::size_t(t);
        const bool end = e.truncated[i] || t == T - 1;
        const double next = end ? 0.0 : v[i + 1];
        const double delta = e.rho[i] * (r[i] + (e.terminated[i] ? 0.0 : e.gamma[i] * next) - v[i]);
        const bool cut = e.terminated[i] || e.truncated[i] || t == T - 1;
        later = a[i] = delta + (cut ? 0.0 : e.gamma[i] * e.lambda[i] * e.c[i] * later);
    }
    return a;
}

template <typename T>
void check(std::int64_t rows, std::int64_t horizon, layout l, bool per_step, bool values, unsigned seed,
           const ratio_case& ratios = {}) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> normal(-1, 1), unit(0, 1);
    const std::size_t n = std::size_t(rows * horizon);
    std::vector<episode> eps;
    std::vector<double> w_a(n), w_r(n);
    for (auto& x : w_a) x = T(normal(rng));
    for (auto& x : w_r) x = values ? T(normal(rng)) : 0.0;
    grid<T> total(rows, horizon, l), returns_cot(rows, horizon, l), term(rows, horizon, l), trunc(rows, horizon, l),
        gamma(rows, horizon, l), lambda(rows, horizon, l), grad_r(rows, horizon, l), grad_v(rows, horizon, l),
        importance(rows, horizon, l);
    const double g0 = 0.97, l0 = values ? 0.9 : 1.0;
    for (std::int64_t r = 0; r < rows; ++r) {
        episode e{horizon, {}, {}, {}, {}, {}, {}};
        for (std::int64_t t = 0; t < horizon; ++t) {
            const bool edge = (r % 3 == 0 && t == 0) || (r % 3 == 1 && t == horizon - 1);
            const bool te = edge || unit(rng) < 0.1;
            const bool tr = (r % 3 == 2 && t == 0) || unit(rng) < (te ? 0.3 : 0.05);  // some flagged both
            e.terminated.push_back(te), e.truncated.push_back(tr);
            e.gamma.push_back(per_step ? T(unit(rng)) : g0);
            e.lambda.push_back(per_step && values ? T(unit(rng)) : l0);
            const T ratio = T(ratios.present ? 0.2 + 1.6 * unit(rng) : 1.0);  // both sides of the clips
            importance.at(r, t) = ratio;
            e.rho.push_back(ratios.present ? ratios.clipped(ratio, ratios.rho_clip) : 1.0);
            e.c.push_back(ratios.present ? ratios.clipped(ratio, ratios.c_clip) : 1.0);
            const std::size_t i = std::size_t(r * horizon + t);
            total.at(r, t) = T(w_a[i] + w_r[i]), returns_cot.at(r, t) = T(w_r[i]);
            term.at(r, t) = T(te), trunc.at(r, t) = T(tr);
            gamma.at(r, t) = T(e.gamma.back()), lambda.at(r, t) = T(e.lambda.back());
            grad_r.at(r, t) = grad_v.at(r, t) = std::numeric_limits<T>::quiet_NaN();
        }
        eps.push_back(e);
    }
    puffadv::standard_arrays a;
    a.rewards = total.view;
    if (values) a.values = returns_cot.view;
    a.terminated = term.view;
    a.truncated = trunc.view;
    if (per_step) {
        a.gamma = gamma.view;
        if (values) a.lambda = lambda.view;
    }
    if (ratios.present) a.importance = importance.view;
    a.advantages = grad_r.view;
    if (values) a.fused.returns = grad_v.view;
    puffadv::standard_params p;
    p.kind = estimator::value_vjp;
    p.gamma = g0, p.lambda = l0;
    p.rho_clip = ratios.rho_clip, p.c_clip = ratios.c_clip, p.alpha = ratios.alpha;
    puffadv::compute_standard_estimate(a, p);

    const double tol = sizeof(T) == 8 ? 1e-11 : 1e-4;
    for (std::int64_t r = 0; r < rows; ++r) {
        const episode& e = eps[std::size_t(r)];
        std::vector<double> wa(w_a.begin() + r * horizon, w_a.begin() + (r + 1) * horizon);
        std::vector<double> wr(w_r.begin() + r * horizon, w_r.begin() + (r + 1) * horizon);
        for (std::int64_t t = 0; t < horizon; ++t) {
            for (int which = 0; which < (values ? 2 : 1); ++which) {
                std::vector<double> unit_in(std::size_t(horizon), 0.0), zero(std::size_t(horizon), 0.0);
                unit_in[std::size_t(t)] = 1.0;
                const auto adv = which == 0 ? forward(e, unit_in, zero) : forward(e, zero, unit_in);
                double want = 0;  // L = sum w_A A + w_R (A + V)
                for (std::int64_t s = 0; s < horizon; ++s)
                    want += (wa[std::size_t(s)] + wr[std::size_t(s)]) * adv[std::size_t(s)] +
                            (which == 1 && s == t ? wr[std::size_t(s)] : 0.0);
                const double got = which == 0 ? double(grad_r.at(r, t)) : double(grad_v.at(r, t));
                ASSERT_NEAR(got, want, tol * std::max(1.0, std::fabs(want)))
                    << (which ? "dL/dV" : "dL/dr") << " " << rows << "x" << horizon << " layout " << int(l)
                    << " per_step " << per_step << " ratios " << ratios.present << " alpha " << ratios.alpha
                    << " at " << r << ", " << t;
            }
        }
    }
}

TEST(value_vjp, matches_the_float64_reference) {
    unsigned seed = 1;
    for (layout l : {layout::row_major, layout::time_major, layout::strided})
        for (std::int64_t horizon : {1, 2, 7, 37, 70})
            for (bool per_step : {false, true})
                for (bool values : {true, false}) {  // GAE / TD(lambda); discounted returns (lambda 1, no V)
                    check<double>(7, horizon, l, per_step, values, seed++);
                    check<float>(7, horizon, l, per_step, values, seed++);
                }
    // Importance ratios (GAE / TD(lambda) with ratios, V-trace's vs), plain and leaky.
    for (const ratio_case& ratios : {ratio_case{true, 1.0, 0.9, 1.0}, ratio_case{true, 1.3, 1.0, 0.6}})
        for (layout l : {layout::row_major, layout::time_major, layout::strided})
            for (std::int64_t horizon : {1, 2, 37, 70})
                for (bool per_step : {false, true}) {
                    check<double>(7, horizon, l, per_step, true, seed++, ratios);
                    check<float>(7, horizon, l, per_step, true, seed++, ratios);
                }
    for (std::int64_t rows : {2, 3, 4, 8, 16})
        check<double>(rows, 37, layout::time_major, true, true, seed++, ratio_case{true, 1.0, 0.9, 1.0});
    // Time-major with 2, 4 or 8 rows: a forward scan walked interleaved; 12 and 16: flat.
    for (std::int64_t rows : {2, 4, 8, 12, 16})
        for (std::int64_t horizon : {1, 3, 37})
            for (bool per_step : {false, true}) {
                check<double>(rows, horizon, layout::time_major, per_step, true, seed++);
                check<float>(rows, horizon, layout::time_major, per_step, true, seed++);
            }
}

TEST(value_vjp, bad_arguments_are_named) {
    grid<float> u(2, 3, layout::row_major), flags(2, 3, layout::row_major), out(2, 3, layout::row_major);
    grid<float> bad(2, 4, layout::row_major);
    std::vector<float> seed(2, 0.f);
    puffadv::standard_arrays a;
    a.rewards = u.view, a.terminated = flags.view, a.advantages = out.view;
    puffadv::standard_params p;
    p.kind = estimator::value_vjp;
    puffadv::standard_arrays with_last = a;
    matrix last;
    last.data = seed.data(), last.type = dtype::float32, last.rows = 2, last.cols = 1, last.row_stride = 1,
    last.ndim = 1;
    with_last.last_value = last;
    try {
        puffadv::compute_standard_estimate(with_last, p);
        FAIL() << "last_value accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("value_vjp takes no last_value"), std::string::npos) << e.what();
    }
    puffadv::standard_arrays wrong = a;
    wrong.values = bad.view;
    try {
        puffadv::compute_standard_estimate(wrong, p);
        FAIL() << "a grad_returns of another shape accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("grad_returns"), std::string::npos) << e.what();
    }
    puffadv::standard_arrays no_output = a;
    no_output.advantages.reset();
    EXPECT_THROW(puffadv::compute_standard_estimate(no_output, p), std::invalid_argument);
}

}  // namespace
