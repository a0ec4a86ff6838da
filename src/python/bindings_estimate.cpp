// The one nanobind entry (bindings_estimate.hpp). Like bindings.cpp it only
// translates: DLPack arrays become puffadv::matrix views (time-major data by
// swapping strides, never copying), None an absent array, and the core's one
// entry checks everything, naming each array as the kinds table does.
#include "python/bindings_estimate.hpp"

#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/stl/string.h>

#include "core/conventions_detail.hpp"
#include "python/bindings_arrays.hpp"
#include "python/bindings_release.hpp"

namespace nb = nanobind;

namespace puffadv::bindings {
namespace {

using detail::argument_role;

// time_axis as the core's int64, or the core's own message for a Python int beyond it.
std::int64_t time_axis_of(nb::handle time_axis, const standard_params& params) {
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(time_axis.ptr(), &overflow);
    if (value == -1 && PyErr_Occurred()) throw nb::python_error();
    if (overflow)
        throw value_error(detail::time_axis_message(detail::argument_name(params, argument_role::rewards),
                                                    nb::str(time_axis).c_str()));
    return value;
}

bool absent(nb::handle h) { return !h.is_valid() || h.is_none(); }

// The role of a dict key, or role_count. The keys Python code writes are interned
// string literals, so an identity test against the interned role names finds them
// without comparing characters (a string cast and compare per key cost ~0.15 us).
int role_of_key(nb::handle key) {
    static PyObject* const* const interned = [] {
        static PyObject* names[detail::role_count];
        for (int role = 0; role < detail::role_count; ++role)
            names[role] = PyUnicode_InternFromString(detail::role_key(static_cast<argument_role>(role)));
        return names;
    }();
    for (int role = 0; role < detail::role_count; ++role)
        if (key.ptr() == interned[role]) return role;
    if (!PyUnicode_Check(key.ptr())) return detail::role_count;
    for (int role = 0; role < detail::role_count; ++role)
        if (PyUnicode_Compare(key.ptr(), interned[role]) == 0) return role;
    if (PyErr_Occurred()) PyErr_Clear();
    return detail::role_count;
}

// _core.estimate: the arrays keyed by role; an unknown key is a TypeError naming it.
void estimate_entry(const std::string& kind_name, nb::dict arrays, double gamma, double lambda, double rho_clip,
                    double c_clip, double rho_pg_clip, std::int64_t n, bool log_probs, bool reset_at_start,
                    const std::string& lambda_name, nb::int_ time_axis, nb::handle stream, bool reverse, double alpha,
                    bool check_only) {
    const estimator kind = detail::kind_from_name(kind_name);
    role_handles by_role{};
    std::string unknown;
    for (auto [key, value] : arrays) {
        const int role = role_of_key(key);
        if (role < detail::role_count) {
            by_role[role] = value;
            continue;
        }
        const std::string name = nb::isinstance<nb::str>(key) ? nb::cast<std::string>(key)
                                                              : std::string(nb::repr(key).c_str());
        unknown += (unknown.empty() ? "'" : ", '") + name + "'";
    }
    if (!unknown.empty()) {
        std::string known;
        for (int role = 0; role < detail::role_count; ++role)
            known += (role ? ", " : "") + std::string(detail::role_key(static_cast<argument_role>(role)));
        throw type_error("arrays has unknown keys " + unknown + "; its keys are the roles " + known);
    }
    standard_params p{kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip, lambda_name.c_str()};
    p.n = n;
    p.log_probs = log_probs;
    p.reset_at_start = reset_at_start;
    p.reverse = reverse;
    p.alpha = alpha;
    estimate(by_role, p, time_axis, stream, none_wording::dlpack, check_only);
}

}  // namespace

void estimate(const role_handles& arrays, const standard_params& params, nb::handle time_axis, nb::handle stream,
              none_wording wording, bool check_only) {
    const estimator kind = params.kind;
    const detail::kind_info& info = detail::kind_info_of(kind);
    array_holder keep[detail::role_count];
    standard_arrays a;
    std::optional<matrix> imported[detail::role_count];  // set in `a` below (kinds.hpp: visit_field)
    auto import_role = [&](argument_role r) {
        const int i = static_cast<int>(r);
        const bool always = detail::need_of(info, r) == detail::need::always;
        if (!always && absent(arrays[i])) return;
        const nb::handle h = absent(arrays[i]) ? nb::handle(Py_None) : arrays[i];
        const char* name = detail::argument_name(kind, r, params.log_probs);
        const bool output = detail::is_output(r);
        std::optional<matrix>& slot = imported[i];
        if (!always) {
            slot = import_array(h, name, keep[i], /*optional=*/true, output);
        } else if (wording == none_wording::dlpack) {
            slot = import_array(h, name, keep[i], /*optional=*/false, output);
        } else {
            slot = import_array(h, name, keep[i], /*optional=*/true, output);
            if (!slot) throw type_error(std::string(name) + " must be an array, got None");
        }
    };
    // The kind's reference array first (the puff advantage's values), then by role.
    const argument_role first = info.inputs[0].role;
    import_role(first);
    for (int i = 0; i < detail::role_count; ++i)
        if (static_cast<argument_role>(i) != first) import_role(static_cast<argument_role>(i));
    for (int i = 0; i < detail::role_count; ++i) detail::set_array(a, static_cast<argument_role>(i), imported[i]);

    const std::uintptr_t handle = stream_handle(stream);
    if (time_axis.is_valid() && kind != estimator::puff_advantage)  // the puff advantage: batch-major only
        if (auto problem = detail::apply_time_axis(a, time_axis_of(time_axis, params), params))
            throw value_error(problem.message);
    if (check_only) return detail::throw_problem(find_standard_problem(a, params));
    const released_gil release;  // `keep` holds the arrays until after this scope
    compute_standard_estimate(a, params, reinterpret_cast<gpu_stream>(handle));
}

void register_estimate(nb::module_& m) {
    m.def("estimate", &estimate_entry, nb::arg("kind"), nb::arg("arrays"), nb::kw_only(), nb::arg("gamma"),
          nb::arg("lambda_"), nb::arg("rho_clip") = 1.0, nb::arg("c_clip") = 1.0, nb::arg("rho_pg_clip") = 1.0,
          nb::arg("n") = 1, nb::arg("log_probs") = false, nb::arg("reset_at_start") = false,
          nb::arg("lambda_name") = "lambda", nb::arg("time_axis") = nb::int_(1), nb::arg("stream") = 0,
          nb::arg("reverse") = false,
          nb::arg("alpha") = 1.0, nb::arg("check_only") = false,
          "Any kind (gae, td_lambda, vtrace, discounted_returns, retrace, q_lambda, n_step_returns, "
          "episodic_sum, puff_advantage, linear_recurrence: reverse=True runs it backwards; value_vjp: the "
          "backward of gae, td_lambda and discounted_returns) into the given "
          "outputs. `arrays` maps roles (rewards, values, "
          "terminated, truncated, last_value, bootstrap_values, importance, next_values, target_probs, "
          "behaviour_probs, greedy, decay, gamma_steps, lambda_steps (per-step gamma and lambda), sample_mask, advantages, returns, abs_sums, sums, square_sums) to arrays or None; "
          "the puff advantage's dones are its `terminated`, and it is batch-major whatever time_axis says. "
          "All checks happen in the core; check_only=True applies them (raising as a call would) and computes "
          "nothing.");
}

}  // namespace puffadv::bindings
