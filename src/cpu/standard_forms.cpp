// GAE and V-trace in the forms of issue 29 on the CPU engine: next_values (V'_t
// at every step), rlax's sample_mask and leaky V-trace's alpha. Each form is a
// compile-time variant of standard_producer (estimators_advantage.hpp),
// instantiated beside the table of kinds (estimator_table.hpp's form_runner_for),
// so that the calls without them keep today's code; each reads per-step gamma and
// lambda arrays where the call has them. Every dtype and layout: the engine's
// sources convert what its traversals do not read in place.
#include <cstdint>

#include "cpu/engine_run.hpp"
#include "cpu/estimator_table.hpp"
#include "cpu/standard_forms.hpp"

namespace puffadv::detail {
namespace {

using engine::role;
using cpu_table::runner;

template <typename C>
void run_in(engine::arrays& a, const standard_params& p) {
    engine::choose_walk<C>(a, false);
    const bool bytes = !a.walk.converting && engine::byte_flags(a[role::terminated].type);
    const runner run =
        bytes ? cpu_table::form_runner_for<C, std::uint8_t>(a, p) : cpu_table::form_runner_for<C, C>(a, p);
    run(a, p);
}

}  // namespace

bool is_standard_form(const engine::arrays& a, const standard_params& p) {
    if (p.kind != estimator::gae && p.kind != estimator::vtrace) return false;
    return a[role::next_values].present ||
           (p.kind == estimator::vtrace && (a[role::sample_mask].present || cpu_table::leaky_vtrace(a, p)));
}

void standard_form_cpu(engine::arrays a, const standard_params& p) {
    if (engine::computes_in_double(a))
        run_in<double>(a, p);
    else
        run_in<float>(a, p);
}

}  // namespace puffadv::detail
