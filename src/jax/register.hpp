// Adds the XLA FFI handlers to the nanobind module puffadv._core (see register.cpp).
#pragma once

#include <nanobind/nanobind.h>

namespace puffadv::jax {

/// Defines _core.jax_ffi_targets() and _core.jax_ffi_build(), which
/// python/puffadv/jax.py reads to register the handlers with XLA.
void register_jax_targets(nanobind::module_& m);

/// Defines _core.jax_check_puff() and _core.jax_check_standard() (argument_checks.cpp).
void register_argument_checks(nanobind::module_& m);

}  // namespace puffadv::jax
