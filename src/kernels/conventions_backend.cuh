// Host half of the GPU conventions (GAE / TD(lambda) / V-trace) and of the
// puff advantage with fused outputs or reduced-precision dtypes. Compiled by
// conventions_cuda.cu (nvcc) and conventions_hip.cpp (LANGUAGE HIP). Arguments
// arrive checked by find_standard_problem / find_puff_problem.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "backend.cuh"
#include "family_steps.cuh"
#include "n_step_window.cuh"
#include "standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

inline typed_view typed(const matrix& m) {
    storage s = storage::byte;
    switch (m.type) {
        case dtype::float32: s = storage::f32; break;
        case dtype::float64: s = storage::f64; break;
        case dtype::bfloat16: s = storage::bf16; break;
        case dtype::float16: s = storage::f16; break;
        default: s = storage::byte; break;
    }
    return {m.data, m.row_stride, m.col_stride, s};
}
inline typed_view typed(const std::optional<matrix>& m) { return m ? typed(*m) : typed_view{}; }

/// Policy of the fast kernels for the 16-bit floats: eight steps per thread, so
/// that each load is 16 bytes as with float32's four.
#ifndef PUFF_HALF_ITEMS
#define PUFF_HALF_ITEMS 8
#endif
#ifndef PUFF_HALF_MIN_BLOCKS
#define PUFF_HALF_MIN_BLOCKS 4
#endif
using half_scan_policy = row_scan_policy<PUFF_HALF_ITEMS, PUFF_HALF_MIN_BLOCKS>;

/// The standard producer's step needs more registers than the puff's: at the
/// float32 policy's 32 it spilled 56-96 bytes (ptxas), and asking for 6 blocks
/// (40 registers) made float32 GAE 1.15x faster on the H200 (262144x128:
/// 216 -> 187 us).
#ifndef PUFF_STANDARD_MIN_BLOCKS
#define PUFF_STANDARD_MIN_BLOCKS 6
#endif
using standard_scan_policy = row_scan_policy<4, PUFF_STANDARD_MIN_BLOCKS>;
/// These kernels are bound by instructions issued (Nsight Compute on the H200:
/// 0.86-0.90 warp instructions per cycle and scheduler for float32 GAE), and a
/// round's scan costs the same for 4 steps per thread as for 8. float32 GAE /
/// TD(lambda) without truncations therefore take 8 steps (two 16-byte loads per
/// array) at 4 blocks/SM (64 registers): 43.9 -> 39.0 us at 65536x128, 24.9 ->
/// 21.4 us at 8x131072 (benchmarks/gpu_scan_variants.cu, 2026-12-01). With
/// truncations 8 steps were slower (67.9 against 62.5 us). V-trace keeps its
/// step's four words live for the pg advantage: 4 steps at 4 blocks/SM
/// (63 registers, no spills) ran 58.8 us against 67.4 at 6 (40, spilling).
using wide_standard_policy = row_scan_policy<8, 4>;
using vtrace_scan_policy = row_scan_policy<4, 4>;
/// The family's float32 scans (family_steps.cuh) take the wide policy where
/// every array allows it, except Retrace (seven inputs: 4 steps at 4 blocks/SM,
/// as V-trace). 16 steps per thread at 2 blocks/SM were slower for the lightest
/// scans on the H200 (episodic sums 28.1 -> 31.5 us at 65536x128, 2026-12-02).

template <typename In>
using policy_for = std::conditional_t<sizeof(In) == 2, half_scan_policy, scan_policy>;
template <typename In, bool PolicyGradient = false>
using standard_policy_for =
    std::conditional_t<sizeof(In) == 2, half_scan_policy,
                       std::conditional_t<PolicyGradient && sizeof(In) == 4, vtrace_scan_policy,
                                          standard_scan_policy>>;

inline int items_for(dtype float_type) {
    return dtype_size(float_type) == 2 ? half_scan_policy::items : scan_policy::items;
}

template <typename S>
struct type_tag {
    using type = S;
};

