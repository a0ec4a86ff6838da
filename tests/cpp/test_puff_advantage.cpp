// Results of the public C++ API against the float64 reference (reference.hpp),
// on fresh random inputs with NaN-poisoned outputs, and the facts of SPEC section 1.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "reference.hpp"

namespace {

using puff_test::grid;
using puff_test::inputs;
using puff_test::layout;
using puff_test::strided_array;
using puffadv::puff_params;

template <typename T>
constexpr double tolerance() {
    return sizeof(T) == 4 ? 1e-5 : 1e-12;  // SPEC section 1: relative, against float64
}

const puff_params kParamSets[] = {
    {0.99, 0.95, 1.0, 1.0},  // PufferLib's defaults
    {0.99, 0.95, 5.0, 0.0},  // configs as shipped: c_clip 0, rho_clip 5
    {1.0, 1.0, 5.0, 5.0},    // undiscounted: errors are not damped along the row
    {0.0, 0.0, 1.0, 1.0},
    {0.9, 0.8, 0.5, 2.0},    // one clip below the ratios, one above
};

std::string describe(const puff_params& p) {
    return "gamma=" + std::to_string(p.gamma) + " lambda=" + std::to_string(p.gae_lambda) +
           " rho_clip=" + std::to_string(p.rho_clip) + " c_clip=" + std::to_string(p.c_clip);
}

std::mt19937_64& rng() {
    static std::mt19937_64 engine(std::random_device{}());
    return engine;
}

template <typename T>
std::vector<T> as(const grid& g) {
    return std::vector<T>(g.data.begin(), g.data.end());
}

/// compute_puff_advantage_cpu on contiguous copies; the output starts as NaN.
template <typename T>
std::vector<double> run_cpu(const inputs& in, const puff_params& p) {
    const auto v = as<T>(in.values), r = as<T>(in.rewards), d = as<T>(in.dones), i = as<T>(in.importance);
    std::vector<T> out(v.size(), std::numeric_limits<T>::quiet_NaN());
    puffadv::compute_puff_advantage_cpu(v.data(), r.data(), d.data(), i.data(), out.data(), in.values.rows,
                                        in.values.horizon, T(p.gamma), T(p.gae_lambda), T(p.rho_clip),
                                        T(p.c_clip));
    return std::vector<double>(out.begin(), out.end());
}

template <typename T>
void expect_matches_reference(std::int64_t rows, std::int64_t horizon) {
    for (const puff_params& p : kParamSets) {
        SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(horizon) + " " + describe(p));
        const inputs in = puff_test::random_inputs<T>(rows, horizon, rng());
        const std::vector<double> out = run_cpu<T>(in, p);
        EXPECT_LE(puff_test::relative_error(out, puff_test::reference_puff(in, p)), tolerance<T>());
        for (std::int64_t r = 0; r < rows; ++r) ASSERT_EQ(out[r * horizon + horizon - 1], 0.0) << "row " << r;
    }
}

// Shapes: degenerate, primes, one tile of 8 rows and partial tiles, horizons
// across the CPU kernel's 512-step chunks, and enough work to use threads.
const std::pair<std::int64_t, std::int64_t> kShapes[] = {
    {1, 1}, {1, 2}, {3, 7}, {8, 64}, {17, 2}, {13, 509}, {5, 1031}, {257, 67}, {4096, 64}};

TEST(CpuEntryPoint, Float32MatchesReference) {
    for (auto [rows, horizon] : kShapes) expect_matches_reference<float>(rows, horizon);
}

TEST(CpuEntryPoint, Float64MatchesReference) {
    for (auto [rows, horizon] : kShapes) expect_matches_reference<double>(rows, horizon);
}

// ---------------------------------------------------------------- strided views

struct layouts {
    layout values, rewards, dones, importance, advantages;
};

