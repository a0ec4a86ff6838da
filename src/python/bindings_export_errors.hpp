// Why an argument could not be read through DLPack, in words that name it and
// say what came (byte order, dtype kind, layout, device) and what would do.
// Only ever on the error path.
#pragma once

#include <string>

#include <nanobind/nanobind.h>

namespace puffadv::bindings {

/// Why puffadv cannot read obj (a deleted JAX array, a NumPy dtype or a torch
/// tensor DLPack cannot carry), naming it `name`; "" when none of those applies.
/// Also the torch operators' words for such tensors (_core.unreadable_reason).
std::string unreadable_reason(nanobind::handle obj, const char* name);

/// obj.__dlpack__() raised `refusal`: raises a TypeError naming `name` that
/// says why, chained from the producer's own exception.
[[noreturn]] void throw_refused_export(nanobind::handle obj, const char* name, nanobind::python_error& refusal);

/// A capsule that is not a DLPack tensor: another kind, or one already consumed.
/// `from_producer`: obj.__dlpack__() returned it, rather than it being the argument.
[[noreturn]] void throw_foreign_capsule(const char* name, const char* capsule_name, bool from_producer);

}  // namespace puffadv::bindings
