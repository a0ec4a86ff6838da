// n_step_returns' own traversal beside the engine's (n_step_returns.cpp): its
// windows are no first-order scan.
#pragma once

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

/// n_step_returns over `a` (the engine's view of `call`), its walk chosen here
/// (engine_run.hpp: choose_walk) as the engine's entries choose theirs.
void n_step_returns_cpu(const standard_arrays& call, arrays& a, const standard_params& params);

}  // namespace puffadv::detail::engine
