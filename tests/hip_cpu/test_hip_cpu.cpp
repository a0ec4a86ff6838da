// The HIP kernels executed by ROCm's HIP CPU Runtime (64-lane wavefronts as
// fibers): first that the wavefront is 64 lanes and the shuffles behave as on
// AMD GPUs, then every estimator through detail::estimate_hip (the backend
// entry the core calls) against the CPU backend, in shapes and layouts that
// reach every traversal the planner can choose with the 2 compute units the
// runtime reports here (vendor.cuh: PUFF_HIP_CPU_COMPUTE_UNITS): row groups,
// whole rows (vector, flat, scalar, packed short rows, many rounds), long rows,
// split rows (vector and scalar), strided time-major views; each estimator's
// test asserts the traversals its launches took and prints them.
#include <gtest/gtest.h>

#include <hip/hip_runtime.h>

#include <algorithm>
#include <iostream>
#include <vector>

#include "core/backends.hpp"
#include "core/gpu_backend.hpp"
#include "gpu/affine_scan.cuh"
#include "hip_cpu_cases.hpp"

namespace {

using namespace hip_cpu_test;
using puffadv::dtype;
using puffadv::estimator;
namespace gpu = puffadv::gpu;

// ---- the wavefront ----------------------------------------------------------

TEST(wave64, the_kernels_are_compiled_for_64_lane_wavefronts) {
    static_assert(gpu::physical_warp_size == 64, "the scan kernels' warp is the 64-lane wavefront");
    static_assert(warpSize == 64, "the runtime's wavefront");
    static_assert(sizeof(gpu::lane_mask) == 8, "64-bit lane masks");
    const puffadv::gpu_status s = puffadv::detail::hip_status();
    ASSERT_EQ(s.device_count, 1) << s.error;
    ASSERT_EQ(s.device_names.size(), 1u);
    EXPECT_NE(s.device_names[0].find("hip-cpu, 2 SMs, warp 64"), std::string::npos) << s.device_names[0];
}

__global__ void shuffle_kernel(int* down64, int* down32, int* from0_32, int* from0_64, float* scan) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    const int lane = static_cast<int>(threadIdx.x);
    down64[i] = gpu::shfl_down<64>(lane, 1);
    down32[i] = gpu::shfl_down<32>(lane, 3);
    from0_32[i] = gpu::shfl<32>(lane, 0);
    from0_64[i] = gpu::shfl<64>(lane, 5);
    // Every lane the map x -> 1 + x: the reverse scan counts the lanes to the wavefront's end.
    const gpu::affine<float> m = gpu::warp_reverse_scan<gpu::physical_warp_size>(
        gpu::affine<float>{1.0f, 1.0f, false}, lane % gpu::physical_warp_size);
    scan[i] = gpu::apply(m, 0.0f);
}

// AMD's shuffle semantics (amd_warp_functions.h) over two blocks of 128
// threads: groups of `width` lanes, a lane past its group's top keeps its own value.
TEST(wave64, shuffles_and_the_warp_scan_span_64_lanes) {
    constexpr int n = 256;
    std::vector<int> down64(n), down32(n), from0_32(n), from0_64(n);
    std::vector<float> scan(n);
    hipLaunchKernelGGL(shuffle_kernel, dim3(2), dim3(128), 0, nullptr, down64.data(), down32.data(),
                       from0_32.data(), from0_64.data(), scan.data());
    ASSERT_EQ(hipDeviceSynchronize(), hipSuccess);
    for (int i = 0; i < n; ++i) {
        const int lane = i % 128, wave_lane = lane % 64, half_lane = lane % 32;
        EXPECT_EQ(down64[i], wave_lane == 63 ? lane : lane + 1) << i;
        EXPECT_EQ(down32[i], half_lane + 3 < 32 ? lane + 3 : lane) << i;
        EXPECT_EQ(from0_32[i], lane - half_lane) << i;
        EXPECT_EQ(from0_64[i], lane - wave_lane + 5) << i;
        EXPECT_EQ(scan[i], float(64 - wave_lane)) << i;  // lane 0 sums 64 lanes; lane 64 restarts
    }
}

