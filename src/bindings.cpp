// nanobind module puffadv._core: a thin layer that turns any DLPack array
// (NumPy, PyTorch, CuPy, JAX, ...) into a puffadv::matrix and calls the core.
// Checks live in the core; this file only translates types.
#include <cstdint>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <puffadv/fallback.hpp>
#include <puffadv/puffadv.hpp>

#include "python/bindings_arrays.hpp"
#include "python/bindings_export_errors.hpp"
#include "core/backends.hpp"  // as_standard_params
#include "core/conventions_detail.hpp"  // time_axis_required_message
#include "python/bindings_conventions.hpp"
#include "python/bindings_estimate.hpp"

#if PUFF_HAS_JAX
#include "jax/register.hpp"
#endif

namespace nb = nanobind;
using namespace puffadv;

namespace {

// PufferLib's five arrays, each required (None is "must be an array ..., got NoneType").
void puff_advantage(nb::handle values, nb::handle rewards, nb::handle dones, nb::handle importance,
                    nb::handle advantages, double gamma, double gae_lambda, double rho_clip,
                    double c_clip, nb::handle stream) {
    using detail::argument_role;
    bindings::role_handles arrays{};
    arrays[static_cast<int>(argument_role::values)] = values;
    arrays[static_cast<int>(argument_role::rewards)] = rewards;
    arrays[static_cast<int>(argument_role::terminated)] = dones;
    arrays[static_cast<int>(argument_role::importance)] = importance;
    arrays[static_cast<int>(argument_role::advantages)] = advantages;
    const standard_params p = detail::as_standard_params(puff_params{gamma, gae_lambda, rho_clip, c_clip});
    bindings::estimate(arrays, p, nb::handle(), stream, bindings::none_wording::dlpack);
}

// What the core reads of an array: for allocating outputs beside a plain DLPack
// producer, whose capsule must be checked before anything (NumPy included) reads it.
nb::tuple describe_array(nb::handle obj, const char* name) {
    bindings::array_holder keep;
    const matrix m = *bindings::import_array(obj, name, keep);
    nb::object shape = m.ndim == 2   ? nb::make_tuple(m.rows, m.cols)
                       : m.ndim == 1 ? nb::make_tuple(m.rows)
                                     : nb::object(nb::none());  // not read: the core names the ndim
    return nb::make_tuple(shape, dtype_name(m.type), device_type_name(m.device.type));
}

nb::dict build_info_dict() {
    const build_info b = get_build_info();
    nb::dict d;
    d["version"] = b.version;
    d["cuda"] = b.has_cuda;
    d["hip"] = b.has_hip;
    d["gpu_architectures"] = b.gpu_architectures;
    d["build_type"] = b.build_type;
    d["compiler"] = b.compiler;
    d["cxx_flags"] = b.cxx_flags;
    d["openmp"] = b.openmp;
    d["sanitizers"] = b.sanitizers;
    return d;
}

nb::dict gpu_status_dict(const std::string& kind) {
    device_type type;
    if (kind == "cuda")
        type = device_type::cuda;
    else if (kind == "hip" || kind == "rocm")
        type = device_type::rocm;
    else
        throw value_error("kind must be 'cuda' or 'hip', got '" + kind + "'");
    const gpu_status s = query_gpu(type);
    nb::dict d;
    d["compiled"] = s.compiled;
    d["device_count"] = s.device_count;
    d["runtime_version"] = s.runtime_version;
    d["driver_version"] = s.driver_version;
    d["device_names"] = s.device_names;
    d["error"] = s.error;
    return d;
}

}  // namespace

NB_MODULE(_core, m) {
    m.doc() = "puffadv's compiled core; use the functions of the puffadv package instead.";

    // type_error derives from std::invalid_argument (ValueError); it is the one
    // case that needs a translator of its own.
    nb::register_exception_translator([](const std::exception_ptr& p, void*) {
        try {
            std::rethrow_exception(p);
        } catch (const type_error& e) {
            PyErr_SetString(PyExc_TypeError, e.what());
        } catch (const gpu_error& e) {
            PyErr_SetString(PyExc_RuntimeError, e.what());
        }
    });
    // Its own class, so that puffadv._dispatch can catch exactly this case (all
    // argument checks passed, no GPU backend or device) and compute on the CPU.
    nb::exception<backend_unavailable>(m, "BackendUnavailableError", PyExc_RuntimeError);

    m.def("puff_advantage", &puff_advantage, nb::arg("values"), nb::arg("rewards"), nb::arg("dones"),
          nb::arg("importance"), nb::arg("advantages"), nb::arg("gamma"), nb::arg("gae_lambda"),
          nb::arg("rho_clip"), nb::arg("c_clip"), nb::arg("stream") = 0,
          "Writes the puff advantage into `advantages`; all checks happen in the core.");
    m.def("synchronize_device", [](const std::string& kind, int index) {
        if (kind != "cuda" && kind != "rocm") throw value_error("kind must be 'cuda' or 'rocm', got '" + kind + "'");
        nb::gil_scoped_release release;
        synchronize_device({kind == "cuda" ? device_type::cuda : device_type::rocm, index});
    }, nb::arg("kind"), nb::arg("index"), "Waits for all work queued on a GPU (for JAX arrays).");
    m.def("describe_array", &describe_array, nb::arg("array"), nb::arg("name"),
          "(shape or None, dtype name, device type) of an array, as the core reads it.");
    m.def("unreadable_reason", [](nb::handle array, const std::string& name) {
        return bindings::unreadable_reason(array, name.c_str());
    }, nb::arg("array"), nb::arg("name"), "Why puffadv cannot read `array` (its words, naming it `name`), or ''.");
    m.def("build_info", &build_info_dict, "What this build of the core contains.");
    m.def("time_axis_required_message", [](const std::string& function) {
        return detail::time_axis_required_message(function.c_str());
    }, nb::arg("function"), "The TypeError's message for a family call without time_axis (issue 33).");
    m.def("gpu_status", &gpu_status_dict, nb::arg("kind"), "What a GPU backend sees right now.");
    // Reads PUFFADV_NUM_THREADS with the GIL held, where os.environ changes happen.
    m.def("cpu_thread_count", &cpu_thread_count, "Threads a CPU call uses now.");
    m.def("pin_cpu_thread_count", [](bool pin) { pin_cpu_thread_count(pin); }, nb::arg("pin"),
          "True: read PUFFADV_NUM_THREADS now for this thread's next calls (they release the GIL).");
    // The one entry for every kind; the older functions below call its path.
    bindings::register_estimate(m);
    puffadv::register_conventions(m);  // GAE, TD(lambda), V-trace, fused puff outputs
    // The CPU fallback policy (include/puffadv/fallback.hpp), used by puffadv._fallback.
    m.def("fallback_mode", [] {
        return current_fallback_mode() == fallback_mode::error ? "error" : "warn";
    });
    m.def("fallback_warning_message", &fallback_warning_message, nb::arg("reason"), nb::arg("bytes"));
    m.def("fallback_error_message", &fallback_error_message, nb::arg("reason"));
    m.def("record_fallback", &record_fallback, nb::arg("bytes"), nb::arg("reason"));
    m.def("fallback_stats", [] {
        const fallback_stats s = get_fallback_stats();
        nb::dict d;
        d["calls"] = s.calls;
        d["bytes"] = s.bytes;
        d["last_reason"] = s.last_reason;
        return d;
    });
#if PUFF_HAS_JAX
    puffadv::jax::register_jax_targets(m);  // XLA FFI handler capsules
#endif
}
