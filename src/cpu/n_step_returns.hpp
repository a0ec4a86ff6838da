// n_step_returns' own traversal beside the engine's (n_step_returns.cpp): its
// windows are no first-order scan.
#pragma once

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

/// n_step_returns over `a` (the engine's view of `call`); `converting`: the
/// lines are read converted (engine_sources.hpp), as the engine would.
void n_step_returns_cpu(const standard_arrays& call, arrays& a, const standard_params& params, bool converting);

}  // namespace puffadv::detail::engine