// ---- the estimators ---------------------------------------------------------

call_case make(estimator k, dtype t, std::int64_t rows, std::int64_t horizon, layout l = layout::packed) {
    call_case c;
    c.kind = k, c.type = t, c.rows = rows, c.horizon = horizon, c.memory = l;
    c.seed = std::uint64_t(rows) * 7919 + std::uint64_t(horizon) * 31 + static_cast<int>(k) * 3 + static_cast<int>(l);
    return c;
}

/// The shapes that reach every traversal (2 compute units: 16 blocks fill the
/// "GPU"; calls under 32768 steps are small), float32 unless said.
std::vector<call_case> traversal_cases(estimator k) {
    const dtype f32 = dtype::float32, f64 = dtype::float64;
    std::vector<call_case> v = {
        make(k, f32, 37, 64),                       // row groups, 4 steps a lane (small call)
        make(k, f32, 520, 64),                      // row groups, 8 steps a lane (wide policies)
        make(k, f32, 32, 1024),                     // long rows (float32 GAE/TD/puff): 128 threads x 8
        make(k, f32, 3, 4608),                      // few long rows: split, vector loads
        make(k, f64, 5, 1100),                      // whole rows, vector loads (past row groups)
        make(k, f64, 3, 4400),                      // split rows, vector loads
        make(k, f32, 37, 91),                       // flat whole rows (horizon not a multiple of 4)
        make(k, f32, 400, 91),                      // flat whole rows, 8 steps (not small)
        make(k, f32, 37, 91, layout::misaligned),   // scalar whole rows, several rows a block
        make(k, f64, 16, 4200, layout::misaligned), // scalar whole rows of many rounds (rows fill the GPU)
        make(k, f32, 3, 4501, layout::misaligned),  // split rows, scalar loads
        make(k, f32, 3, 4501),                      // flat arrays of split rows: scalar kernels
        make(k, f32, 37, 50, layout::time_major),   // strided: one thread per row
        make(k, f64, 29, 33, layout::time_major),
    };
    call_case padded = make(k, f32, 23, 60, layout::padded);
    padded.pad = 3;
    v.push_back(padded);
    for (auto& c : v) c.returns = c.sums = c.horizon < 200;  // fused outputs where cheap
    return v;
}

/// Each estimator's options where the GPU path takes them: truncations, ratios,
/// byte flags, reduced precision, float32 outputs of 16-bit inputs.
std::vector<call_case> option_cases(estimator k) {
    std::vector<call_case> v;
    const bool ratios = k == estimator::gae || k == estimator::td_lambda || k == estimator::vtrace ||
                        k == estimator::value_vjp;  // the backward of their forms with ratios
    const bool truncations = k != estimator::puff_advantage && k != estimator::episodic_sum &&
                             k != estimator::linear_recurrence;
    for (dtype t : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16}) {
        for (layout l : {layout::packed, layout::misaligned, layout::time_major}) {
            for (std::int64_t h : {std::int64_t(64), std::int64_t(91), std::int64_t(1100)}) {
                if (h == 1100 && l == layout::time_major) continue;
                call_case c = make(k, t, h == 1100 ? 5 : 19, h, l);
                c.truncations = truncations && (h != 91);
                c.importance = ratios && h != 1100;
                c.byte_flags = h == 91;
                c.returns = true;
                c.sums = h != 1100;
                c.float_outputs = puffadv::dtype_size(t) == 2 && l == layout::packed;
                v.push_back(c);
                call_case plain = c;  // without the optional inputs: the fast kernels' other instances
                plain.truncations = plain.importance = plain.returns = plain.sums = false;
                plain.seed += 1;
                v.push_back(plain);
            }
        }
    }
    // 8 steps of V-trace fit one lane (its wide policy), not a small call.
    if (k == estimator::vtrace) v.push_back(make(k, dtype::float32, 4100, 8));
    return v;
}

