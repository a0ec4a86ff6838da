// The CPU backend's entry (core/backends.hpp: detail::estimate_cpu): the table
// of kinds, each a producer and epilogue of the one CPU engine (src/cpu/).
//
// The engine (cpu/engine*.hpp) runs every call: its traversals
// (engine_traversals.hpp: along time, [B, T]; across rows, [T, B]) load each
// input once into vector registers, scan the producer's affine maps
// S_t = delta_t + k_t S_{t+1} and store each output once, on the CPU threads
// (cpu_threads.hpp). They read the call's memory itself, or lines converted
// from it (engine_sources.hpp: 16-bit floats, byte puff dones, other strides).
// The producers are the estimators (estimators_*.hpp); a traversal never knows
// which one runs. n_step_returns, no first-order scan, has its own traversal
// over the same lanes (n_step_returns.cpp).
#include "core/backends.hpp"
#include "core/conventions_detail.hpp"
#include "core/gpu_backend.hpp"
#include "cpu/engine_run.hpp"
#include "cpu/estimators_advantage.hpp"
#include "cpu/estimators_family.hpp"
#include "cpu/estimators_recurrence.hpp"
#include "cpu/n_step_returns.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

using engine::role;

// The engine's views of a call's arrays, by role (kinds.hpp's visit_field).
engine::arrays engine_arrays(const standard_arrays& s) {
    engine::arrays a;
    a.rows = s.rewards.rows;
    a.horizon = s.rewards.cols;
    for (int k = 0; k < role_count; ++k) {
        const matrix* m = array_of(s, role(k));
        // terminated is left empty by a kind that reads no flags (linear_recurrence).
        if (m && (role(k) != role::terminated || m->data)) a.by_role[k] = view_of(*m);
    }
    return a;
}

template <typename C>
engine::advantage_scalars<C> advantage_scalars_of(const standard_params& p) {
    return {C(p.gamma), C(p.gamma) * C(p.lambda), C(p.rho_clip), C(p.c_clip), C(p.rho_pg_clip), C(p.lambda)};
}

// ---- the table: each kind's producer, per arithmetic type and flag type ----
// F: the flags' type in the lines the lanes read (C, or one byte in the call's memory).

using runner = void (*)(const engine::arrays&, const standard_params&, bool converting);

template <typename C>
void run_puff(const engine::arrays& a, const standard_params& p, bool converting) {
    engine::run_engine(engine::puff_producer<C>(a, advantage_scalars_of<C>(p)), a, converting, true);
}

template <typename F>
constexpr bool kByteFlags = sizeof(F) == 1;

// kSteps: per-step gamma / lambda arrays (an instantiation of its own: the scalar form tests nothing).
template <typename C, typename F, bool kImp, bool kPg, bool kSteps>
void run_standard(const engine::arrays& a, const standard_params& p, bool converting) {
    engine::run_engine(engine::standard_producer<C, F, kImp, kPg, kSteps>(a, advantage_scalars_of<C>(p)), a,
                       converting, false, kByteFlags<F>);
}

template <typename C>
engine::family_scalars<C> family_scalars_of(const standard_params& p) {
    return {C(p.gamma), C(p.lambda), C(p.c_clip)};
}

template <typename C, typename F, bool kSteps>
void run_discounted(const engine::arrays& a, const standard_params& p, bool converting) {
    engine::run_engine(engine::discounted_producer<C, F, kSteps>(a, family_scalars_of<C>(p)), a, converting, false,
                       kByteFlags<F>);
}

template <typename C, typename F, bool kQ, bool kSteps>
void run_action_values(const engine::arrays& a, const standard_params& p, bool converting) {
    engine::action_value_producer<C, F, kQ, kSteps> producer(a, family_scalars_of<C>(p));
    // Q(lambda) scans its returns G; q only enters A = G - q (stored, or summed).
    if (kQ) producer.q_read = a[role::values].present && (a[role::advantages].present || engine::wants_sums(a));
    producer.log_probs = !kQ && p.log_probs;
    engine::run_engine(producer, a, converting, false, kByteFlags<F>);
}

