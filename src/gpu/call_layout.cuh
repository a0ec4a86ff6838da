// How one call's arrays are read, before any kind or traversal: the column
// views of its matrices (view_of: storage type fixed at compile time; typed:
// the dtype as data), whether they vectorise, and call_layout, what the
// planner (planner.cuh) reads to pick a traversal: aligned, flat or generic
// access, the wide and long-row policies' conditions, the storage types of a
// fast call (with_storage_types), and the column makers the kinds build their
// producers and epilogues from (fixed_columns, any_columns).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/launch.cuh"
#include "gpu/policies.cuh"
#include "gpu/runtime.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

template <typename T>
strided_view<T> view_of(const matrix& m) {
    return {static_cast<T*>(m.data), m.row_stride, m.col_stride};
}
/// An absent array gives a null view.
template <typename T>
strided_view<T> view_of(const std::optional<matrix>& m) {
    return m ? view_of<T>(*m) : strided_view<T>{nullptr, 0, 0};
}

/// Bytes per element: the core's dtype_size, inline here, as the layout tests
/// run for every array of every call (host time per call: ~10 us in all).
constexpr std::uintptr_t element_bytes(dtype t) noexcept {
    switch (t) {
        case dtype::float64: return 8;
        case dtype::float32: return 4;
        case dtype::float16:
        case dtype::bfloat16: return 2;
        default: return 1;
    }
}

/// One access may load `items` steps of this array: time-contiguous, aligned
/// to `items` elements, and so is every row start (row_stride a multiple).
/// `items` is a power of two (4, 8 or 16): the tests are masks, not divisions.
inline bool vectorizable(const matrix& m, int items = scan_policy::items) {
    const auto address = reinterpret_cast<std::uintptr_t>(m.data);
    const std::int64_t step_mask = items - 1;
    return m.col_stride == 1 && (address & (std::uintptr_t(items) * element_bytes(m.type) - 1)) == 0 &&
           (m.rows <= 1 || (m.row_stride & step_mask) == 0) && (m.cols & step_mask) == 0;
}

/// Flat whole rows may load `items` steps of this array in one access (see
/// scan_rows.cuh): time-contiguous, every row right after the one before (one
/// packed run of rows * cols elements), aligned to `items` elements, and rows
/// of at least `items` steps (a group then holds one row end at most).
inline bool flat_vectorizable(const matrix& m, int items = scan_policy::items) {
    const auto address = reinterpret_cast<std::uintptr_t>(m.data);
    return m.cols >= items && m.col_stride == 1 && (m.rows <= 1 || m.row_stride == m.cols) &&
           (address & (std::uintptr_t(items) * element_bytes(m.type) - 1)) == 0;
}

/// Split-row carries live in this output (null: none), see carry_slots; a scan
/// over reversed time passes `reversed`.
template <typename T>
carry_slots<T> carry_slots_of(const matrix* m, bool reversed = false) {
    if (!m || m->col_stride != 1) return {};
    const auto element = static_cast<int>(dtype_size(m->type));
    return {static_cast<unsigned char*>(m->data), m->row_stride * element, element, reversed ? m->cols : 0};
}

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
    int sm_count = 0;        ///< the device's multiprocessors (plan)

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
    /// The long-row condition is decided here, once, for every kind: the
    /// planner (planner.cuh) takes it where the kind's tuning allows long rows.
    void plan(std::int64_t rows, std::int64_t horizon, int device) {
        PUFF_GPU_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device), device);
        small = small_call(rows, horizon, sm_count);
        long_rows = float_type == dtype::float32 && vectorized_wide && !flags_mixed && !outputs_mixed &&
                    gpu::long_rows(rows, horizon, sm_count);
        // Flat access serves only calls whose rows do not vectorise (access()).
        if (vectorized || (!flat && !flat_wide)) return;
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

[[noreturn]] inline void unsupported(const char* what) {
    throw type_error(std::string(what) + " on the GPU is not in this build; pass host arrays");
}

/// The output the row sums read: the advantages, or for the kinds without
/// values (their returns are A) the returns. Null: none.
inline const matrix* summed_output(const standard_arrays& a) {
    if (a.advantages) return &*a.advantages;
    return !a.values && a.fused.returns ? &*a.fused.returns : nullptr;
}

/// Column makers: the views a kind's producer and epilogue read. The fast
/// kernels take fixed_columns (storage types known at compile time: vector
/// loads), the generic kernels any_columns (typed_view: any dtype mix, scalar).
template <typename In, typename Flag, typename Out>
struct fixed_columns {
    using input = strided_view<const In>;
    using flag = strided_view<const Flag>;
    using output = strided_view<Out>;
    template <typename M> static input in(const M& m) { return view_of<const In>(m); }
    template <typename M> static flag flags(const M& m) { return view_of<const Flag>(m); }
    template <typename M> static output out(const M& m) { return view_of<Out>(m); }
};
struct any_columns {
    using input = typed_view;
    using flag = typed_view;
    using output = typed_view;
    template <typename M> static input in(const M& m) { return typed(m); }
    template <typename M> static flag flags(const M& m) { return typed(m); }
    template <typename M> static output out(const M& m) { return typed(m); }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