void run_all(estimator k, std::vector<call_case> cases, const std::vector<std::string>& required) {
    for (const call_case& c : cases) {
        const std::string why = run_case(c);
        EXPECT_EQ(why, "") << c.label();
    }
    const auto& reached = traversals_reached()[puffadv::estimator_name(k)];
    std::cout << "[ hip_cpu  ] " << puffadv::estimator_name(k) << ": " << cases.size() << " calls;";
    for (const auto& t : reached) std::cout << " {" << t << "}";
    std::cout << "\n";
    for (const auto& t : required) EXPECT_TRUE(reached.count(t)) << puffadv::estimator_name(k) << " never took " << t;
}

std::vector<call_case> cases_of(estimator k) {
    std::vector<call_case> v = traversal_cases(k);
    for (const call_case& c : option_cases(k)) v.push_back(c);
    return v;
}

/// The traversals every row-scan estimator must reach.
const std::vector<std::string> scan_traversals = {
    "row groups, vector-4", "row groups, vector-8", "whole rows, vector-4", "whole rows, flat-4",
    "whole rows, scalar-4", "split rows, vector-4", "split rows, scalar-4", "strided (time-major)", "row sums"};

std::vector<std::string> with(std::vector<std::string> v, std::initializer_list<const char*> more) {
    v.insert(v.end(), more.begin(), more.end());
    return v;
}

TEST(estimators, gae) {
    run_all(estimator::gae, cases_of(estimator::gae),
            with(scan_traversals, {"whole rows, long-8", "split rows, long-8", "whole rows, flat-8"}));
}

TEST(estimators, td_lambda) {
    run_all(estimator::td_lambda, cases_of(estimator::td_lambda),
            with(scan_traversals, {"whole rows, long-8", "split rows, long-8", "whole rows, flat-8"}));
}

// The backward of GAE, TD(lambda) (V-trace's vs with ratios) and discounted returns: a scan
// over reversed time (as the episodic sums), its store reading the step before in time (the
// flat groups' row ends too).
TEST(estimators, value_vjp) {
    std::vector<call_case> v = cases_of(estimator::value_vjp);
    for (std::size_t i = 0; i < v.size(); i += 3) v[i].returns = true;  // grad_values beside grad_rewards
    run_all(estimator::value_vjp, v, with(scan_traversals, {"whole rows, flat-8"}));
}

TEST(estimators, vtrace) { run_all(estimator::vtrace, cases_of(estimator::vtrace), scan_traversals); }

TEST(estimators, discounted_returns) {
    std::vector<call_case> v = cases_of(estimator::discounted_returns);
    call_case none = make(estimator::discounted_returns, dtype::float32, 19, 64);
    none.no_last_value = true;
    v.push_back(none);
    run_all(estimator::discounted_returns, v, with(scan_traversals, {"whole rows, flat-8"}));
}

TEST(estimators, retrace) {
    std::vector<call_case> v = cases_of(estimator::retrace);
    for (std::size_t i = 0; i < v.size(); i += 3) v[i].log_probs = true;
    std::vector<std::string> traversals = scan_traversals;  // 4 steps a lane only (vtrace_scan_policy)
    traversals.erase(std::find(traversals.begin(), traversals.end(), "row groups, vector-8"));
    run_all(estimator::retrace, v, traversals);
}

TEST(estimators, q_lambda) {
    std::vector<call_case> v = cases_of(estimator::q_lambda);
    for (std::size_t i = 0; i < v.size(); i += 2) v[i].greedy = true;  // Watkins's; the rest Peng's
    run_all(estimator::q_lambda, v, with(scan_traversals, {"whole rows, flat-8"}));
}

TEST(estimators, episodic_sum) {
    std::vector<call_case> v = cases_of(estimator::episodic_sum);
    for (std::size_t i = 0; i < v.size(); i += 2) v[i].reset_at_start = true;
    for (std::size_t i = 0; i < v.size(); i += 5) v[i].no_last_value = true;
    run_all(estimator::episodic_sum, v, with(scan_traversals, {"whole rows, flat-8"}));
}