template <typename C, typename F, bool kSteps>
void run_episodic(const engine::arrays& a, const standard_params& p, bool converting) {
    engine::episodic_producer<C, F, kSteps> producer(a, family_scalars_of<C>(p));
    producer.reset_at_start = p.reset_at_start;
    engine::run_engine(producer, a, converting, false, kByteFlags<F>);
}

// linear_recurrence: the scan itself, forwards or (reverse) backwards over time.
template <typename C>
void run_recurrence(const engine::arrays& a, const standard_params& p, bool converting) {
    if (p.reverse)
        engine::run_engine(engine::recurrence_producer<C, false>(a), a, converting);
    else
        engine::run_engine(engine::recurrence_producer<C, true>(a), a, converting);
}

// GAE / TD(lambda) read no ratios; V-trace's advantages are its pg advantages.
template <typename C, typename F, bool kSteps>
runner standard_runner(const engine::arrays& a, estimator kind) {
    const bool pg = kind == estimator::vtrace;
    if (a[role::importance].present)
        return pg ? run_standard<C, F, true, true, kSteps> : run_standard<C, F, true, false, kSteps>;
    return pg ? run_standard<C, F, false, true, kSteps> : run_standard<C, F, false, false, kSteps>;
}

template <typename C, typename F, bool kSteps>
runner runner_for(const engine::arrays& a, estimator kind) {
    switch (kind) {
        case estimator::puff_advantage: return kSteps ? nullptr : run_puff<C>;  // dones arithmetic: of type C
        case estimator::gae:
        case estimator::td_lambda:
        case estimator::vtrace: return standard_runner<C, F, kSteps>(a, kind);
        case estimator::discounted_returns: return run_discounted<C, F, kSteps>;
        case estimator::retrace: return run_action_values<C, F, false, kSteps>;
        case estimator::q_lambda: return run_action_values<C, F, true, kSteps>;
        case estimator::episodic_sum: return run_episodic<C, F, kSteps>;
        case estimator::linear_recurrence: return kSteps ? nullptr : run_recurrence<C>;  // reads no flags
        case estimator::n_step_returns: break;  // n_step_returns.cpp
    }
    return nullptr;
}

// Per-step gamma / lambda arrays (the kinds table refuses them for the puff advantage).
template <typename C, typename F>
runner runner_for(const engine::arrays& a, estimator kind) {
    const bool steps = a[role::gamma].present || a[role::lambda].present;
    return steps ? runner_for<C, F, true>(a, kind) : runner_for<C, F, false>(a, kind);
}

// The call's memory holds flags of C or of one byte; converted lines, flags of type C, but
// where every flag is a byte adjacent along the traversal (read in place).
template <typename C>
void run_in(engine::arrays& a, const standard_params& p) {
    const bool puff = p.kind == estimator::puff_advantage;
    const bool converting = !engine::reads_in_place<C>(a, puff);
    if (!converting) a.stream = engine::streams(a);
    const bool bytes = converting ? !puff && engine::flags_stay_bytes(a, true)
                                  : engine::byte_flags(a[role::terminated].type);
    const runner run = bytes ? runner_for<C, std::uint8_t>(a, p.kind) : runner_for<C, C>(a, p.kind);
    run(a, p, converting);
}

}  // namespace

void estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    engine::arrays a = engine_arrays(arrays);
    if (params.kind == estimator::n_step_returns) {
        const bool converting = engine::computes_in_double(a) ? !engine::reads_in_place<double>(a, false)
                                                              : !engine::reads_in_place<float>(a, false);
        if (!converting) a.stream = engine::streams(a);
        return engine::n_step_returns_cpu(arrays, a, params, converting);
    }
    if (is_standard_form(a, params)) return standard_form_cpu(a, params);  // issue 29's forms
    if (engine::computes_in_double(a))
        run_in<double>(a, params);
    else
        run_in<float>(a, params);
}

}  // namespace puffadv::detail
