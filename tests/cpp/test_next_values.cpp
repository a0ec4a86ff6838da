// Issue 29 through the C++ API: next_values for gae, td_lambda, vtrace and
// n_step_returns, V-trace's sample_mask and leaky alpha, with scalar or per-step
// gamma and lambda, against float64 loops written here from docs/semantics.md
// (not from the kernels), in both time layouts and both float dtypes; and their
// named errors.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <puffadv/conventions.hpp>

namespace {

using puffadv::estimator;
using puffadv::matrix;

constexpr std::int64_t rows = 6, horizon = 23;

// One call's inputs as float64, [rows, horizon] row-major.
struct inputs {
    std::vector<double> r, v, nv, ratio, gamma, lambda;  // gamma_t, lambda_t: per step
    std::vector<std::uint8_t> term, trunc, mask;
    explicit inputs(unsigned seed) {
        std::mt19937 g(seed);
        std::normal_distribution<double> normal;
        std::uniform_real_distribution<double> unit(0.0, 1.0);
        const std::size_t n = rows * horizon;
        r.resize(n), v.resize(n), nv.resize(n), ratio.resize(n), term.resize(n), trunc.resize(n), mask.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
            r[i] = normal(g), v[i] = normal(g), nv[i] = normal(g), ratio[i] = std::exp(0.5 * normal(g));
            const double u = unit(g);
            term[i] = u < 0.1, trunc[i] = u > 0.92, mask[i] = unit(g) > 0.25;
        }
        for (std::int64_t b = 0; b < rows; ++b) {  // episode ends at the first and last steps
            term[b * horizon] = b % 2 == 0, trunc[b * horizon] = b % 2 == 1;
            term[b * horizon + horizon - 1] = b % 3 == 0, trunc[b * horizon + horizon - 1] = 0;
        }
        gamma.assign(n, 0.9), lambda.assign(n, 0.8);
    }
    // Per-step gamma_t, lambda_t in [0.5, 1), NaN where no formula reads them: gamma at
    // a terminated step, lambda at a done one (the flags select them away).
    inputs& per_step(unsigned seed) {
        std::mt19937 g(seed);
        std::uniform_real_distribution<double> high(0.5, 1.0);
        for (std::size_t i = 0; i < gamma.size(); ++i) {
            gamma[i] = term[i] ? std::nan("") : high(g);
            lambda[i] = term[i] || trunc[i] ? std::nan("") : high(g);
        }
        return *this;
    }
};

// The references: GAE / V-trace (leaky alpha, sample_mask) and TD(lambda) with next_values.
struct reference {
    std::vector<double> adv, ret;
};

reference vtrace_reference(const inputs& x, double alpha, bool pg, bool masked) {
    reference out{std::vector<double>(rows * horizon), std::vector<double>(rows * horizon)};
    auto mix = [alpha](double ratio, double clip) { return alpha * std::min(ratio, clip) + (1 - alpha) * ratio; };
    for (std::int64_t b = 0; b < rows; ++b) {
        double later = 0;
        for (std::int64_t t = horizon - 1; t >= 0; --t) {
            const std::size_t i = b * horizon + t;
            const double gamma = x.gamma[i], lambda = x.lambda[i];
            const bool done = x.term[i] || x.trunc[i];
            const double td = x.r[i] + (x.term[i] ? 0.0 : gamma * x.nv[i]) - x.v[i];
            const double a_next = later;
            double a = mix(x.ratio[i], 1.0) * td + (done ? 0.0 : gamma * lambda * mix(x.ratio[i], 1.0) * later);
            if (masked && !x.mask[i]) a = later;
            later = a;
            out.ret[i] = a + x.v[i];
            if (!pg) {
                out.adv[i] = a;
                continue;
            }
            // vs'_t: V_{t+1} + A_{t+1} inside an episode, next_values_t where it ends.
            const bool inside = !done && t + 1 < horizon;
            const double vs_next = inside ? x.v[i + 1] + a_next : x.nv[i];
            out.adv[i] = mix(x.ratio[i], 1.0) * (x.r[i] + (x.term[i] ? 0.0 : gamma * vs_next) - x.v[i]);
        }
    }
    return out;
}

reference td_lambda_reference(const inputs& x) {
    reference out{std::vector<double>(rows * horizon), std::vector<double>(rows * horizon)};
    for (std::int64_t b = 0; b < rows; ++b) {
        double later = 0;
        for (std::int64_t t = horizon - 1; t >= 0; --t) {
            const std::size_t i = b * horizon + t;
            const double gamma = x.gamma[i], lambda = x.lambda[i];
            const bool cut = x.term[i] || x.trunc[i] || t == horizon - 1;
            later = out.ret[i] = x.r[i] + (x.term[i] ? 0.0
                                          : gamma * (cut ? x.nv[i] : (1 - lambda) * x.nv[i] + lambda * later));
            out.adv[i] = later - x.v[i];
        }
    }
    return out;
}

// A [rows, horizon] array of T, time-major in memory when `time_major` (then viewed with swapped strides).
template <typename T>
struct array {
    std::vector<T> data;
    matrix m;
    array(const std::vector<double>& from, bool time_major) : data(from.size()) {
        m.type = sizeof(T) == 8 ? puffadv::dtype::float64 : puffadv::dtype::float32;
        fill(from, time_major);
    }
    array(const std::vector<std::uint8_t>& from, bool time_major) : data(from.size()) {
        m.type = puffadv::dtype::uint8;
        std::vector<double> d(from.begin(), from.end());
        fill(d, time_major);
    }
    void fill(const std::vector<double>& from, bool time_major) {
        for (std::int64_t b = 0; b < rows; ++b)
            for (std::int64_t t = 0; t < horizon; ++t)
                data[time_major ? t * rows + b : b * horizon + t] = T(from[b * horizon + t]);
        m.data = data.data();
        m.rows = rows, m.cols = horizon;
        m.row_stride = time_major ? 1 : horizon, m.col_stride = time_major ? rows : 1;
    }
    double at(std::int64_t b, std::int64_t t) const { return double(data[b * m.row_stride + t * m.col_stride]); }
};