// Both directions (forward: a scan over reversed time, its flat groups on flipped rows),
// with and without a seed, decays of 0 and 1 at the rows' ends.
TEST(estimators, linear_recurrence) {
    std::vector<call_case> v = cases_of(estimator::linear_recurrence);
    for (std::size_t i = 0; i < v.size(); i += 2) v[i].reverse = true;
    for (std::size_t i = 0; i < v.size(); i += 5) v[i].no_last_value = true;
    run_all(estimator::linear_recurrence, v, with(scan_traversals, {"whole rows, flat-8"}));
}

TEST(estimators, n_step_returns) {
    std::vector<call_case> v;
    for (std::int64_t n : {1, 3, 4, 6, 8, 20, 200}) {  // 4-step and 8-step windows, the general kernel, n >= horizon
        for (call_case c : option_cases(estimator::n_step_returns)) {
            if (c.horizon == 1100 && n != 6 && n != 20) continue;
            c.n = n, c.seed += std::uint64_t(n);
            v.push_back(c);
        }
    }
    for (call_case c : traversal_cases(estimator::n_step_returns)) c.n = 5, v.push_back(c);
    run_all(estimator::n_step_returns, v,
            {"n-step window, 4 steps", "n-step window, 8 steps", "n-step, one thread per output", "row sums",
             "row groups, vector-4"});  // n >= horizon: TD(lambda)'s scan
}

TEST(estimators, puff_advantage) {
    std::vector<call_case> v = cases_of(estimator::puff_advantage);
    run_all(estimator::puff_advantage, v,
            with(scan_traversals, {"whole rows, long-8", "split rows, long-8", "row groups, vector-8"}));
}

// Decays whose products overflow over zero inputs (issue 31): the composed runs
// met 0 as inf * 0 = NaN where the recurrence is 0. Every traversal, both backends 0.
TEST(reliability, decays_whose_product_overflows_leave_zero_inputs_zero) {
    for (estimator k : {estimator::gae, estimator::td_lambda, estimator::vtrace, estimator::retrace,
                        estimator::puff_advantage}) {
        for (call_case c : traversal_cases(k)) {
            c.huge_decays = true;
            c.importance = k != estimator::retrace;
            EXPECT_EQ(run_case(c), "") << c.label();
        }
    }
}

// ---- issue 29: next_values on rocm arrays ------------------------------------

// td_lambda with next_values (and n-step with n >= horizon) run as Q(lambda)'s
// kernel, through the core's route and the backend's entry alike: the CPU's
// numbers. gae, vtrace and n-step with n < horizon: test_hip_cpu_per_step.cpp.
TEST(next_values, td_lambda_runs_as_q_lambda) {
    std::vector<call_case> v = {make(estimator::td_lambda, dtype::float32, 19, 64),
                                make(estimator::td_lambda, dtype::float64, 7, 91, layout::misaligned),
                                make(estimator::td_lambda, dtype::bfloat16, 5, 40, layout::time_major),
                                make(estimator::n_step_returns, dtype::float32, 11, 40)};
    v.back().n = 100;
    for (call_case c : v) {
        c.next_values = c.returns = c.truncations = true;
        for (bool public_route : {true, false}) {
            c.public_route = public_route;
            EXPECT_EQ(run_case(c), "") << c.label();
        }
    }
}

// ---- the core's own routes onto the backend ---------------------------------

// compute_standard_estimate and compute_puff_advantage on "rocm" arrays: the
// core's checks, require_gpu_backend (a device: the runtime reports one) and its dispatch.
TEST(core_routes, public_calls_on_rocm_arrays_reach_the_hip_backend) {
    for (estimator k : {estimator::gae, estimator::vtrace, estimator::retrace, estimator::n_step_returns,
                        estimator::puff_advantage}) {
        for (call_case c : {make(k, dtype::float32, 19, 64), make(k, dtype::float64, 7, 91, layout::misaligned)}) {
            c.public_route = true;
            c.returns = true;
            EXPECT_EQ(run_case(c), "") << c.label();
        }
    }
    EXPECT_FALSE(traversals_reached()["puff_advantage"].empty());
}

}  // namespace
