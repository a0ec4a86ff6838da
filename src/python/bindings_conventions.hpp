// Registers the standard conventions (GAE, TD(lambda), V-trace) and the fused
// puff advantage on puffadv._core; see bindings_conventions.cpp.
#pragma once

#include <nanobind/nanobind.h>

namespace puffadv {
void register_conventions(nanobind::module_& m);
}
