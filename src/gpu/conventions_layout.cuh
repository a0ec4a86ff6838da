// What the GPU conventions' launches share, before any estimator's producer:
// how a call's arrays are read (call_layout: aligned, flat or generic access;
// with_storage_types: the compile-time storage types of a fast call), each
// kernel's tuning (the scan policies, with the measurements behind them), and
// the launchers of the row-scan kernels and of the row sums. Host code of the
// one kernel source for CUDA and HIP: included by conventions_backend.cuh
// (GAE / TD(lambda) / V-trace, the puff advantage) and conventions_family.cuh
// (the estimator family's kinds).
#pragma once

#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/backend.cuh"
#include "gpu/standard_steps.cuh"

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
    bool small = false;  ///< too few steps for the wide policy to fill the GPU (plan)
    bool long_rows = false;  ///< float32 rows for long_row_policy (launch.cuh), aligned to its 8 steps (plan)

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
        if (wide && small) return vector_access::none;
        if (wide ? vectorized_wide : vectorized) return vector_access::aligned;
        if (!vectorized && (wide ? flat_wide : flat)) return vector_access::flat;
        return vector_access::none;
    }
    bool fast() const { return access() != vector_access::none && !flags_mixed && !outputs_mixed; }
    /// Plans for the call's size. Flat access serves whole-row plans only
    /// (whole_rows_planned, launch.cuh): split rows of flat arrays take the
    /// generic kernels. The wide policy serves calls that are not small_call
    /// (launch.cuh): there 2 * items steps make each thread's chain longer.
    void plan(std::int64_t rows, std::int64_t horizon, int device) {
        int sm_count = 0;
        PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);
        small = small_call(rows, horizon, sm_count);
        long_rows = float_type == dtype::float32 && vectorized_wide && !flags_mixed && !outputs_mixed &&
                    gpu::long_rows(rows, horizon, sm_count);
        if (!flat && !flat_wide) return;
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
    const row_scan_plan plan = plan_row_scan<Policy>(rows, horizon, contiguous, sm_count, Flat, Vec && !Flat);
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

/// The output the row sums read: the advantages, or for the kinds without
/// values (their returns are A) the returns. Null: none.
inline const matrix* summed_output(const standard_arrays& a) {
    if (a.advantages) return &*a.advantages;
    return !a.values && a.fused.returns ? &*a.fused.returns : nullptr;
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
