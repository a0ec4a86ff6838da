// The older nanobind functions of the standard conventions and of the puff
// advantage's fused outputs, kept for the Python layer until it calls
// _core.estimate: thin calls of the one path (bindings_estimate.cpp).
#include <cstdint>
#include <string>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <puffadv/conventions.hpp>

#include "core/backends.hpp"  // as_standard_params
#include "python/bindings_conventions.hpp"
#include "python/bindings_estimate.hpp"

namespace nb = nanobind;

namespace puffadv {
namespace {

using detail::argument_role;
using bindings::none_wording;

void standard_estimate(nb::handle rewards, nb::handle values, nb::handle terminated, nb::handle truncated,
                       nb::handle last_value, nb::handle bootstrap_values, nb::handle importance,
                       nb::handle advantages, nb::handle returns, nb::handle abs_sums, nb::handle sums,
                       nb::handle square_sums, const std::string& kind, double gamma, double lambda,
                       double rho_clip, double c_clip, double rho_pg_clip, nb::int_ time_axis,
                       const std::string& lambda_name, nb::handle stream, nb::handle next_values,
                       nb::handle target_probs, nb::handle behaviour_probs, nb::handle greedy, std::int64_t n,
                       bool log_probs, bool reset_at_start) {
    const estimator estimator_kind = estimator_from_name(kind);
    const bindings::role_handles arrays = bindings::by_role({
        {argument_role::rewards, rewards},         {argument_role::values, values},
        {argument_role::terminated, terminated},   {argument_role::truncated, truncated},
        {argument_role::last_value, last_value},   {argument_role::bootstrap_values, bootstrap_values},
        {argument_role::importance, importance},   {argument_role::next_values, next_values},
        {argument_role::target_probs, target_probs}, {argument_role::behaviour_probs, behaviour_probs},
        {argument_role::greedy, greedy},           {argument_role::advantages, advantages},
        {argument_role::returns, returns},         {argument_role::abs_sums, abs_sums},
        {argument_role::sums, sums},               {argument_role::square_sums, square_sums}});
    standard_params p{estimator_kind, gamma, lambda, rho_clip, c_clip, rho_pg_clip, lambda_name.c_str()};
    p.n = n;
    p.log_probs = log_probs;
    p.reset_at_start = reset_at_start;
    bindings::estimate(arrays, p, time_axis, stream, none_wording::short_);
}

void puff_advantage_fused(nb::handle values, nb::handle rewards, nb::handle dones, nb::handle importance,
                          nb::handle advantages, nb::handle returns, nb::handle abs_sums, nb::handle sums,
                          nb::handle square_sums, double gamma, double gae_lambda, double rho_clip,
                          double c_clip, nb::handle stream) {
    const bindings::role_handles arrays = bindings::by_role({
        {argument_role::values, values},         {argument_role::rewards, rewards},
        {argument_role::terminated, dones},      {argument_role::importance, importance},
        {argument_role::advantages, advantages}, {argument_role::returns, returns},
        {argument_role::abs_sums, abs_sums},     {argument_role::sums, sums},
        {argument_role::square_sums, square_sums}});
    const standard_params p = detail::as_standard_params(puff_params{gamma, gae_lambda, rho_clip, c_clip});
    bindings::estimate(arrays, p, nb::handle(), stream, none_wording::short_);
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