/// How the fast kernels read a call's arrays: aligned rows (every row starts
/// aligned, the horizon a multiple of the steps per thread), flat whole rows
/// (one packed, aligned run of rows * horizon elements: scan_rows.cuh), or
/// neither (the generic kernels).
enum class vector_access { none, aligned, flat };

/// What one call reads and writes, for choosing its kernel: the fast kernels
/// take compile-time storage types and vectorised accesses, and serve a call
/// whose [rows, horizon] arrays all vectorise (aligned or flat), whose flags
/// share one storage type (bool/uint8, or the float dtype) and whose scan
/// outputs share one dtype. Anything else takes the generic kernels
/// (typed_view, scalar).
struct call_layout {
    dtype float_type;
    int items;
    bool contiguous = true, vectorized = true, byte_flags = false, float_out = false;
    bool vectorized_wide = true;  ///< every array also allows 2 * items steps per access
    bool flat = true, flat_wide = true;  ///< every array one packed run aligned to items (2 * items)
    bool flags_mixed = false, outputs_mixed = false, has_flags = false, has_outputs = false;

    call_layout(dtype t) : float_type(t), items(items_for(t)) {}

    void input(const matrix& m) {
        contiguous = contiguous && m.time_contiguous();
        vectorized = vectorized && vectorizable(m, items);
        vectorized_wide = vectorized_wide && vectorizable(m, 2 * items);
        flat = flat && flat_vectorizable(m, items);
        flat_wide = flat_wide && flat_vectorizable(m, 2 * items);
    }
    void input(const std::optional<matrix>& m) {
        if (m) input(*m);
    }
    void flag(const std::optional<matrix>& m) {
        if (!m) return;
        input(*m);
        const bool byte = m->type == dtype::boolean || m->type == dtype::uint8;
        flags_mixed = flags_mixed || (has_flags && byte != byte_flags);
        byte_flags = byte, has_flags = true;
    }
    void output(const std::optional<matrix>& m) {
        if (!m) return;
        input(*m);
        const bool f32 = m->type != float_type;  // checked: the input dtype or float32
        outputs_mixed = outputs_mixed || (has_outputs && f32 != float_out);
        float_out = f32, has_outputs = true;
    }
    /// The access of the fast kernels with `items` (wide: 2 * items) steps per
    /// thread. Flat only where rows do not vectorise at all: a call that does
    /// keeps the narrower policy's aligned kernels (measured; flat is new).
    vector_access access(bool wide = false) const {
        if (wide ? vectorized_wide : vectorized) return vector_access::aligned;
        if (!vectorized && (wide ? flat_wide : flat)) return vector_access::flat;
        return vector_access::none;
    }
    bool fast() const { return access() != vector_access::none && !flags_mixed && !outputs_mixed; }
    /// Flat access serves whole-row plans only (whole_rows_planned, launch.cuh):
    /// split rows of flat arrays take the generic kernels.
    void plan_flat(std::int64_t rows, std::int64_t horizon, int device) {
        if (!flat && !flat_wide) return;
        int sm_count = 0;
        PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);
        const bool half = items == 8;
        flat = flat && (half ? whole_rows_planned<8>(rows, horizon, sm_count)
                             : whole_rows_planned<4>(rows, horizon, sm_count));
        flat_wide = flat_wide && (half ? whole_rows_planned<16>(rows, horizon, sm_count)
                                       : whole_rows_planned<8>(rows, horizon, sm_count));
    }
};

/// Calls f(type_tag<In>, type_tag<Flag>, type_tag<Out>) with the storage types
/// of a fast call (see call_layout) whose arithmetic type is T.
template <typename T, typename F>
void with_storage_types(const call_layout& c, F&& f) {
    auto with_in = [&](auto in_tag) {
        using In = typename decltype(in_tag)::type;
        auto with_flags = [&](auto flag_tag) {
            if constexpr (sizeof(In) == 2) {
                if (c.float_out)
                    f(in_tag, flag_tag, type_tag<float>{});
                else
                    f(in_tag, flag_tag, in_tag);
            } else {
                f(in_tag, flag_tag, in_tag);
            }
        };
        if (c.byte_flags)
            with_flags(type_tag<flag_byte>{});
        else
            with_flags(in_tag);
    };
    if constexpr (std::is_same_v<T, double>) {
        with_in(type_tag<double>{});
    } else {
        switch (c.float_type) {
            case dtype::bfloat16: return with_in(type_tag<bf16_bits>{});
            case dtype::float16: return with_in(type_tag<f16_bits>{});
            default: return with_in(type_tag<float>{});
        }
    }
}

