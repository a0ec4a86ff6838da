// One case of the hip_cpu tests: fresh random inputs in a chosen memory layout,
// the same call on "rocm" arrays (host memory, run by the HIP CPU Runtime
// through detail::estimate_hip) and on CPU arrays (the CPU backend), outputs
// poisoned with NaN first, compared element by element. Every launch is
// recorded (vendor.cuh's launch observer) as the traversal it is.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <puffadv/conventions.hpp>

namespace hip_cpu_test {

/// How each [rows, horizon] array lies in memory.
enum class layout {
    packed,      ///< row-major, rows back to back, 64-byte aligned
    padded,      ///< row-major, each row followed by `pad` unused elements
    misaligned,  ///< packed, one element past an aligned address
    time_major,  ///< [horizon, rows] storage viewed as [rows, horizon]
};
const char* layout_name(layout l);

struct call_case {
    puffadv::estimator kind = puffadv::estimator::gae;
    puffadv::dtype type = puffadv::dtype::float32;
    std::int64_t rows = 1, horizon = 1;
    layout memory = layout::packed;
    std::int64_t pad = 0;
    bool truncations = false;  ///< truncated flags and bootstrap_values (else last_value)
    bool importance = false;   ///< ratios (gae, td_lambda, vtrace; always for the puff advantage)
    bool returns = false;      ///< fused returns
    bool sums = false;         ///< fused per-row sums (float64)
    bool byte_flags = false;   ///< flags as uint8 (else the float dtype)
    bool float_outputs = false;  ///< 16-bit inputs: float32 outputs
    bool greedy = false;       ///< q_lambda: Watkins's greedy flags
    bool log_probs = false;    ///< retrace
    bool reset_at_start = false;  ///< episodic_sum
    bool no_last_value = false;   ///< discounted_returns / episodic_sum / linear_recurrence: no bootstrap (seed)
    bool reverse = false;         ///< linear_recurrence: backwards over time
    std::int64_t n = 3;        ///< n_step_returns
    /// Zero rewards and values, ratios and clips of 1e5, gamma = lambda = 1: every
    /// step's decay is 1e5, their products overflow, and the answer is 0 (issue 31).
    bool huge_decays = false;
    bool next_values = false;  ///< issue 29: next_values for gae, td_lambda, vtrace, n_step_returns
    /// Through the core's public call (checks, require_gpu_backend, dispatch)
    /// instead of detail::estimate_hip.
    bool public_route = false;
    std::uint64_t seed = 1;

    std::string label() const;
};

/// Runs the case on both backends and compares; returns "" or what differs.
std::string run_case(const call_case& c);

/// The traversal each launch took, per estimator, over every case run so far.
std::map<std::string, std::set<std::string>>& traversals_reached();

/// The traversal of one launch, from the kernel's name and its launch site's
/// template arguments (__PRETTY_FUNCTION__).
std::string traversal_of(const std::string& kernel, const std::string& site);

/// Starts recording launches under `estimator` (vendor.cuh's launch observer).
void observe_launches_as(const std::string& estimator);

}  // namespace hip_cpu_test
