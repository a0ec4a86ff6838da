// linear_recurrence through the C++ API (compute_standard_estimate with kind
// linear_recurrence: inputs in `rewards`, `decay`, the seed in `last_value`,
// standard_params::reverse): against a float64 loop on random inputs, both
// directions, row-major, time-major and strided views (the engine; strided
// through its converting sources), float32 and float64; NaN isolation; errors.
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

std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& a, const double* seed,
                              std::int64_t rows, std::int64_t horizon, bool reverse) {
    std::vector<double> y(x.size());
    for (std::int64_t r = 0; r < rows; ++r) {
        double carry = seed ? seed[r] : 0.0;
        for (std::int64_t k = 0; k < horizon; ++k) {
            const std::int64_t t = reverse ? horizon - 1 - k : k, i = r * horizon + t;
            y[std::size_t(i)] = carry = x[std::size_t(i)] + a[std::size_t(i)] * carry;
        }
    }
    return y;
}

template <typename T, typename Out = T>
void check(std::int64_t rows, std::int64_t horizon, layout l, bool reverse, bool seeded, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> normal(-1, 1), decay(-1.1, 1.1);
    std::vector<double> x(static_cast<std::size_t>(rows * horizon)), a(x.size()), s(static_cast<std::size_t>(rows));
    for (auto& v : x) v = T(normal(rng));
    for (auto& v : a) v = T(decay(rng));
    for (auto& v : s) v = T(normal(rng));
    if (rows >= 2 && horizon >= 2) a[0] = 0, a[std::size_t(horizon - 1)] = 1, a[std::size_t(horizon)] = 1;
    grid<T> gx(rows, horizon, l), ga(rows, horizon, l);
    grid<Out> gy(rows, horizon, l);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t t = 0; t < horizon; ++t) {
            gx.at(r, t) = T(x[std::size_t(r * horizon + t)]), ga.at(r, t) = T(a[std::size_t(r * horizon + t)]);
            gy.at(r, t) = std::numeric_limits<Out>::quiet_NaN();
        }
    std::vector<T> seeds(s.begin(), s.end());
    puffadv::standard_arrays arrays;
    arrays.rewards = gx.view;
    arrays.decay = ga.view;
    if (seeded) {
        matrix m;
        m.data = seeds.data(), m.type = dtype_of<T>, m.rows = rows, m.cols = 1, m.row_stride = 1, m.ndim = 1;
        arrays.last_value = m;
    }
    arrays.advantages = gy.view;
    puffadv::standard_params p;
    p.kind = estimator::linear_recurrence;
    p.reverse = reverse;
    puffadv::compute_standard_estimate(arrays, p);
    const std::vector<double> want = reference(x, a, seeded ? s.data() : nullptr, rows, horizon, reverse);
    const double tol = sizeof(T) == 8 ? 1e-12 : 3e-5;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t t = 0; t < horizon; ++t) {
            const double w = want[std::size_t(r * horizon + t)];
            ASSERT_NEAR(double(gy.at(r, t)), w, tol * std::max(1.0, std::fabs(w)))
                << rows << "x" << horizon << " layout " << int(l) << " reverse " << reverse << " at " << r << ", " << t;
        }
}

TEST(linear_recurrence, matches_the_float64_reference) {
    unsigned seed = 1;
    for (layout l : {layout::row_major, layout::time_major, layout::strided})
        for (bool reverse : {false, true})
            for (bool seeded : {false, true})
                for (auto [rows, horizon] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 2}, {19, 23},
                                             {70, 9}, {5, 300}, {2, 37}, {4, 300}, {8, 9},
                                             {12, 33}, {16, 8}, {31, 17}}) {
                    check<double>(rows, horizon, l, reverse, seeded, seed++);
                    check<float>(rows, horizon, l, reverse, seeded, seed++);
                }
}

TEST(linear_recurrence, a_nan_stays_in_its_row) {
    for (bool reverse : {false, true}) {
        grid<float> x(6, 50, layout::row_major), a(6, 50, layout::row_major), y(6, 50, layout::row_major);
        for (std::int64_t r = 0; r < 6; ++r)
            for (std::int64_t t = 0; t < 50; ++t) x.at(r, t) = 0.5f, a.at(r, t) = 0.9f;
        x.at(2, 25) = std::numeric_limits<float>::quiet_NaN();
        puffadv::standard_arrays arrays;
        arrays.rewards = x.view, arrays.decay = a.view, arrays.advantages = y.view;
        puffadv::standard_params p;
        p.kind = estimator::linear_recurrence;
        p.reverse = reverse;
        puffadv::compute_standard_estimate(arrays, p);
        for (std::int64_t r = 0; r < 6; ++r)
            for (std::int64_t t = 0; t < 50; ++t)
                EXPECT_EQ(std::isnan(y.at(r, t)), r == 2 && (reverse ? t <= 25 : t >= 25)) << r << ", " << t;
    }
}

TEST(linear_recurrence, bad_arguments_are_named) {
    grid<float> x(2, 3, layout::row_major), a(2, 4, layout::row_major), y(2, 3, layout::row_major);
    puffadv::standard_arrays arrays;
    arrays.rewards = x.view, arrays.advantages = y.view;
    puffadv::standard_params p;
    p.kind = estimator::linear_recurrence;
    try {
        puffadv::compute_standard_estimate(arrays, p);
        FAIL() << "no decay accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "linear_recurrence needs decay ([rows, horizon])");
    }
    arrays.decay = a.view;
    try {
        puffadv::compute_standard_estimate(arrays, p);
        FAIL() << "a decay of another shape accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("decay has shape [2, 4] but inputs has shape [2, 3]"), std::string::npos)
            << e.what();
    }
    arrays.decay = x.view;
    arrays.terminated = x.view;
    try {
        puffadv::compute_standard_estimate(arrays, p);
        FAIL() << "terminated accepted";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("linear_recurrence takes no terminated"), std::string::npos) << e.what();
    }
}

}  // namespace