/// A time-contiguous [rows, horizon] output for split-row carries.
inline const matrix* scratch_output(std::initializer_list<const std::optional<matrix>*> outputs) {
    for (const auto* m : outputs)
        if (*m && (*m)->col_stride == 1) return &**m;
    return nullptr;
}

/// Scans `producer` into `epilogue` with the row-scan kernels of launch.cuh.
/// `reversed`: the scan runs over reversed time (episodic_producer; flat: over
/// the whole run backwards, its groups aligned in memory).
template <typename Policy, bool Vec, bool Flat = false, typename Producer, typename Epilogue>
void launch_scan(const Producer& producer, const Epilogue& epilogue, const matrix* scratch, std::int64_t rows,
                 std::int64_t horizon, bool contiguous, int device, cudaStream_t stream, bool reversed = false) {
    using T = typename Producer::value_type;
    int sm_count = 0;
    PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);
    // Split rows need `scratch`: a call has a [rows, horizon] output, and split
    // rows are planned only when every array, that output too, is contiguous.
    const row_scan_plan plan = plan_row_scan<Policy>(rows, horizon, contiguous, sm_count, Flat);
    const std::int64_t phase = Flat && reversed ? rows * horizon % Policy::items : 0;
    PUFF_GPU_CHECK((launch_row_scan<Policy, Vec, Flat>(plan, producer, epilogue, carry_slots_of<T>(scratch, reversed),
                                                       rows, horizon, stream, phase)),
                   device);
}

/// Whether `X` (a producer or epilogue of reversed time) has with_flipped_rows.
template <typename X, typename = void>
struct flips_rows : std::false_type {};
template <typename X>
struct flips_rows<X, std::void_t<decltype(std::declval<const X&>().with_flipped_rows(0))>> : std::true_type {};

/// The fast kernels of `Policy` with `access` (aligned or flat). Flat scans
/// of reversed time run over the whole run backwards: their rows are flipped
/// (episodic_producer).
template <typename Policy, typename Producer, typename Epilogue>
void launch_vector_scan(vector_access access, const Producer& producer, const Epilogue& epilogue,
                        const matrix* scratch, std::int64_t rows, std::int64_t horizon, int device,
                        cudaStream_t stream, bool reversed = false) {
    if (access == vector_access::flat) {
        static_assert(reads_flat_groups<Producer, Policy::items>::value, "every fast producer reads flat groups");
        if constexpr (flips_rows<Producer>::value && flips_rows<Epilogue>::value) {  // reversed time
            if (!reversed) throw std::logic_error("puffadv: rows flipped for a scan of forward time");
            return launch_scan<Policy, true, true>(producer.with_flipped_rows(rows), epilogue.with_flipped_rows(rows),
                                                   scratch, rows, horizon, true, device, stream, true);
        } else {
            if (reversed) throw std::logic_error("puffadv: a flat scan of reversed time needs rows it can flip");
            return launch_scan<Policy, true, true>(producer, epilogue, scratch, rows, horizon, true, device, stream);
        }
    }
    launch_scan<Policy, true>(producer, epilogue, scratch, rows, horizon, true, device, stream, reversed);
}

inline void launch_row_sums(const matrix& a, const fused_outputs& f, std::int64_t rows, std::int64_t horizon,
                            int device, cudaStream_t stream) {
    if (!(f.abs_sums || f.sums || f.square_sums)) return;
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned>((rows * widest_warp_size + threads - 1) / threads);
    row_sums_kernel<<<blocks, threads, 0, stream>>>(typed(a), rows, horizon, typed(f.abs_sums),
                                                           typed(f.sums), typed(f.square_sums));
    PUFF_GPU_CHECK(cudaGetLastError(), device);
}

