// Exports the XLA FFI handlers as PyCapsules, the form jax.ffi.register_ffi_target
// takes, plus the facts python/puffadv/jax.py needs to refuse an older jaxlib.
#include "jax/register.hpp"

#include "jax/ffi_handlers.hpp"

namespace nb = nanobind;

#ifndef PUFF_JAXLIB_BUILD_VERSION
#define PUFF_JAXLIB_BUILD_VERSION "unknown"
#endif

namespace puffadv::jax {

void register_jax_targets(nb::module_& m) {
    m.def(
        "jax_ffi_targets",
        [] {
            nb::list out;
            for (const ffi_target& t : ffi_targets()) {
                // A capsule without a name and without a destructor: the handlers are
                // functions of this module, which XLA keeps loaded while it holds them.
                nb::object capsule = nb::steal(PyCapsule_New(t.handler, nullptr, nullptr));
                if (!capsule.is_valid()) throw nb::python_error();
                out.append(nb::make_tuple(t.name, t.platform, capsule));
            }
            return out;
        },
        "[(target name, XLA platform, handler capsule)] of every handler in this build.");
    m.def(
        "jax_ffi_build",
        [] {
            nb::dict d;
            d["api_version"] = nb::make_tuple(ffi_api_major(), ffi_api_minor());
            d["jaxlib_version"] = PUFF_JAXLIB_BUILD_VERSION;
            return d;
        },
        "XLA FFI API version of the headers the handlers were compiled with, and "
        "the jaxlib those headers came from.");
    register_argument_checks(m);
}

}  // namespace puffadv::jax