template <typename T>
void expect_close(const array<T>& got, const std::vector<double>& want, const char* what) {
    const double tolerance = sizeof(T) == 8 ? 1e-12 : 2e-5;
    for (std::int64_t b = 0; b < rows; ++b)
        for (std::int64_t t = 0; t < horizon; ++t) {
            const double w = want[b * horizon + t];
            ASSERT_NEAR(got.at(b, t), w, tolerance * (1 + std::fabs(w))) << what << " row " << b << " step " << t;
        }
}

// per_step: gamma and lambda as per-step arrays (NaN where never read), else the
// scalars 0.9 and 0.8.
template <typename T>
void check_forms(bool time_major, bool per_step) {
    inputs x(7);
    if (per_step) x.per_step(8);
    array<T> r(x.r, time_major), v(x.v, time_major), nv(x.nv, time_major), ratio(x.ratio, time_major);
    array<T> gamma(x.gamma, time_major), lambda(x.lambda, time_major);
    array<std::uint8_t> term(x.term, time_major), trunc(x.trunc, time_major), mask(x.mask, time_major);
    const std::vector<double> nan(rows * horizon, std::nan(""));
    array<T> adv(nan, time_major), ret(nan, time_major);
    auto call = [&](bool importance, bool masked) {
        puffadv::standard_arrays a;
        a.rewards = r.m, a.values = v.m, a.terminated = term.m, a.truncated = trunc.m, a.next_values = nv.m;
        if (importance) a.importance = ratio.m;
        if (masked) a.sample_mask = mask.m;
        if (per_step) a.gamma = gamma.m, a.lambda = lambda.m;
        a.advantages = adv.m;
        a.fused.returns = ret.m;
        return a;
    };
    puffadv::standard_params p;
    p.gamma = 0.9, p.lambda = 0.8;
    // GAE: the V-trace recursion with ratios 1 and alpha 1.
    const inputs ones = [&] { inputs y = x; std::fill(y.ratio.begin(), y.ratio.end(), 1.0); return y; }();
    p.kind = estimator::gae;
    puffadv::compute_standard_estimate(call(false, false), p);
    reference want = vtrace_reference(ones, 1.0, false, false);
    expect_close(adv, want.adv, "gae advantages");
    expect_close(ret, want.ret, "gae returns");
    // TD(lambda): the lambda-return itself (not A + V).
    p.kind = estimator::td_lambda;
    puffadv::compute_standard_estimate(call(false, false), p);
    want = td_lambda_reference(x);
    expect_close(adv, want.adv, "td_lambda advantages");
    expect_close(ret, want.ret, "td_lambda returns");
    // V-trace, then leaky V-trace with a sample mask.
    p.kind = estimator::vtrace;
    puffadv::compute_standard_estimate(call(true, false), p);
    want = vtrace_reference(x, 1.0, true, false);
    expect_close(adv, want.adv, "vtrace pg advantages");
    expect_close(ret, want.ret, "vtrace vs");
    p.alpha = 0.7;
    puffadv::compute_standard_estimate(call(true, true), p);
    want = vtrace_reference(x, 0.7, true, true);
    expect_close(adv, want.adv, "leaky vtrace pg advantages");
    expect_close(ret, want.ret, "leaky vtrace vs");
}

TEST(next_values, forms_match_float64_loops_in_both_layouts) {
    check_forms<double>(false, false);
    check_forms<double>(true, false);
    check_forms<float>(false, false);
    check_forms<float>(true, false);
}

// Issue 29: the forms with per-step gamma_t and lambda_t (TorchRL's gamma tensors beside
// next_state_value), NaN where the flags cut them.
TEST(next_values, forms_take_per_step_gamma_and_lambda) {
    check_forms<double>(false, true);
    check_forms<double>(true, true);
    check_forms<float>(false, true);
    check_forms<float>(true, true);
}

TEST(next_values, named_errors) {
    const inputs x(3);
    array<double> r(x.r, false), v(x.v, false), nv(x.nv, false), out(x.v, false);
    array<std::uint8_t> term(x.term, false), mask(x.mask, false);
    puffadv::standard_arrays a;
    a.rewards = r.m, a.values = v.m, a.terminated = term.m, a.next_values = nv.m, a.advantages = out.m;
    puffadv::standard_params p;
    p.kind = estimator::vtrace;
    p.alpha = 1.5;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message, "alpha must be finite and in [0, 1], got 1.5");
    p.alpha = 0.5;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message, "");
    a.bootstrap_values = v.m;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "vtrace takes no bootstrap_values with next_values (next_values is its bootstrap at every step)");
    a.bootstrap_values.reset();
    a.sample_mask = mask.m;
    p.kind = estimator::gae;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "gae takes no sample_mask (only vtrace takes a sample_mask)");
    a.sample_mask.reset();
    a.next_values.reset();
    p.kind = estimator::episodic_sum;
    a.values.reset();
    a.next_values = nv.m;
    EXPECT_EQ(puffadv::find_standard_problem(a, p).message,
              "episodic_sum takes no next_values (only gae, td_lambda, vtrace, n_step_returns, retrace and "
              "q_lambda take next_values)");
}

}  // namespace