[[noreturn]] inline void unsupported(const char* what) {
    throw type_error(std::string(what) + " on the GPU is not in this build; pass host arrays");
}

template <typename T>
standard_producer<T> generic_standard_producer(const standard_arrays& a, const standard_params& p) {
    return {typed(a.values),     typed(a.rewards),          typed(a.terminated), typed(a.truncated),
            typed(a.importance), typed(a.bootstrap_values), typed(a.last_value), a.rewards.cols,
            T(p.gamma),          T(p.gamma) * T(p.lambda),  T(p.rho_clip),       T(p.c_clip)};
}

/// The output the row sums read: the advantages, or for the kinds without
/// values (their returns are A) the returns. Null: none.
inline const matrix* summed_output(const standard_arrays& a) {
    if (a.advantages) return &*a.advantages;
    return !a.values && a.fused.returns ? &*a.fused.returns : nullptr;
}

/// The epilogue of a standard call: V-trace's writes the pg advantages (in the
/// scan, from A_{t+1}) and vs; the others A and the returns.
template <typename T, bool PolicyGradient, typename Out>
store_estimate<T, Out, PolicyGradient> standard_epilogue(Out advantages, Out returns, const standard_arrays& a,
                                                         const standard_params& p) {
    return {advantages, returns, T(p.gamma), T(p.rho_pg_clip), a.importance.has_value(), a.rewards.cols};
}

template <typename T, bool PolicyGradient>
void run_standard(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    const matrix* summed = summed_output(a);
    if (sums && !summed) unsupported("row sums without the advantages output");

    call_layout layout(a.rewards.type);
    layout.input(a.rewards);
    layout.input(a.values);
    layout.input(a.importance);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    if (a.truncated) layout.input(a.bootstrap_values);  // read like the others then (load_items)
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    layout.plan_flat(rows, horizon, device);
    const matrix* scratch = scratch_output({&a.advantages, &a.fused.returns});

    // 16-bit V-trace keeps the generic kernels for flat arrays: its flat fast
    // kernels spilled 108-200 bytes at 64 registers (ptxas), the aligned ones 34-46.
    const bool flat_ok = !(PolicyGradient && dtype_size(layout.float_type) == 2);
    if (horizon > 0 && layout.fast() && (layout.access() == vector_access::aligned || flat_ok)) {
        with_storage_types<T>(layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            using values = strided_view<const In>;
            const standard_producer<T, values, strided_view<const Flag>> producer{
                view_of<const In>(a.values),     view_of<const In>(a.rewards),
                view_of<const Flag>(a.terminated), view_of<const Flag>(a.truncated),
                view_of<const In>(a.importance), view_of<const In>(a.bootstrap_values),
                view_of<const In>(a.last_value), horizon,
                T(p.gamma), T(p.gamma) * T(p.lambda), T(p.rho_clip), T(p.c_clip)};
            const auto epilogue = standard_epilogue<T, PolicyGradient>(view_of<Out>(a.advantages),
                                                                      view_of<Out>(a.fused.returns), a, p);
            if constexpr (std::is_same_v<In, float> && !PolicyGradient) {
                if (!a.truncated && layout.access(true) != vector_access::none)
                    return launch_vector_scan<wide_standard_policy>(layout.access(true), producer, epilogue, scratch,
                                                                    rows, horizon, device, stream);
            }
            launch_vector_scan<standard_policy_for<In, PolicyGradient>>(layout.access(), producer, epilogue, scratch,
                                                                        rows, horizon, device, stream);
        });
    } else if (horizon > 0) {
        const auto epilogue = standard_epilogue<T, PolicyGradient>(typed(a.advantages), typed(a.fused.returns), a, p);
        launch_scan<scan_policy, false>(generic_standard_producer<T>(a, p), epilogue, scratch, rows, horizon,
                                        layout.contiguous, device, stream);
    }
    if (sums) launch_row_sums(*summed, a.fused, rows, horizon, device, stream);
}

