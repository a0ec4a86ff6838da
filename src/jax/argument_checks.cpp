// The core's argument checks, run by python/puffadv/jax.py before lowering, on
// what a traced JAX array has: a shape and a dtype. Each array becomes a matrix
// view at a fake address (distinct, aligned, never read), goes through the same
// steps as in the nanobind functions (dtype, time axis, default outputs), then
// through the core's one check (core/layer_call.hpp), as the handlers' calls do: so
// a JAX caller gets the TypeError / ValueError that puffadv.compute_puff_advantage
// or puffadv.gae would raise, and no check is written twice.
#include <cstdint>
#include <optional>
#include <string>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <puffadv/conventions.hpp>
#include <puffadv/puffadv.hpp>

#include "core/layer_call.hpp"
#include "jax/register.hpp"

namespace nb = nanobind;

namespace puffadv::jax {
namespace {

using detail::is_reduced;

bool parse_dtype(const std::string& name, dtype& out) {
    static const std::pair<const char*, dtype> known[] = {
        {"float32", dtype::float32}, {"float64", dtype::float64}, {"float16", dtype::float16},
        {"bfloat16", dtype::bfloat16}, {"uint8", dtype::uint8}, {"bool", dtype::boolean}};
    for (auto [n, t] : known)
        if (name == n) return out = t, true;
    return false;
}

/// A view of an array that is only a (shape, dtype name) pair.
class fake_arrays {
public:
    matrix view(nb::handle spec, const char* name, bool writable = false) {
        const auto shape = nb::cast<nb::tuple>(spec[0]);
        const auto type = nb::cast<std::string>(spec[1]);
        matrix m;
        if (!parse_dtype(type, m.type))
            throw type_error(unreadable_dtype_message(name, type));
        return shaped(m, shape, writable);
    }

    /// An output the Python layer would allocate: `like`'s shape, dtype `type`.
    matrix output(nb::handle like_spec, dtype type) {
        matrix m;
        m.type = type;
        return shaped(m, nb::cast<nb::tuple>(like_spec[0]), true);
    }

private:
    matrix shaped(matrix& m, const nb::tuple& shape, bool writable) {
        // 1 TiB apart and 256-byte aligned: no two views overlap, none is misaligned.
        m.data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(++count_) << 40);
        m.writable = writable;
        m.ndim = static_cast<int>(shape.size());
        if (m.ndim == 2) {
            m.rows = nb::cast<std::int64_t>(shape[0]);
            m.cols = nb::cast<std::int64_t>(shape[1]);
            m.row_stride = m.cols;
        } else if (m.ndim == 1) {
            m.rows = nb::cast<std::int64_t>(shape[0]);
            m.cols = 1;
            m.row_stride = 1;
        }
        return m;
    }

    std::uintptr_t count_ = 0;
};

void check_puff(nb::handle values, nb::handle rewards, nb::handle dones, nb::handle importance,
                double gamma, double gae_lambda, double rho_clip, double c_clip) {
    fake_arrays fake;
    puff_arrays a;
    a.values = fake.view(values, "values");
    a.rewards = fake.view(rewards, "rewards");
    a.dones = fake.view(dones, "dones");
    a.importance = fake.view(importance, "importance");
    // As puffadv.compute_puff_advantage allocates it: float32 for 16-bit floats.
    a.advantages = fake.output(values, is_reduced(a.values.type) ? dtype::float32 : a.values.type);
    const puff_params params{gamma, gae_lambda, rho_clip, c_clip};
    detail::throw_problem(layer::find_problem(detail::as_standard_call(a), detail::as_standard_params(params)));
}

/// The arrays of one call by the core's roles (standard_arrays' fields): each a
/// (shape, dtype name, the caller's name for it) triple, absent roles missing.
void view_roles(fake_arrays& fake, const nb::dict& arrays, standard_arrays& a) {
    using role = detail::argument_role;
    const std::pair<const char*, role> optional[] = {
        {"values", role::values},
        {"truncated", role::truncated},
        {"last_value", role::last_value},
        {"bootstrap_values", role::bootstrap_values},
        {"importance", role::importance},
        {"next_values", role::next_values},
        {"target_probs", role::target_probs},
        {"behaviour_probs", role::behaviour_probs},
        {"greedy", role::greedy},
        {"decay", role::decay},
        {"gamma_steps", role::gamma},
        {"lambda_steps", role::lambda},
        {"sample_mask", role::sample_mask}};
    const auto view = [&](const char* key) {
        nb::handle spec = arrays[key];
        return fake.view(spec, nb::cast<const char*>(spec[2]));
    };
    a.rewards = view("rewards");
    if (arrays.contains("terminated")) a.terminated = view("terminated");  // linear_recurrence: none
    for (auto [key, array] : optional)
        if (arrays.contains(key)) layer::set_view(a, array, view(key));
}

void check_standard(const std::string& kind, const nb::dict& arrays, double gamma, double lambda,
                    double rho_clip, double c_clip, double rho_pg_clip, std::int64_t n, bool log_probs,
                    bool reset_at_start, std::int64_t time_axis, const std::string& lambda_name,
                    bool advantages, double alpha) {
    fake_arrays fake;
    standard_arrays a;
    view_roles(fake, arrays, a);
    // The outputs puffadv.jax allocates, shaped like rewards: the values' dtype
    // (the rewards' where a kind reads none), float32 for 16-bit floats.
    const dtype in = a.values ? a.values->type : a.rewards.type;
    const dtype out = is_reduced(in) ? dtype::float32 : in;
    if (advantages) a.advantages = fake.output(arrays["rewards"], out);
    a.fused.returns = fake.output(arrays["rewards"], out);

    standard_params p;
    p.kind = estimator_from_name(kind);
    p.gamma = gamma;
    p.lambda = lambda;
    p.rho_clip = rho_clip;
    p.c_clip = c_clip;
    p.rho_pg_clip = rho_pg_clip;
    p.lambda_name = lambda_name.c_str();
    p.n = n;
    p.log_probs = log_probs;
    p.reset_at_start = reset_at_start;
    p.alpha = alpha;
    if (auto problem = detail::apply_time_axis(a, time_axis, p)) throw value_error(problem.message);
    detail::throw_problem(layer::find_problem(a, p));
}

}  // namespace

void register_argument_checks(nb::module_& m) {
    m.def("jax_check_puff", &check_puff, nb::arg("values"), nb::arg("rewards"), nb::arg("dones"),
          nb::arg("importance"), nb::arg("gamma"), nb::arg("gae_lambda"), nb::arg("rho_clip"),
          nb::arg("c_clip"),
          "Raises what compute_puff_advantage would for arrays given as (shape, dtype name).");
    m.def("jax_check_standard", &check_standard, nb::arg("kind"), nb::arg("arrays"), nb::arg("gamma"),
          nb::arg("lambda_"), nb::arg("rho_clip"), nb::arg("c_clip"), nb::arg("rho_pg_clip"), nb::arg("n"),
          nb::arg("log_probs"), nb::arg("reset_at_start"), nb::arg("time_axis"), nb::arg("lambda_name"),
          nb::arg("advantages"), nb::arg("alpha") = 1.0,
          "Raises what the estimator `kind` of the puffadv module would for arrays given by role as\n"
          "(shape, dtype name, argument name) triples.");
}

}  // namespace puffadv::jax
