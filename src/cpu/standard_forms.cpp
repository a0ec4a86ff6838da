// GAE and V-trace in the forms of issue 29 on the CPU engine: next_values (V'_t
// at every step), rlax's sample_mask and leaky V-trace's alpha. Each form is a
// compile-time variant of standard_producer (estimators_advantage.hpp) in a
// translation unit of its own, so that the calls without them keep today's
// code (advantage_cpu.cpp) and its compile time. Every dtype and layout: the
// engine's sources convert what its traversals do not read in place.
#include <cstdint>
#include <string>

#include "cpu/engine_run.hpp"
#include "cpu/estimators_advantage.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

using engine::role;
using runner = void (*)(const engine::arrays&, const standard_params&, bool converting);

template <typename C, typename F, bool kImp, bool kPg, bool kNext, bool kExtra>
void run_form(const engine::arrays& a, const standard_params& p, bool converting) {
    const engine::advantage_scalars<C> s{C(p.gamma),      C(p.gamma) * C(p.lambda), C(p.rho_clip), C(p.c_clip),
                                         C(p.rho_pg_clip), C(p.lambda),              C(p.alpha)};
    engine::run_engine(engine::standard_producer<C, F, kImp, kPg, false, kNext, kExtra>(a, s), a, converting);
}

bool leaky(const engine::arrays& a, const standard_params& p) {
    return a[role::importance].present && p.alpha != 1.0;
}

template <typename C, typename F, bool kImp>
runner form_of(const engine::arrays& a, const standard_params& p) {
    const bool next = a[role::next_values].present;
    if (p.kind == estimator::vtrace) {
        if (a[role::sample_mask].present || leaky(a, p))
            return next ? run_form<C, F, kImp, true, true, true> : run_form<C, F, kImp, true, false, true>;
        return run_form<C, F, kImp, true, true, false>;
    }
    return run_form<C, F, kImp, false, true, false>;
}

template <typename C>
void run_in(engine::arrays& a, const standard_params& p) {
    const bool converting = !engine::reads_in_place<C>(a, false);
    if (!converting) a.stream = engine::streams(a);
    const bool bytes = !converting && engine::byte_flags(a[role::terminated].type);
    const bool imp = a[role::importance].present;
    const runner run = bytes ? (imp ? form_of<C, std::uint8_t, true>(a, p) : form_of<C, std::uint8_t, false>(a, p))
                             : (imp ? form_of<C, C, true>(a, p) : form_of<C, C, false>(a, p));
    run(a, p, converting);
}

}  // namespace

bool is_standard_form(const engine::arrays& a, const standard_params& p) {
    if (p.kind != estimator::gae && p.kind != estimator::vtrace) return false;
    return a[role::next_values].present ||
           (p.kind == estimator::vtrace && (a[role::sample_mask].present || leaky(a, p)));
}

void standard_form_cpu(engine::arrays a, const standard_params& p) {
    // The per-step producer (kSteps) and these forms were built side by side; until one
    // producer takes both, their combination is refused rather than computed with one
    // of them ignored.
    if (a[role::gamma].present || a[role::lambda].present)
        throw value_error(std::string(estimator_name(p.kind)) +
                          ": per-step gamma or lambda arrays together with next_values, sample_mask or alpha "
                          "are not supported yet; pass scalar gamma and lambda with them");
    if (engine::computes_in_double(a))
        run_in<double>(a, p);
    else
        run_in<float>(a, p);
}

}  // namespace puffadv::detail