/// The layout of a call of the family's kinds: every array it reads or writes.
inline call_layout family_layout(const standard_arrays& a) {
    call_layout layout(a.rewards.type);
    for (const auto* m : {&a.values, &a.next_values, &a.target_probs, &a.behaviour_probs, &a.bootstrap_values})
        layout.input(*m);
    layout.input(a.rewards);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    layout.flag(a.greedy);
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    return layout;
}

/// Runs one scan kind of the family. `producer_of(values, flags)` and
/// `epilogue_of(outputs)` build the producer and epilogue from column makers
/// (matrix or optional -> column). float32 and float64 calls whose arrays all
/// vectorise take compile-time columns and wide loads (`FastPolicy`; 16-bit
/// floats too would multiply the instantiations); any other call typed
/// columns (scalar, any strides).
template <typename T, typename FastPolicy, typename MakeProducer, typename MakeEpilogue>
void scan_kind(const call_layout& layout, const matrix* scratch, std::int64_t rows, std::int64_t horizon,
               bool reversed, int device, cudaStream_t stream, MakeProducer&& producer_of,
               MakeEpilogue&& epilogue_of) {
    if (horizon <= 0) return;
    const vector_access access = layout.access(FastPolicy::items != layout.items);
    if (layout.fast() && access != vector_access::none && dtype_size(layout.float_type) != 2) {  // T: the input dtype
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        const auto run = [&](auto flag_tag) {
            using Flag = typename decltype(flag_tag)::type;
            const auto flags = [](const auto& m) { return view_of<const Flag>(m); };
            launch_vector_scan<FastPolicy>(access, producer_of(values, flags), epilogue_of(outputs), scratch, rows,
                                           horizon, device, stream, reversed);
        };
        if (layout.byte_flags)
            run(type_tag<flag_byte>{});
        else
            run(type_tag<T>{});
    } else {
        const auto any = [](const auto& m) { return typed(m); };
        launch_scan<scan_policy, false>(producer_of(any, any), epilogue_of(any), scratch, rows, horizon,
                                        layout.contiguous, device, stream, reversed);
    }
}

/// scan_kind with the wide policy for float32 calls whose arrays all allow it, else `Policy`.
template <typename T, typename Policy, typename MakeProducer, typename MakeEpilogue>
void scan_kind_widest(const call_layout& layout, const matrix* scratch, std::int64_t rows, std::int64_t horizon,
                      bool reversed, int device, cudaStream_t stream, MakeProducer&& producer_of,
                      MakeEpilogue&& epilogue_of) {
    if constexpr (std::is_same_v<T, float>) {
        if (layout.access(true) != vector_access::none)
            return scan_kind<T, wide_standard_policy>(layout, scratch, rows, horizon, reversed, device, stream,
                                                      producer_of, epilogue_of);
    }
    scan_kind<T, Policy>(layout, scratch, rows, horizon, reversed, device, stream, producer_of, epilogue_of);
}

