// Issue 29 on rocm arrays: per-step gamma_t / lambda_t arrays run by the GPU
// producers' per-step variants (inputs_per_step, src/gpu/engine.cuh: the fast
// kernels where float32 / float64 rows vectorise aligned, else the generic
// kernels; n-step returns' one-thread-per-output windows) against the
// CPU engine's kSteps producers: every estimator that takes them, float32,
// float64 and bfloat16, packed, padded (a strided view), misaligned and
// time-major memory, rows short and split, episode ends at the first and last
// steps (hip_cpu_cases.cpp), NaN-poisoned outputs, gamma alone, lambda alone
// and both.
#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "hip_cpu_cases.hpp"

namespace {

using namespace hip_cpu_test;
using puffadv::dtype;
using puffadv::estimator;

bool takes_ratios(estimator k) {
    return k == estimator::gae || k == estimator::td_lambda || k == estimator::vtrace || k == estimator::value_vjp;
}
bool takes_truncations(estimator k) { return k != estimator::episodic_sum; }

std::vector<call_case> per_step_cases(estimator k, std::int64_t n = 3) {
    std::vector<call_case> v;
    std::uint64_t seed = 1000 + static_cast<std::uint64_t>(k) * 97 + static_cast<std::uint64_t>(n) * 13;
    int i = 0;
    for (dtype t : {dtype::float32, dtype::float64, dtype::bfloat16}) {
        for (layout l : {layout::packed, layout::padded, layout::misaligned, layout::time_major}) {
            // 19x64: whole rows (time-major: strided); 3x4501: split rows (time-major: strided);
            // 3x4500, packed float32 / float64: split rows of the fast kernels (run_variant).
            for (std::int64_t h : {std::int64_t(64), std::int64_t(4501), std::int64_t(4500)}) {
                if (h == 4501 && t == dtype::bfloat16 && l != layout::packed) continue;  // enough long rows
                if (h == 4500 && (t == dtype::bfloat16 || l != layout::packed)) continue;
                call_case c;
                c.kind = k, c.type = t, c.memory = l, c.horizon = h, c.rows = h == 64 ? 19 : 3;
                c.pad = l == layout::padded ? 3 : 0;
                c.n = n;
                c.per_step = k == estimator::discounted_returns ? 1 : 1 + i % 3;  // gamma_t, lambda_t, both
                c.truncations = takes_truncations(k) && i % 2 == 0;
                c.importance = takes_ratios(k) && i % 3 != 1;
                c.byte_flags = i % 4 == 3;
                c.returns = i % 2 == 1;
                c.sums = h == 64 && i % 3 == 2;
                c.float_outputs = t == dtype::bfloat16 && i % 2 == 0;
                c.greedy = k == estimator::q_lambda && i % 2 == 0;
                c.log_probs = k == estimator::retrace && i % 3 == 0;
                c.reset_at_start = k == estimator::episodic_sum && i % 2 == 0;
                c.no_last_value =
                    (k == estimator::episodic_sum || k == estimator::discounted_returns) && i % 5 == 4 && !c.truncations;
                c.public_route = i % 4 == 1;  // through the core's checks and dispatch
                c.seed = seed + static_cast<std::uint64_t>(i);
                v.push_back(c);
                ++i;
            }
        }
    }
    return v;
}

void run_per_step(const std::string& name, estimator k, const std::vector<call_case>& cases,
                  const std::vector<std::string>& required) {
    for (const call_case& c : cases) EXPECT_EQ(run_case(c), "") << c.label();
    const auto& reached = traversals_reached()[name];
    std::cout << "[ hip_cpu  ] " << name << " per-step: " << cases.size() << " calls;";
    for (const auto& t : reached) std::cout << " {" << t << "}";
    std::cout << "\n";
    for (const auto& t : required) EXPECT_TRUE(reached.count(t)) << name << " never took " << t;
    (void)k;
}

// The fast kernels (aligned float32 / float64 rows: row groups, split rows) and the generic
// ones (padded, misaligned, bfloat16: whole and split rows; time-major: strided).
const std::vector<std::string> variant_traversals = {"row groups, vector-4", "split rows, vector-4",
                                                     "whole rows, scalar-4", "split rows, scalar-4",
                                                     "strided (time-major)"};

TEST(per_step, gae) { run_per_step("gae", estimator::gae, per_step_cases(estimator::gae), variant_traversals); }
TEST(per_step, td_lambda) {
    run_per_step("td_lambda", estimator::td_lambda, per_step_cases(estimator::td_lambda), variant_traversals);
}
TEST(per_step, vtrace) {
    run_per_step("vtrace", estimator::vtrace, per_step_cases(estimator::vtrace), variant_traversals);
}
TEST(per_step, discounted_returns) {
    run_per_step("discounted_returns", estimator::discounted_returns, per_step_cases(estimator::discounted_returns),
                 variant_traversals);
}
TEST(per_step, value_vjp) {
    std::vector<call_case> v = per_step_cases(estimator::value_vjp);
    for (call_case& c : v)
        if (c.importance && c.seed % 2) c.alpha = 0.6;  // leaky V-trace's vs
    run_per_step("value_vjp", estimator::value_vjp, v, variant_traversals);
}
TEST(per_step, retrace) {
    run_per_step("retrace", estimator::retrace, per_step_cases(estimator::retrace), variant_traversals);
}
TEST(per_step, q_lambda) {
    run_per_step("q_lambda", estimator::q_lambda, per_step_cases(estimator::q_lambda), variant_traversals);
}
TEST(per_step, episodic_sum) {
    run_per_step("episodic_sum", estimator::episodic_sum, per_step_cases(estimator::episodic_sum),
                 variant_traversals);
}
// Windows of n < horizon (one thread per output), and n >= horizon: TD(lambda)'s scan.
TEST(per_step, n_step_returns) {
    std::vector<call_case> v = per_step_cases(estimator::n_step_returns, 3);
    for (const call_case& c : per_step_cases(estimator::n_step_returns, 20)) v.push_back(c);
    for (call_case c : per_step_cases(estimator::n_step_returns, 100)) {
        if (c.horizon == 64) v.push_back(c);  // n >= horizon
    }
    run_per_step("n_step_returns", estimator::n_step_returns, v,
                 {"n-step, one thread per output", "whole rows, scalar-4", "strided (time-major)"});
}

}  // namespace

