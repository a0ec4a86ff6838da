// The kinds table of the GPU engine: every estimator as a step producer and
// an epilogue (puff_steps.cuh, standard_steps.cuh and standard_store.cuh, family_steps.cuh, backward_steps.cuh,
// action_value_steps.cuh) with what the planner (planner.cuh) needs to know of it, and nothing of any
// traversal. A scan kind says:
//   static constexpr bool reversed;        the scan runs over reversed time
//   static void read(call_layout&, arrays) the [rows, horizon] arrays it reads and writes
//   static bool fast_ok(const call_layout&)          whether a fast call takes the fast kernels
//   template <In, Flag, Out> static constexpr bool stores()   the storage types it is compiled for
//   template <In> static void with_inputs(arrays, f)  f(inputs): its compile-time input variants
//                                          (inputs_per_step: issue 29's per-step gamma / lambda arrays,
//                                          the generic kernels only: engine.cuh)
//   template <In, Inputs> using tuning               its policies (see planner.cuh)
//   template <T, Inputs, Cols> static producer(arrays, params, Cols)
//   template <T, Cols> static epilogue(arrays, params, Cols)
//   template <T> using generic_columns               the columns of the generic kernels
// Cols are the column makers of call_layout.cuh (fixed_columns, any_columns).
// n-step returns are windows, not a scan: n_step_window_of (engine.cuh runs them).
#pragma once

#include <optional>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/action_value_steps.cuh"
#include "gpu/family_steps.cuh"
#include "gpu/planner.cuh"
#include "gpu/puff_steps.cuh"
#include "gpu/standard_steps.cuh"
#include "gpu/standard_store.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// A tuning (planner.cuh): `Policy`, the wide policy `Wide` (void: none) for
/// every call the layout allows, long rows where `LongRows`.
template <typename Policy, typename Wide = void, bool LongRows = false>
struct scan_tuning {
    using policy = Policy;
    using wide = Wide;
    static constexpr bool long_rows = LongRows;
    static bool wide_allowed(const standard_arrays&, const scan_call&) { return true; }
};

/// What most kinds share: forward time, every storage type, no input variants.
struct scan_kind_defaults {
    static constexpr bool reversed = false;
    static constexpr bool has_forms = false;  ///< takes inputs_forms (issue 29: next_values, sample_mask, alpha)
    static bool fast_ok(const call_layout&) { return true; }
    template <typename In, typename Flag, typename Out>
    static constexpr bool stores() { return true; }
    template <typename In, typename F>
    static void with_inputs(const standard_arrays&, F&& f) { f(inputs_at_run_time{}); }
    template <typename T>
    using generic_columns = any_columns;
};

/// The puff advantage (SPEC section 1). `Plain`: PufferLib's schema as it is
/// (float32 or float64 arrays of one dtype, the advantages only): storage
/// fixed for every layout, and an epilogue that stores A alone, the kernels
/// of its fast path. Else fused outputs, 16-bit floats or byte dones.
template <bool Plain>
struct puff_kind : scan_kind_defaults {
    static void read(call_layout& layout, const standard_arrays& a) {
        for (const std::optional<matrix>* m : {&a.values, &a.importance}) layout.input(*m);
        layout.input(a.rewards);
        layout.flag(a.terminated);
        layout.output(a.advantages);
        layout.output(a.fused.returns);
    }
    template <typename In, typename Flag, typename Out>
    static constexpr bool stores() {
        return !Plain || (std::is_same_v<In, Flag> && std::is_same_v<In, Out> && sizeof(In) != 2);
    }
    template <typename In, typename Inputs>
    using tuning = scan_tuning<policy_for<In>, void, std::is_same_v<In, float>>;
    template <typename T>
    using generic_columns = std::conditional_t<Plain, fixed_columns<T, T, T>, any_columns>;

    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        return puff_producer<T, typename Cols::input, typename Cols::flag>{
            c.in(a.values),  c.in(a.rewards),           c.flags(a.terminated), c.in(a.importance),
            T(p.gamma),      T(p.gamma) * T(p.lambda),  T(p.rho_clip),         T(p.c_clip)};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        if constexpr (Plain)
            return store_advantage<T>{c.out(a.advantages)};
        else
            return store_estimate<T, typename Cols::output>{c.out(a.advantages), c.out(a.fused.returns)};
    }
};

/// Whether a puff-advantage call is PufferLib's plain schema (puff_kind<true>).
inline bool plain_puff_call(const standard_arrays& a) {
    const dtype t = a.rewards.type;
    return !a.fused.any() && (t == dtype::float32 || t == dtype::float64) && a.terminated.type == t &&
           a.advantages && a.advantages->type == t;
}

