// nanobind functions of the standard conventions and of the puff advantage's
// fused outputs. Like bindings.cpp it only translates: DLPack arrays become
// puffadv::matrix views (time-major data by swapping strides, never copying),
// None becomes an absent std::optional, and the core checks everything.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <puffadv/conventions.hpp>

#include "python/bindings_arrays.hpp"
#include "python/bindings_release.hpp"
#include "python/bindings_conventions.hpp"
#include "core/conventions_detail.hpp"

namespace nb = nanobind;

namespace puffadv {
namespace {

using bindings::array_holder;

std::optional<matrix> import(nb::handle obj, const char* name, array_holder& keep) {
    return bindings::import_array(obj, name, keep, /*optional=*/true);
}

std::optional<matrix> output(nb::handle obj, const char* name, array_holder& keep) {
    return bindings::import_array(obj, name, keep, /*optional=*/true, /*output=*/true);
}

// time_axis as the core's int64, or the core's own message for a Python int beyond it.
std::int64_t time_axis_of(nb::handle time_axis) {
    int overflow = 0;
    const long long value = PyLong_AsLongLongAndOverflow(time_axis.ptr(), &overflow);
    if (value == -1 && PyErr_Occurred()) throw nb::python_error();
    if (overflow) throw value_error(detail::time_axis_message("rewards", nb::str(time_axis).c_str()));
    return value;
}

matrix required(std::optional<matrix> m, const char* name) {
    if (!m) throw type_error(std::string(name) + " must be an array, got None");
    return *m;
}

void standard_estimate(nb::handle rewards, nb::handle values, nb::handle terminated, nb::handle truncated,
                       nb::handle last_value, nb::handle bootstrap_values, nb::handle importance,
                       nb::handle advantages, nb::handle returns, nb::handle abs_sums, nb::handle sums,
                       nb::handle square_sums, const std::string& kind, double gamma, double lambda,
                       double rho_clip, double c_clip, double rho_pg_clip, nb::int_ time_axis,
                       const std::string& lambda_name, nb::handle stream, nb::handle next_values,
                       nb::handle target_probs, nb::handle behaviour_probs, nb::handle greedy, std::int64_t n,
                       bool log_probs, bool reset_at_start) {
    const estimator estimator_kind = estimator_from_name(kind);
    // Arrays are named as this kind's caller knows them (episodic_sum's "inputs" and "out").
    auto name = [estimator_kind, log_probs](detail::argument_role r) {
        return detail::argument_name(estimator_kind, r, log_probs);
    };
    using role = detail::argument_role;
    array_holder keep[16];
    standard_arrays a;
    a.rewards = required(import(rewards, name(role::rewards), keep[0]), name(role::rewards));
    a.values = import(values, name(role::values), keep[1]);
    a.terminated = required(import(terminated, name(role::terminated), keep[2]), name(role::terminated));
    a.truncated = import(truncated, name(role::truncated), keep[3]);
    a.last_value = import(last_value, name(role::last_value), keep[4]);
    a.bootstrap_values = import(bootstrap_values, name(role::bootstrap_values), keep[5]);
    a.importance = import(importance, name(role::importance), keep[6]);
    a.next_values = import(next_values, name(role::next_values), keep[7]);
    a.target_probs = import(target_probs, name(role::target_probs), keep[8]);
    a.behaviour_probs = import(behaviour_probs, name(role::behaviour_probs), keep[9]);
    a.greedy = import(greedy, name(role::greedy), keep[10]);
    a.advantages = output(advantages, name(role::advantages), keep[11]);
    a.fused.returns = output(returns, "returns", keep[12]);
    a.fused.abs_sums = output(abs_sums, "abs_sums", keep[13]);
    a.fused.sums = output(sums, "sums", keep[14]);
    a.fused.square_sums = output(square_sums, "square_sums", keep[15]);

    const std::uintptr_t handle = bindings::stream_handle(stream);
    if (auto problem = apply_time_axis(a, time_axis_of(time_axis))) throw value_error(problem.message);

    standard_params p{estimator_kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip, lambda_name.c_str()};
    p.n = n;
    p.log_probs = log_probs;
    p.reset_at_start = reset_at_start;
    const bindings::released_gil release;  // `keep` holds the arrays until after this scope
    compute_standard_estimate(a, p, reinterpret_cast<gpu_stream>(handle));
}

void puff_advantage_fused(nb::handle values, nb::handle rewards, nb::handle dones, nb::handle importance,
                          nb::handle advantages, nb::handle returns, nb::handle abs_sums, nb::handle sums,
                          nb::handle square_sums, double gamma, double gae_lambda, double rho_clip,
                          double c_clip, nb::handle stream) {
    array_holder keep[9];
    puff_arrays a{required(import(values, "values", keep[0]), "values"),
                  required(import(rewards, "rewards", keep[1]), "rewards"),
                  required(import(dones, "dones", keep[2]), "dones"),
                  required(import(importance, "importance", keep[3]), "importance"),
                  required(output(advantages, "advantages", keep[4]), "advantages")};
    a.fused.returns = output(returns, "returns", keep[5]);
    a.fused.abs_sums = output(abs_sums, "abs_sums", keep[6]);
    a.fused.sums = output(sums, "sums", keep[7]);
    a.fused.square_sums = output(square_sums, "square_sums", keep[8]);
    const std::uintptr_t handle = bindings::stream_handle(stream);
    const puff_params params{gamma, gae_lambda, rho_clip, c_clip};
    const bindings::released_gil release;
    compute_puff_advantage(a, params, reinterpret_cast<gpu_stream>(handle));
}

}  // namespace

void register_conventions(nb::module_& m) {
    m.def("standard_estimate", &standard_estimate, nb::arg("rewards"), nb::arg("values").none(),
          nb::arg("terminated"), nb::arg("truncated").none(), nb::arg("last_value").none(),
          nb::arg("bootstrap_values").none(), nb::arg("importance").none(), nb::arg("advantages").none(),
          nb::arg("returns").none(), nb::arg("abs_sums").none(), nb::arg("sums").none(),
          nb::arg("square_sums").none(), nb::arg("kind"), nb::arg("gamma"), nb::arg("lambda_"),
          nb::arg("rho_clip"), nb::arg("c_clip"), nb::arg("rho_pg_clip"), nb::arg("time_axis"),
          nb::arg("lambda_name"), nb::arg("stream") = 0, nb::kw_only(), nb::arg("next_values").none() = nb::none(),
          nb::arg("target_probs").none() = nb::none(), nb::arg("behaviour_probs").none() = nb::none(),
          nb::arg("greedy").none() = nb::none(), nb::arg("n") = 1, nb::arg("log_probs") = false,
          nb::arg("reset_at_start") = false,
          "One estimator of the standard family (kind: gae, td_lambda, vtrace, discounted_returns, retrace, "
          "q_lambda, n_step_returns, episodic_sum) into the given outputs; values may be None where the kind "
          "reads none. All checks happen in the core.");
    m.def("puff_advantage_fused", &puff_advantage_fused, nb::arg("values"), nb::arg("rewards"),
          nb::arg("dones"), nb::arg("importance"), nb::arg("advantages"), nb::arg("returns").none(),
          nb::arg("abs_sums").none(), nb::arg("sums").none(), nb::arg("square_sums").none(),
          nb::arg("gamma"), nb::arg("gae_lambda"), nb::arg("rho_clip"), nb::arg("c_clip"),
          nb::arg("stream") = 0,
          "The puff advantage with optional fused outputs and any supported dtypes.");
}

}  // namespace puffadv