template <typename T>
void expect_strided_matches_reference(std::int64_t rows, std::int64_t horizon, layouts l) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(horizon) + " values " + layout_name(l.values) +
                 ", rewards " + layout_name(l.rewards) + ", dones " + layout_name(l.dones) + ", importance " +
                 layout_name(l.importance) + ", advantages " + layout_name(l.advantages));
    const puff_params p{0.99, 0.95, 5.0, 1.0};
    const inputs in = puff_test::random_inputs<T>(rows, horizon, rng());
    strided_array<T> v(rows, horizon, l.values), r(rows, horizon, l.rewards), d(rows, horizon, l.dones),
        i(rows, horizon, l.importance), out(rows, horizon, l.advantages);
    v.fill_from(in.values), r.fill_from(in.rewards), d.fill_from(in.dones), i.fill_from(in.importance);
    out.poison();
    v.view.writable = r.view.writable = d.view.writable = i.view.writable = false;

    puffadv::compute_puff_advantage(puffadv::puff_arrays{v.view, r.view, d.view, i.view, out.view}, p);

    EXPECT_LE(puff_test::relative_error(out.to_vector(), puff_test::reference_puff(in, p)), tolerance<T>());
    // The gaps of a padded output are NaN and must stay so: nothing is written outside the view.
    std::size_t written = 0;
    for (T x : out.storage) written += !std::isnan(x);
    EXPECT_EQ(written, static_cast<std::size_t>(rows * horizon));
}

template <typename T>
void expect_all_layouts_match() {
    const layout all[] = {layout::row_major, layout::padded, layout::time_major, layout::reversed};
    // 2, 4 and 8 rows time-major: walked interleaved (W / N steps of every row per
    // vector); 9 to 32: walked flat.
    for (auto [rows, horizon] : {std::pair<std::int64_t, std::int64_t>{9, 37}, {20, 600}, {2, 5}, {4, 37}, {8, 600},
                                 {13, 7}, {32, 41}}) {
        for (layout l : all) expect_strided_matches_reference<T>(rows, horizon, {l, l, l, l, l});
        // Time-contiguous inputs with a strided output, and every layout mixed in one call.
        expect_strided_matches_reference<T>(rows, horizon, {layout::padded, layout::row_major, layout::padded,
                                                            layout::row_major, layout::time_major});
        expect_strided_matches_reference<T>(rows, horizon, {layout::row_major, layout::time_major, layout::reversed,
                                                            layout::padded, layout::reversed});
    }
}

TEST(StridedEntryPoint, Float32ViewsMatchReference) { expect_all_layouts_match<float>(); }
TEST(StridedEntryPoint, Float64ViewsMatchReference) { expect_all_layouts_match<double>(); }

// ---------------------------------------------------------------- SPEC section 1 facts

template <typename T>
void expect_first_columns_unread() {
    const puff_params p{0.99, 0.95, 5.0, 1.0};
    inputs in = puff_test::random_inputs<T>(33, 19, rng());
    const std::vector<double> clean = run_cpu<T>(in, p);
    for (std::int64_t r = 0; r < in.values.rows; ++r) {
        in.rewards.at(r, 0) = std::numeric_limits<double>::quiet_NaN();
        in.dones.at(r, 0) = std::numeric_limits<double>::quiet_NaN();
    }
    EXPECT_EQ(run_cpu<T>(in, p), clean);  // a NaN read anywhere would propagate
}
TEST(SpecFacts, RewardsAndDonesColumnZeroAreNeverRead) {
    expect_first_columns_unread<float>();
    expect_first_columns_unread<double>();
}

template <typename T>
void expect_horizon_one_is_zero() {
    const inputs in = puff_test::random_inputs<T>(7, 1, rng());
    EXPECT_EQ(run_cpu<T>(in, kParamSets[0]), std::vector<double>(7, 0.0));
}
TEST(SpecFacts, HorizonOneGivesZeros) {
    expect_horizon_one_is_zero<float>();
    expect_horizon_one_is_zero<double>();
}

TEST(SpecFacts, EmptyShapesRunNothing) {
    // rows == 0 with null pointers: nothing to read, nothing to write.
    EXPECT_NO_THROW(puffadv::compute_puff_advantage_cpu(static_cast<const float*>(nullptr), nullptr, nullptr,
                                                        nullptr, nullptr, 0, 16, 0.99f, 0.95f, 1.0f, 1.0f));
    EXPECT_NO_THROW(puffadv::compute_puff_advantage_cpu(static_cast<const double*>(nullptr), nullptr, nullptr,
                                                        nullptr, nullptr, 0, 0, 0.99, 0.95, 1.0, 1.0));
    const inputs in = puff_test::random_inputs<float>(3, 0, rng());
    EXPECT_TRUE(run_cpu<float>(in, kParamSets[0]).empty());
}

