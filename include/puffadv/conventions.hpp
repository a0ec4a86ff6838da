// The standard advantage conventions of TorchRL, Stable-Baselines3, CleanRL and
// rlax (SPEC section 6): GAE, TD(lambda) returns and V-trace, with termination
// and truncation kept apart. Rewards and flags are indexed at the step that
// produced them:
//
//   delta_t = rho_t (r_t + gamma (1 - terminated_t) V'_t - V_t)
//   A_t     = delta_t + gamma lambda c_t (1 - done_t) A_{t+1},   done = terminated | truncated
//
// where V'_t is V_{t+1} inside the buffer and a bootstrap value past it.
//
// The rest of the credit-assignment family (discounted returns, Retrace,
// Q(lambda), n-step returns, episodic sums) are further kinds of the same call:
// each produces A_t, returns are A_t + values_t (values absent: A_t) and the
// row sums are over A_t. Their definitions are in docs/conventions.md.
#pragma once

#include <cstdint>
#include <optional>

#include <puffadv/puffadv.hpp>

namespace puffadv {

/// Which estimate a call produces. The numeric values are ABI (the JAX handler's `kind`).
enum class estimator : std::uint8_t {
    gae = 0,        ///< advantages A; fused returns are A + V
    td_lambda = 1,  ///< returns G = A + V (the lambda-return); advantages are A
    vtrace = 2,     ///< returns are the targets vs = V + A; advantages are IMPALA's
                    ///< pg advantages min(rho_pg_clip, ratio_t) (r_t + gamma (1 - terminated_t) vs'_t - V_t)
    /// A = G, the returns-to-go r_t + gamma (1 - terminated_t) B_t + gamma (1 - done_t) G_{t+1},
    /// B_t the bootstrap at truncated and last steps (absent: 0); reads no values.
    discounted_returns = 3,
    /// A = Q_ret - Q with c_t = lambda min(c_clip, pi_t / mu_t) of the next step.
    retrace = 4,
    /// A = G - Q; Peng's Q(lambda), or Watkins's with `greedy` (the trace is cut
    /// after a non-greedy action).
    q_lambda = 5,
    /// A = G^(n) - V: rlax's n-step bootstrapped returns, episode ends cutting the window.
    n_step_returns = 6,
    /// A = C, the FORWARD scan C_t = inputs_t + gamma lambda (1 - reset_t) C_{t-1}:
    /// episodic cumulative sums (gamma = lambda = 1) and eligibility traces.
    episodic_sum = 7,
    /// PufferLib's puff advantage (SPEC section 1) as one more kind of the one call:
    /// `terminated` holds PufferLib's `dones`, and rewards and dones are read at
    /// t + 1 (PufferLib's index convention); values, importance and advantages are
    /// required, `lambda` is gae_lambda. compute_puff_advantage is a wrapper over it.
    puff_advantage = 8,
    /// A = y, the linear recurrence itself (the engine's scan as a public function):
    /// y_t = x_t + a_t y_{t-1} (forward), or y_t = x_t + a_t y_{t+1} with
    /// standard_params::reverse; x is `rewards` (the caller's `inputs`), a_t the
    /// array `decay`, y outside the row `last_value` (the caller's `seed`; absent: 0).
    /// It reads no flags: `terminated` is left empty (a default matrix).
    linear_recurrence = 9,
    /// The backward (vector-Jacobian product) of gae and td_lambda with the
    /// bootstrap pair, and of discounted_returns (lambda 1): the engine's scan run
    /// forwards over the forward's decays, a_t = u_t + k_{t-1} a_{t-1} with
    /// k_t = gamma_t lambda_t (1 - done_t) (0 at the row's last step) and
    /// u_t = `rewards` (the caller's grad_total: dL/dA_t + dL/dreturns_t);
    /// `values` is grad_returns (optional: absent, 0). Outputs: `advantages` = a
    /// (dL/drewards, the caller's grad_rewards), `returns` = grad_returns_t - a_t +
    /// gamma_{t-1} (1 - done_{t-1}) a_{t-1} (dL/dvalues, grad_values; optional).
    /// The bootstrap's gradient is gamma_t (1 - terminated_t) a_t where it is read.
    value_vjp = 10,
};

const char* estimator_name(estimator e) noexcept;
/// The inverse of estimator_name ("gae", "td_lambda", "vtrace", "discounted_returns",
/// "retrace", "q_lambda", "n_step_returns", "episodic_sum", "linear_recurrence", "value_vjp");
/// value_error otherwise.
estimator estimator_from_name(const std::string& name);

/// Scalars: finite, gamma and lambda in [0, 1], clips >= 0, n >= 1. The clips are
/// read only when importance ratios are given (retrace: c_clip always);
/// rho_pg_clip only by vtrace.
struct standard_params {
    estimator kind = estimator::gae;
    double gamma = 0.99;
    double lambda = 0.95;
    double rho_clip = 1.0;
    double c_clip = 1.0;
    double rho_pg_clip = 1.0;
    /// How the caller spells lambda, for error messages ("gae_lambda", "lambda_").
    const char* lambda_name = "lambda";
    /// n_step_returns: the window length, >= 1.
    std::int64_t n = 1;
    /// retrace: target_probs and behaviour_probs are log-probabilities (ratio = exp(t - b)).
    bool log_probs = false;
    /// episodic_sum: dones[t] starts a segment at t ("starts_at"); by default
    /// ("ends_at") dones[t] ends one and the reset lands at t + 1.
    bool reset_at_start = false;
    /// linear_recurrence: y_t = x_t + a_t y_{t+1} (backwards over time) instead of
    /// y_t = x_t + a_t y_{t-1}.
    bool reverse = false;
    /// vtrace: leaky V-trace's mix (Zahavy et al. 2020, rlax.leaky_vtrace), in [0, 1]:
    /// each clipped ratio min(ratio, clip) becomes alpha min(ratio, clip) + (1 - alpha) ratio.
    /// 1 (the default) is V-trace.
    double alpha = 1.0;
};

/// The arrays of one call, as [rows, horizon] views (time-major data is passed
/// with its strides swapped: see apply_time_axis). 1-D arrays are [rows] views
/// with ndim 1. Floats: float32, float64, bfloat16 or float16, one dtype for all
/// float inputs; flags: bool, uint8 or that float dtype (non-zero means set).
struct standard_arrays {
    /// episodic_sum reads its `inputs` here and its `dones` as terminated.
    matrix rewards;
    /// V(s_t), or Q(s_t, a_t) for retrace and q_lambda. Absent for
    /// discounted_returns and episodic_sum (read as 0), required by every other kind.
    std::optional<matrix> values;
    matrix terminated;
    /// Episodes cut by a time limit: the trace stops, the value bootstraps.
    std::optional<matrix> truncated;
    /// [rows]: V(s_T), the value of the observation after the last step
    /// (episodic_sum: its `seed`, C_{-1}).
    std::optional<matrix> last_value;
    /// [rows, horizon]: V(s_{t+1}) of step t's next observation, read only where
    /// the buffer does not hold it: at truncated steps and at the last step.
    /// Exactly one of last_value and bootstrap_values; truncated needs bootstrap_values.
    std::optional<matrix> bootstrap_values;
    /// Ratios pi/mu; rho_t = min(ratio, rho_clip), c_t = min(ratio, c_clip). Absent: 1.
    std::optional<matrix> importance;
    /// V(s_{t+1}) of every step's next observation (TorchRL's next_state_value,
    /// rlax's v_t), read at every step (never where terminated): gae, td_lambda,
    /// vtrace, n_step_returns take it optionally in place of the bootstrap pair;
    /// retrace needs E_pi[Q(s_{t+1}, .)], q_lambda max_a Q(s_{t+1}, a). With it,
    /// last_value and bootstrap_values are refused and truncated only cuts the recursion.
    std::optional<matrix> next_values;
    /// retrace: pi(a_t|s_t) and mu(a_t|s_t) of the taken action (or their logs:
    /// standard_params::log_probs); both or neither.
    std::optional<matrix> target_probs, behaviour_probs;
    /// q_lambda (Watkins): flags, a_t is greedy. Absent: Peng's Q(lambda).
    std::optional<matrix> greedy;
    /// linear_recurrence: a_t, the coefficient of the neighbouring y (float, the inputs' dtype).
    std::optional<matrix> decay;
    /// Per-step gamma_t and lambda_t ([rows, horizon], the float inputs' dtype),
    /// read in place of standard_params::gamma / ::lambda where given (each on its
    /// own: a per-step gamma with the scalar lambda, or the reverse). gamma_t is the
    /// discount between step t and t + 1, multiplied with the episode flags
    /// (gamma_t (1 - terminated_t), gamma_t lambda_t (1 - done_t)); every kind reads
    /// both at step t (docs/semantics.md lists each). Used as given: not checked to
    /// lie in [0, 1]. The puff advantage refuses them (PufferLib's schema).
    std::optional<matrix> gamma, lambda;
    /// vtrace: flags, step t is learnable (rlax's sample_mask). A step not set passes
    /// the later step's error through unchanged: A_t = A_{t+1}. Absent: every step.
    std::optional<matrix> sample_mask;
    /// Output [rows, horizon]: A (gae, td_lambda) or the pg advantages (vtrace).
    std::optional<matrix> advantages;
    /// returns (A + V, i.e. vs for vtrace) and per-row sums over `advantages`' quantity.
    fused_outputs fused{};
};

/// Every argument check of a call of any kind, the puff advantage included
/// (shapes, dtypes, devices, aliasing, parameters), each array named as the
/// kind's caller knows it. Data-dependent problems (a step both terminated and
/// truncated) are reported by the computation itself.
argument_problem find_standard_problem(const standard_arrays& arrays, const standard_params& params);

/// Turns a view of the caller's 2-D array into the [rows, horizon] view the core
/// reads: time_axis 1 or -1 is batch-major [B, T] (unchanged), 0 or -2 is
/// time-major [T, B] (rows and strides swapped, no copy). Arrays that are not
/// 2-D are left alone for the layout check to name. 64-bit, so that bindings pass
/// the caller's integer unnarrowed (2**32 must not read as 0).
argument_problem apply_time_axis(matrix& m, std::int64_t time_axis, const char* name);

/// apply_time_axis on every [rows, horizon] array of a call (not last_value or
/// the per-row sums, which have no time axis), as every binding needs it.
argument_problem apply_time_axis(standard_arrays& a, std::int64_t time_axis);

/// Checks, then computes on the arrays' device: the one entry of every kind
/// (compute_puff_advantage is this call with kind puff_advantage). Throws
/// value_error when a step is both terminated and truncated (naming its row and step).
void compute_standard_estimate(const standard_arrays& arrays, const standard_params& params,
                               gpu_stream stream = nullptr);

}  // namespace puffadv
