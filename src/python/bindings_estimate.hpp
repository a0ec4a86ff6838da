// The one nanobind entry, _core.estimate(kind, arrays, ...): every kind, the
// puff advantage included, with its arrays keyed by role (core/kinds.hpp) and
// imported under the names its caller knows them by. The older functions
// (standard_estimate, puff_advantage_fused, puff_advantage) are thin calls of
// the same path.
#pragma once

#include <array>
#include <initializer_list>
#include <utility>

#include <nanobind/nanobind.h>

#include <puffadv/conventions.hpp>

#include "core/kinds.hpp"

namespace puffadv::bindings {

/// One call's arrays by role; a null or None handle is an absent array.
using role_handles = std::array<nanobind::handle, detail::role_count>;

/// The handles placed in their roles' slots (every other slot absent): callers name
/// each array's role, so a new role never shifts the others (issue 29 added roles
/// between the inputs and the outputs).
inline role_handles by_role(std::initializer_list<std::pair<detail::argument_role, nanobind::handle>> given) {
    role_handles arrays{};
    for (const auto& [role, handle] : given) arrays[static_cast<int>(role)] = handle;
    return arrays;
}

/// How an array the kind takes in every call (need::always) is refused when it is None.
enum class none_wording {
    dlpack,  ///< "<name> must be an array (NumPy, ... DLPack producer), got NoneType"
    short_,  ///< "<name> must be an array, got None" (standard_estimate, puff_advantage_fused)
};

/// Imports the arrays, applies time_axis (a Python int; a null handle or the
/// puff advantage: none applied), then computes through the core with the GIL released.
/// The kind is params.kind. `check_only`: the core's checks alone (the torch autograd
/// path checks the outputs a caller gives before it computes into tensors of its own).
void estimate(const role_handles& arrays, const standard_params& params, nanobind::handle time_axis,
              nanobind::handle stream, none_wording wording, bool check_only = false);

/// Registers _core.estimate.
void register_estimate(nanobind::module_& m);

}  // namespace puffadv::bindings
