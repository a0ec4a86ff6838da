// The CPU backend's entry (core/backends.hpp: detail::estimate_cpu): the table
// of kinds, each a producer and epilogue of the one CPU engine (src/cpu/).
//
// The engine (cpu/engine*.hpp) runs every float32/float64 call whose arrays are
// laid out along time ([B, T]) or across rows ([T, B]): its traversals
// (engine_traversals.hpp) load each input once into vector registers, scan the
// producer's affine maps S_t = delta_t + k_t S_{t+1} and store each output
// once, on the CPU threads (cpu_threads.hpp). The producers are the
// estimators (estimators_*.hpp); a traversal never knows which one runs.
// Calls the engine does not serve (reduced precision, fused puff outputs, byte
// puff dones, other strides) take the general scratch-line kernels
// (conventions_cpu*.cpp).
#include "core/backends.hpp"
#include "core/conventions_detail.hpp"
#include "core/gpu_backend.hpp"
#include "cpu/engine_run.hpp"
#include "cpu/estimators_advantage.hpp"
#include "cpu/estimators_family.hpp"
#include "cpu/conventions_cpu.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

engine::arrays engine_arrays(const standard_arrays& s) {
    engine::arrays a;
    a.rows = s.rewards.rows;
    a.horizon = s.rewards.cols;
    a.rewards = view_of(s.rewards);
    a.values = view_of(s.values);
    a.terminated = view_of(s.terminated);
    a.truncated = view_of(s.truncated);
    a.last_value = view_of(s.last_value);
    a.bootstrap = view_of(s.bootstrap_values);
    a.importance = view_of(s.importance);
    a.next_values = view_of(s.next_values);
    a.target = view_of(s.target_probs);
    a.behaviour = view_of(s.behaviour_probs);
    a.greedy = view_of(s.greedy);
    a.sample_mask = view_of(s.sample_mask);
    a.advantages = view_of(s.advantages);
    a.returns = view_of(s.fused.returns);
    a.abs_sums = view_of(s.fused.abs_sums);
    a.sums = view_of(s.fused.sums);
    a.square_sums = view_of(s.fused.square_sums);
    return a;
}

template <typename C>
engine::advantage_scalars<C> advantage_scalars_of(const standard_params& p) {
    return {C(p.gamma), C(p.gamma) * C(p.lambda), C(p.rho_clip), C(p.c_clip), C(p.rho_pg_clip)};
}

// ---- the table: each kind's producer, per arithmetic type ----

using runner = void (*)(const engine::arrays&, const standard_params&);

template <typename C>
void run_puff(const engine::arrays& a, const standard_params& p) {
    engine::run_engine(engine::puff_producer<C>(a, advantage_scalars_of<C>(p)), a);
}

template <typename C, typename F, bool kImp, bool kPg>
void run_standard(const engine::arrays& a, const standard_params& p) {
    engine::run_engine(engine::standard_producer<C, F, kImp, kPg>(a, advantage_scalars_of<C>(p)), a);
}

template <typename C>
engine::family_scalars<C> family_scalars_of(const standard_params& p) {
    return {C(p.gamma), C(p.lambda), C(p.c_clip)};
}

template <typename C, typename F>
void run_discounted(const engine::arrays& a, const standard_params& p) {
    engine::run_engine(engine::discounted_producer<C, F>(a, family_scalars_of<C>(p)), a);
}

template <typename C, typename F, bool kQ>
void run_action_values(const engine::arrays& a, const standard_params& p) {
    engine::action_value_producer<C, F, kQ> producer(a, family_scalars_of<C>(p));
    // Q(lambda) scans its returns G; q only enters A = G - q (stored, or summed).
    if (kQ) producer.q_read = a.values.present && (a.advantages.present || engine::wants_sums(a));
    engine::run_engine(producer, a);
}

template <typename C, typename F>
void run_episodic(const engine::arrays& a, const standard_params& p) {
    engine::episodic_producer<C, F> producer(a, family_scalars_of<C>(p));
    producer.reset_at_start = p.reset_at_start;
    engine::run_engine(producer, a);
}

template <typename C, typename F>
runner family_runner(estimator kind, const standard_params& p) {
    switch (kind) {
        case estimator::discounted_returns: return run_discounted<C, F>;
        case estimator::retrace: return p.log_probs ? nullptr : run_action_values<C, F, false>;  // no vector exp
        case estimator::q_lambda: return run_action_values<C, F, true>;
        case estimator::episodic_sum: return run_episodic<C, F>;
        default: return nullptr;  // n_step_returns' windows: conventions_cpu_family*.cpp
    }
}

// GAE / TD(lambda) read no ratios; V-trace's advantages are its pg advantages.
template <typename C, typename F>
runner standard_runner(const engine::arrays& a, estimator kind) {
    const bool pg = kind == estimator::vtrace;
    if (a.importance.present)
        return pg ? run_standard<C, F, true, true> : run_standard<C, F, true, false>;
    return pg ? run_standard<C, F, false, true> : run_standard<C, F, false, false>;
}

template <typename C>
runner runner_for(const engine::arrays& a, const standard_params& p) {
    const estimator kind = p.kind;
    const bool bytes = engine::byte_flags(a.terminated.type);
    switch (kind) {
        case estimator::puff_advantage:  // dones used arithmetically: of the values' type only
            return bytes ? nullptr : run_puff<C>;
        case estimator::gae:
        case estimator::td_lambda:
        case estimator::vtrace:
            return bytes ? standard_runner<C, std::uint8_t>(a, kind) : standard_runner<C, C>(a, kind);
        default:
            return bytes ? family_runner<C, std::uint8_t>(kind, p) : family_runner<C, C>(kind, p);
    }
}

// The engine's runner for a call, or null where it does not serve it.
runner engine_runner(const engine::arrays& a, const standard_params& p) {
    if (engine::serves<double>(a)) return runner_for<double>(a, p);
    if (engine::serves<float>(a)) return runner_for<float>(a, p);
    return nullptr;
}

// The puff advantage's calls that the general kernel serves (fused outputs, 16-bit
// floats, flag-typed dones, outputs of another dtype): the engine's puff producer
// reads dones arithmetically as the inputs' float type.
bool puff_needs_general_kernel(const puff_arrays& a) noexcept {
    const dtype t = a.values.type;
    return a.fused.any() || is_reduced(t) || a.dones.type != t || a.advantages.type != t;
}

}  // namespace

void estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    if (params.kind == estimator::puff_advantage) {
        const puff_arrays puff = as_puff_arrays(arrays);
        if (puff_needs_general_kernel(puff)) return puff_advantage_general_cpu(puff, as_puff_params(params));
        if (puff.values.cols == 0) return;
    }
    engine::arrays a = engine_arrays(arrays);
    if (is_standard_form(a, params)) return standard_form_cpu(a, params);
    if (const runner run = engine_runner(a, params)) {
        a.stream = engine::streams(a);
        return run(a, params);
    }
    if (params.kind == estimator::puff_advantage)
        return puff_advantage_general_cpu(as_puff_arrays(arrays), as_puff_params(params));
    if (is_family_kind(params.kind)) return family_estimate_cpu(arrays, params);
    standard_general_cpu(arrays, params);
}

}  // namespace puffadv::detail