/// Discounted returns, Retrace, Q(lambda) and the episodic sums.
template <typename T>
void run_family_scan(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    const matrix* summed = summed_output(a);
    if (sums && !summed) unsupported("row sums without the advantages output");
    call_layout layout = family_layout(a);
    layout.plan_flat(rows, horizon, device);
    const matrix* scratch = scratch_output({&a.advantages, &a.fused.returns});
    const auto estimate = [&](const auto& out) {  // A and the returns A + q
        return store_estimate<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages), out(a.fused.returns)};
    };

    const auto same = [&](const auto& out) {  // no values: both outputs hold A
        return store_same<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages), out(a.fused.returns),
                                                                         horizon};
    };

    switch (p.kind) {
        case estimator::discounted_returns:
            scan_kind_widest<T, standard_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    return returns_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(a.rewards), f(a.terminated), f(a.truncated), v(a.bootstrap_values), v(a.last_value),
                        horizon, T(p.gamma)};
                }, same);
            break;
        case estimator::retrace:
            scan_kind<T, vtrace_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    return retrace_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(a.values),       v(a.rewards),         v(a.next_values), f(a.terminated),
                        f(a.truncated),    v(a.target_probs),    v(a.behaviour_probs),
                        T(p.gamma),        T(p.lambda),          T(p.c_clip),      p.log_probs};
                }, estimate);
            break;
        case estimator::q_lambda:
            scan_kind_widest<T, vtrace_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    // q only for the advantages G - q: the scan runs in G.
                    const std::optional<matrix> q = a.advantages ? a.values : std::nullopt;
                    return q_lambda_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(q),           v(a.rewards), v(a.next_values), f(a.terminated), f(a.truncated),
                        f(a.greedy),    T(p.gamma),   T(p.lambda)};
                }, [&](const auto& out) {
                    return store_target<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages),
                                                                                       out(a.fused.returns)};
                });
            break;
        default: {  // episodic_sum: over reversed time
            const auto producer_of = [&](const auto& v, const auto& f) {
                return episodic_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                    v(a.rewards), f(a.terminated), v(a.last_value), horizon, T(p.gamma) * T(p.lambda),
                    p.reset_at_start};
            };
            const auto epilogue_of = [&](const auto& out) {
                return store_same<T, std::decay_t<decltype(out(a.advantages))>, true>{out(a.advantages),
                                                                                     out(a.fused.returns), horizon};
            };
            scan_kind_widest<T, standard_scan_policy>(layout, scratch, rows, horizon, true, device, stream,
                                                      producer_of, epilogue_of);
        }
    }
    if (sums) launch_row_sums(*summed, a.fused, rows, horizon, device, stream);
}

/// n-step returns: the window kernel; n >= horizon is TD(lambda) (every window
/// reaches the row's end), the scan.
template <typename T>
void run_n_step(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    if (p.n >= horizon) {
        standard_params td = p;
        td.kind = estimator::td_lambda;
        return run_standard<T, false>(a, td, stream);
    }
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    if (sums && !a.advantages) unsupported("row sums without the advantages output");
    call_layout layout(a.rewards.type);
    layout.input(a.rewards);
    layout.input(a.values);
    layout.input(a.bootstrap_values);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    // Threads follow the rewards' adjacent elements: along time for [B, T], along rows for time-major data.
    const bool time_major = a.rewards.col_stride != 1 && a.rewards.row_stride == 1;
    const auto launch = [&](const auto& window) {
        constexpr unsigned threads = 256;
        const std::uint64_t total = std::uint64_t(rows) * std::uint64_t(horizon);
        const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>((total + threads - 1) / threads, 1u << 30));
        n_step_kernel<<<blocks, threads, 0, stream>>>(window);
        PUFF_GPU_CHECK(cudaGetLastError(), device);
    };
    const auto window_of = [&](const auto& v, const auto& f, const auto& out) {
        return n_step_window<T, decltype(v(a.rewards)), decltype(f(a.terminated)), decltype(out(a.rewards))>{
            v(a.values),     v(a.rewards),       f(a.terminated), f(a.truncated), v(a.bootstrap_values),
            v(a.last_value), out(a.advantages),  out(a.fused.returns), rows, horizon, p.n,
            T(p.gamma),      T(p.lambda),        time_major};
    };
    // Windows of n <= 4 (8) steps of contiguous rows: the vector kernel, 4 (8) outputs a thread.
    const auto launch_vector = [&](auto n_tag, const auto& window) {
        constexpr int N = decltype(n_tag)::value;
        const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / N);
        const auto blocks = static_cast<unsigned>((chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block);
        // The divider serves chunk indices below 2^31; the kernel divides by 64 bits past them.
        const fast_divider per_row(chunks < (std::uint64_t(1) << 31) ? std::uint32_t(horizon / N) : 1u);
        if (a.truncated)
            n_step_vector_kernel<N, true><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
        else
            n_step_vector_kernel<N, false><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
        PUFF_GPU_CHECK(cudaGetLastError(), device);
    };
    const auto run = [&](const auto& window) {
        const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / 4);
        const bool fits = (chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block <= 0x7fffffffu;
        if (layout.vectorized && p.n <= 4 && fits)
            launch_vector(std::integral_constant<int, 4>{}, window);
        else if (layout.vectorized_wide && p.n <= 8 && fits)
            launch_vector(std::integral_constant<int, 8>{}, window);
        else
            launch(window);
    };
    if (layout.fast() && dtype_size(layout.float_type) != 2) {  // vectorisable, one flag and one output type
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        if (layout.byte_flags)
            run(window_of(values, [](const auto& m) { return view_of<const flag_byte>(m); }, outputs));
        else
            run(window_of(values, values, outputs));
    } else if (!layout.flags_mixed && !layout.outputs_mixed && dtype_size(layout.float_type) != 2) {
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        if (layout.byte_flags)
            launch(window_of(values, [](const auto& m) { return view_of<const flag_byte>(m); }, outputs));
        else
            launch(window_of(values, values, outputs));
    } else {
        const auto any = [](const auto& m) { return typed(m); };
        launch(window_of(any, any, any));
    }
    if (sums) launch_row_sums(*a.advantages, a.fused, rows, horizon, device, stream);
}

