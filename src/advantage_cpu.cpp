// The CPU backend's entry (core/backends.hpp: detail::estimate_cpu): the table
// of kinds, each a producer and epilogue of the one CPU engine (src/cpu/).
//
// The table itself is cpu/estimator_table.hpp, compiled as one unit per
// arithmetic type, flag type and per-step form (cpu/runner_instance.cpp.in).
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
#include "cpu/estimator_table.hpp"
#include "cpu/n_step_returns.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

using engine::role;
using cpu_table::runner;

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

// Per-step gamma / lambda arrays (the kinds table refuses them for the puff advantage).
template <typename C, typename F>
runner runner_of(const engine::arrays& a, estimator kind) {
    const bool steps = a[role::gamma].present || a[role::lambda].present;
    return steps ? cpu_table::runner_for<C, F, true>(a, kind) : cpu_table::runner_for<C, F, false>(a, kind);
}

// The call's memory holds flags of C or of one byte; converted lines, flags of type C, but
// where every flag is a byte adjacent along the traversal (read in place).
template <typename C>
void run_in(engine::arrays& a, const standard_params& p) {
    const bool puff = p.kind == estimator::puff_advantage;
    engine::choose_walk<C>(a, puff);
    const bool bytes = a.walk.converting ? !puff && engine::flags_stay_bytes(a)
                                         : engine::byte_flags(a[role::terminated].type);
    const runner run = bytes ? runner_of<C, std::uint8_t>(a, p.kind) : runner_of<C, C>(a, p.kind);
    run(a, p);
}

}  // namespace

void estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    engine::arrays a = engine_arrays(arrays);
    if (params.kind == estimator::n_step_returns) return engine::n_step_returns_cpu(arrays, a, params);
    if (is_standard_form(a, params)) return standard_form_cpu(a, params);  // issue 29's forms
    if (engine::computes_in_double(a))
        run_in<double>(a, params);
    else
        run_in<float>(a, params);
}

}  // namespace puffadv::detail