template <typename T>
void expect_c_clip_zero_is_scaled_td_error() {
    const puff_params p{0.97, 0.9, 1.5, 0.0};
    const inputs in = puff_test::random_inputs<T>(21, 45, rng());
    grid td(in.values.rows, in.values.horizon);  // written directly, no recurrence
    for (std::int64_t r = 0; r < td.rows; ++r)
        for (std::int64_t t = 0; t + 1 < td.horizon; ++t)
            td.at(r, t) = std::fmin(in.importance.at(r, t), p.rho_clip) *
                          (in.rewards.at(r, t + 1) + p.gamma * in.values.at(r, t + 1) * (1.0 - in.dones.at(r, t + 1)) -
                           in.values.at(r, t));
    EXPECT_LE(puff_test::relative_error(run_cpu<T>(in, p), td), tolerance<T>());
}
TEST(SpecFacts, CClipZeroGivesOneStepTdErrorTimesRho) {
    expect_c_clip_zero_is_scaled_td_error<float>();
    expect_c_clip_zero_is_scaled_td_error<double>();
}

template <typename T>
void expect_rho_clip_zero_is_zero() {
    const inputs in = puff_test::random_inputs<T>(12, 30, rng());
    for (double x : run_cpu<T>(in, {0.99, 0.95, 0.0, 1.0})) ASSERT_EQ(x, 0.0);
}
TEST(SpecFacts, RhoClipZeroGivesZeros) {
    expect_rho_clip_zero_is_zero<float>();
    expect_rho_clip_zero_is_zero<double>();
}

template <typename T>
void expect_unit_importance_is_gae() {
    inputs in = puff_test::random_inputs<T>(19, 77, rng());
    std::fill(in.importance.data.begin(), in.importance.data.end(), 1.0);
    for (auto [rho_clip, c_clip] : {std::pair{1.0, 1.0}, {5.0, 5.0}, {1.0, 5.0}}) {
        const puff_params p{0.99, 0.95, rho_clip, c_clip};
        SCOPED_TRACE(describe(p));
        grid gae(in.values.rows, in.values.horizon);  // textbook GAE(gamma, lambda), PufferLib indexing
        for (std::int64_t r = 0; r < gae.rows; ++r) {
            double a = 0.0;
            for (std::int64_t t = gae.horizon - 2; t >= 0; --t) {
                const double not_done = 1.0 - in.dones.at(r, t + 1);
                const double delta = in.rewards.at(r, t + 1) + p.gamma * in.values.at(r, t + 1) * not_done -
                                     in.values.at(r, t);
                a = delta + p.gamma * p.gae_lambda * not_done * a;
                gae.at(r, t) = a;
            }
        }
        EXPECT_LE(puff_test::relative_error(run_cpu<T>(in, p), gae), tolerance<T>());
    }
}
TEST(SpecFacts, UnitImportanceGivesGae) {
    expect_unit_importance_is_gae<float>();
    expect_unit_importance_is_gae<double>();
}

template <typename T>
void expect_nan_importance_takes_the_clip() {
    const puff_params p{0.99, 0.95, 5.0, 1.0};
    inputs with_nan = puff_test::random_inputs<T>(16, 40, rng()), with_huge = with_nan;
    for (std::size_t k = 0; k < with_nan.importance.data.size(); k += 3) {
        with_nan.importance.data[k] = std::numeric_limits<double>::quiet_NaN();
        with_huge.importance.data[k] = 1e30;  // above both clips: fmin gives the clip
    }
    const std::vector<double> out = run_cpu<T>(with_nan, p);
    EXPECT_EQ(out, run_cpu<T>(with_huge, p));
    EXPECT_LE(puff_test::relative_error(out, puff_test::reference_puff(with_nan, p)), tolerance<T>());
}
TEST(SpecFacts, NanImportanceTakesTheClip) {
    expect_nan_importance_takes_the_clip<float>();
    expect_nan_importance_takes_the_clip<double>();
}

TEST(Threads, ThreadCountDoesNotChangeResults) {
    const inputs in = puff_test::random_inputs<float>(4096, 64, rng());  // enough work for several threads
    const char* saved = std::getenv("PUFFADV_NUM_THREADS");
    const std::string restore = saved ? saved : "";
    setenv("PUFFADV_NUM_THREADS", "1", 1);
    const std::vector<double> one = run_cpu<float>(in, kParamSets[1]);
    setenv("PUFFADV_NUM_THREADS", "4", 1);
    const std::vector<double> four = run_cpu<float>(in, kParamSets[1]);
    saved ? setenv("PUFFADV_NUM_THREADS", restore.c_str(), 1) : unsetenv("PUFFADV_NUM_THREADS");
    EXPECT_EQ(one, four);  // rows are independent: splitting them must not change a bit
    EXPECT_LE(puff_test::relative_error(one, puff_test::reference_puff(in, kParamSets[1])), 1e-5);
}

}  // namespace