template <typename T>
void run_estimate(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    switch (p.kind) {
        case estimator::vtrace: return run_standard<T, true>(a, p, stream);
        case estimator::discounted_returns:
        case estimator::retrace:
        case estimator::q_lambda:
        case estimator::episodic_sum: return run_family_scan<T>(a, p, stream);
        case estimator::n_step_returns: return run_n_step<T>(a, p, stream);
        default: return run_standard<T, false>(a, p, stream);  // gae, td_lambda
    }
}

inline void standard_estimate(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.rewards.type == dtype::float64)
        run_estimate<double>(arrays, params, s);
    else
        run_estimate<float>(arrays, params, s);
}

template <typename T>
void run_puff_general(const puff_arrays& a, const puff_params& p, cudaStream_t stream) {
    const int device = a.values.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.values.rows, horizon = a.values.cols;
    const std::optional<matrix> advantages = a.advantages;
    call_layout layout(a.values.type);
    for (const matrix* m : {&a.values, &a.rewards, &a.importance}) layout.input(*m);
    layout.flag(a.dones);
    layout.output(advantages);
    layout.output(a.fused.returns);
    layout.plan_flat(rows, horizon, device);
    const matrix* scratch = scratch_output({&advantages, &a.fused.returns});
    const T gamma_lambda = T(p.gamma) * T(p.gae_lambda);

    if (horizon > 0 && layout.fast()) {
        with_storage_types<T>(layout, [&](auto in_tag, auto flag_tag, auto out_tag) {
            using In = typename decltype(in_tag)::type;
            using Flag = typename decltype(flag_tag)::type;
            using Out = typename decltype(out_tag)::type;
            const puff_producer<T, strided_view<const In>, strided_view<const Flag>> producer{
                view_of<const In>(a.values), view_of<const In>(a.rewards), view_of<const Flag>(a.dones),
                view_of<const In>(a.importance), T(p.gamma), gamma_lambda, T(p.rho_clip), T(p.c_clip)};
            const store_estimate<T, strided_view<Out>> epilogue{view_of<Out>(advantages),
                                                                view_of<Out>(a.fused.returns)};
            launch_vector_scan<policy_for<In>>(layout.access(), producer, epilogue, scratch, rows, horizon, device,
                                               stream);
        });
    } else if (horizon > 0) {
        const puff_producer<T, typed_view> producer{typed(a.values), typed(a.rewards), typed(a.dones),
                                                    typed(a.importance), T(p.gamma), gamma_lambda,
                                                    T(p.rho_clip), T(p.c_clip)};
        const store_estimate<T> epilogue{typed(advantages), typed(a.fused.returns)};
        launch_scan<scan_policy, false>(producer, epilogue, scratch, rows, horizon, layout.contiguous, device,
                                        stream);
    }
    launch_row_sums(a.advantages, a.fused, rows, horizon, device, stream);
}

inline void puff_advantage_general(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    const auto s = static_cast<cudaStream_t>(stream);
    if (arrays.values.type == dtype::float64)
        run_puff_general<double>(arrays, params, s);
    else
        run_puff_general<float>(arrays, params, s);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