namespace {

// ---- next_values, sample_mask and leaky alpha --------------------------------

/// gae, vtrace and n-step returns with next_values (V'_t at every step), and
/// V-trace's sample_mask and alpha with and without it: the forms variant of
/// the standard producer (inputs_forms) and n-step's windows.
std::vector<call_case> form_cases(estimator k, std::int64_t n = 3) {
    std::vector<call_case> v;
    for (call_case c : per_step_cases(k, n)) {
        c.per_step = 0;
        c.no_last_value = false;
        const std::uint64_t i = c.seed;
        c.next_values = k != estimator::vtrace || i % 3 != 2;
        if (k == estimator::vtrace) {
            c.sample_mask = i % 2 == 0 || !c.next_values;
            c.alpha = i % 3 == 1 ? 0.6 : 1.0;
            c.importance = c.importance || c.alpha != 1.0;
        }
        v.push_back(c);
    }
    return v;
}

TEST(forms, gae_with_next_values) {
    run_per_step("gae", estimator::gae, form_cases(estimator::gae), variant_traversals);
}
TEST(forms, vtrace_with_next_values_sample_mask_and_alpha) {
    run_per_step("vtrace", estimator::vtrace, form_cases(estimator::vtrace), variant_traversals);
}
TEST(forms, n_step_returns_with_next_values) {
    std::vector<call_case> v = form_cases(estimator::n_step_returns, 3);
    for (const call_case& c : form_cases(estimator::n_step_returns, 20)) v.push_back(c);
    run_per_step("n_step_returns", estimator::n_step_returns, v, {"n-step, one thread per output"});
}


// Per-step gamma / lambda with next_values: n-step returns take both (windows of
// n < 64, long windows on the CPU, n >= horizon: Q(lambda)'s scan).
TEST(forms, per_step_arrays_with_next_values) {
    std::vector<call_case> v;
    for (std::int64_t n : {3, 100, 10000}) {
        for (call_case c : per_step_cases(estimator::n_step_returns, n)) {
            if (n == 10000 && c.horizon != 64) continue;
            c.next_values = true, c.no_last_value = false;
            v.push_back(c);
        }
    }
    run_per_step("n_step_returns", estimator::n_step_returns, v, {"n-step, one thread per output"});
}

// GAE and V-trace in the forms with per-step gamma / lambda (inputs_forms_per_step):
// TorchRL's gamma tensors beside next_state_value, rlax's discount_t with a sample mask.
TEST(forms, gae_and_vtrace_forms_with_per_step_arrays) {
    for (estimator k : {estimator::gae, estimator::vtrace}) {
        std::vector<call_case> v;
        for (call_case c : form_cases(k)) {
            c.per_step = 1 + static_cast<int>(c.seed % 3);  // gamma_t, lambda_t, both
            v.push_back(c);
        }
        run_per_step(k == estimator::gae ? "gae" : "vtrace", k, v, variant_traversals);
    }
}

}  // namespace