/// GAE and TD(lambda) (PolicyGradient false), V-trace (true): SPEC section 6.
template <bool PolicyGradient>
struct standard_kind : scan_kind_defaults {
    static constexpr bool has_forms = true;
    /// Whether a call takes inputs_forms: next_values, or V-trace's sample_mask or leaky alpha.
    static bool forms(const standard_arrays& a, const standard_params& p) {
        return a.next_values || a.sample_mask || (a.importance && p.alpha != 1.0);
    }
    static void read(call_layout& layout, const standard_arrays& a) {
        layout.input(a.rewards);
        layout.input(a.values);
        layout.input(a.next_values);
        layout.flag(a.sample_mask);
        layout.input(a.importance);
        layout.flag(a.terminated);
        layout.flag(a.truncated);
        if (a.truncated) layout.input(a.bootstrap_values);  // read like the others then (load_items)
        layout.output(a.advantages);
        layout.output(a.fused.returns);
    }
    /// 16-bit V-trace keeps the generic kernels for flat arrays: its flat fast
    /// kernels spilled 108-200 bytes at 64 registers (ptxas), the aligned ones 34-46.
    static bool fast_ok(const call_layout& layout) {
        return layout.access() == vector_access::aligned || !(PolicyGradient && dtype_size(layout.float_type) == 2);
    }

    /// Calls f(inputs) with the optional inputs of a fast GAE / TD(lambda) call
    /// fixed at compile time (inputs_known, standard_steps.cuh): every
    /// combination for float32, the plain call (neither truncations nor ratios)
    /// for the 16-bit floats, and inputs_at_run_time for the rest, so that the
    /// kernels that matter lose their selects without multiplying every kernel
    /// by four. H200, benchmarks/gpu_scan_variants.cu, 2026-12-02: float32 GAE
    /// at 65536x128 40.5 -> 34.3 us (8.7 -> 4.8 M warp instructions at
    /// 4096x1024), with truncations 57.4 -> 49.2 us; V-trace keeps
    /// inputs_at_run_time, which ran faster (50.6 against 53.0 us).
    template <typename In, typename F>
    static void with_inputs(const standard_arrays& a, F&& f) {
        const bool truncations = a.truncated.has_value(), ratio = a.importance.has_value();
        if constexpr (!PolicyGradient && std::is_same_v<In, float>) {  // no kernels of inputs_at_run_time here
            if (truncations) return ratio ? f(inputs_known<true, true>{}) : f(inputs_known<true, false>{});
            return ratio ? f(inputs_known<false, true>{}) : f(inputs_known<false, false>{});
        } else {
            if constexpr (!PolicyGradient && sizeof(In) == 2) {
                if (!truncations && !ratio) return f(inputs_known<false, false>{});
            }
            f(inputs_at_run_time{});
        }
    }

    /// float32: long rows (not V-trace: its 8-step kernels spill) and the wide
    /// policy, for calls without truncations (8 steps were slower with them:
    /// policies.cuh). V-trace takes 8 steps only where a row fits in them (no
    /// shuffles; its step keeps four words live, elsewhere 4 steps won): H200,
    /// 1048576x8, 52.8 against 57.2 us (harness).
    template <typename In, typename Inputs>
    struct tuning : scan_tuning<standard_policy_for<In, PolicyGradient>, void,
                                std::is_same_v<In, float> && !PolicyGradient> {
        static constexpr bool may_be_plain = !std::is_same_v<Inputs, inputs_known<true, false>> &&
                                             !std::is_same_v<Inputs, inputs_known<true, true>>;
        using wide = std::conditional_t<std::is_same_v<In, float> && may_be_plain, wide_standard_policy, void>;
        static bool wide_allowed(const standard_arrays& a, const scan_call& c) {
            return (!PolicyGradient || c.horizon <= wide_standard_policy::items) && !a.truncated;
        }
    };

    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params& p, Cols c) {
        standard_producer<T, typename Cols::input, typename Cols::flag, Inputs> made{
            c.in(a.values),     c.in(a.rewards),          c.flags(a.terminated), c.flags(a.truncated),
            c.in(a.importance), c.in(a.bootstrap_values), c.in(a.last_value),    a.rewards.cols,
            T(p.gamma),         T(p.gamma) * T(p.lambda), T(p.rho_clip),         T(p.c_clip)};
        if constexpr (per_step_inputs<Inputs>)
            made.gamma_steps = c.in(a.gamma), made.lambda_steps = c.in(a.lambda), made.lambda = T(p.lambda);
        if constexpr (form_inputs<Inputs>)
            made.next_values = c.in(a.next_values), made.sample_mask = c.flags(a.sample_mask), made.alpha = T(p.alpha);
        return made;
    }
    /// V-trace's writes the pg advantages (in the scan, from A_{t+1}) and vs;
    /// the others A and the returns.
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params& p, Cols c) {
        return store_estimate<T, typename Cols::output, PolicyGradient>{
            c.out(a.advantages), c.out(a.fused.returns), T(p.gamma), T(p.rho_pg_clip), a.importance.has_value(),
            a.rewards.cols,      T(p.alpha)};
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
