// How the kernels read and write arrays of every supported storage type.
//
// Two kinds of column, with one set of accessors (read, write, present) so
// that a producer is written once for both:
//   strided_view<S>  - the storage type S is a template parameter: the fast
//                      kernels, vectorised (16-byte accesses) where the host
//                      checked alignment;
//   typed_view       - the storage type is data (a code read by a uniform
//                      switch): one instantiation serves every dtype mix, for
//                      the layouts that cannot vectorise anyway (strided,
//                      unaligned), so that they cost no compile time per mix;
//                      scalar accesses only (read, write).
// strided_view<S> also has read_items / write_items for N aligned steps.
// Reduced-precision floats are converted with bit operations (and fp16 loads
// with the hardware's conversion instruction), so CUDA and HIP need no vendor
// half/bf16 headers.
#pragma once

#include <type_traits>

#include "gpu/views.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Storage tags of the 16-bit floats (arithmetic is float32).
struct bf16_bits {
    std::uint16_t bits;
};
struct f16_bits {
    std::uint16_t bits;
};
/// bool and uint8 flags: nonzero is set.
using flag_byte = std::uint8_t;

__device__ __forceinline__ float bf16_to_float(std::uint16_t b) { return __uint_as_float(std::uint32_t(b) << 16); }

__device__ __forceinline__ std::uint16_t float_to_bf16(float f) {
    const std::uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // nearest even
}

/// float16 to float32 by the hardware's conversion (one instruction; the
/// integer version cost the f16 kernels 1.3x the bf16 time on the H200).
__device__ __forceinline__ float half_to_float(std::uint16_t h) {
#if defined(PUFF_HIP)
    return static_cast<float>(__builtin_bit_cast(_Float16, h));
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ std::uint16_t float_to_half(float f) {
    const std::uint32_t u = __float_as_uint(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    std::uint32_t out;
    if (a >= 0x47800000u)
        out = a > 0x7F800000u ? 0x7E00u : 0x7C00u;  // NaN, or overflow to inf
    else if (a < 0x38800000u)
        out = __float_as_uint(__uint_as_float(a) + 0.5f) - __float_as_uint(0.5f);  // subnormal
    else
        out = (a + ((15u - 127u) << 23) + 0xFFFu + ((a >> 13) & 1u)) >> 13;
    return static_cast<std::uint16_t>(out | sign);
}

/// Storage to arithmetic type T.
template <typename T> __device__ __forceinline__ T widen(float x) { return T(x); }
template <typename T> __device__ __forceinline__ T widen(double x) { return T(x); }
template <typename T> __device__ __forceinline__ T widen(bf16_bits x) { return T(bf16_to_float(x.bits)); }
template <typename T> __device__ __forceinline__ T widen(f16_bits x) { return T(half_to_float(x.bits)); }
template <typename T> __device__ __forceinline__ T widen(flag_byte x) { return T(x != 0); }

/// Arithmetic type to storage S (outputs are floats).
template <typename S> struct narrowing;
template <> struct narrowing<float> {
    template <typename T> static __device__ __forceinline__ float to(T x) { return float(x); }
};
template <> struct narrowing<double> {
    template <typename T> static __device__ __forceinline__ double to(T x) { return double(x); }
};
template <> struct narrowing<bf16_bits> {
    template <typename T> static __device__ __forceinline__ bf16_bits to(T x) { return {float_to_bf16(float(x))}; }
};
template <> struct narrowing<f16_bits> {
    template <typename T> static __device__ __forceinline__ f16_bits to(T x) { return {float_to_half(float(x))}; }
};

/// The widest access type for a run of `bytes` aligned bytes (at most 16).
template <int bytes> struct access_word;
template <> struct access_word<1> { using type = std::uint8_t; };
template <> struct access_word<2> { using type = std::uint16_t; };
template <> struct access_word<4> { using type = std::uint32_t; };
template <> struct access_word<8> { using type = uint2; };
template <> struct access_word<16> { using type = uint4; };

/// N consecutive elements in as few accesses as their alignment allows: the
/// host checked that p is aligned to N * sizeof(S) bytes (vectorizable()).
template <int N, typename S>
__device__ __forceinline__ void load_run(const S* p, S (&x)[N]) {
    constexpr int bytes = N * int(sizeof(S)), chunk = bytes < 16 ? bytes : 16;
    using word = typename access_word<chunk>::type;
    word w[bytes / chunk];
#pragma unroll
    for (int i = 0; i < bytes / chunk; ++i) w[i] = reinterpret_cast<const word*>(p)[i];
    __builtin_memcpy(x, w, bytes);
}

template <int N, typename S>
__device__ __forceinline__ void store_run(S* p, const S (&x)[N]) {
    constexpr int bytes = N * int(sizeof(S)), chunk = bytes < 16 ? bytes : 16;
    using word = typename access_word<chunk>::type;
    word w[bytes / chunk];
    __builtin_memcpy(w, x, bytes);
#pragma unroll
    for (int i = 0; i < bytes / chunk; ++i) reinterpret_cast<word*>(p)[i] = w[i];
}

// ---- strided_view<S>: storage type known at compile time --------------------

template <typename S>
__device__ __forceinline__ bool present(const strided_view<S>& v) { return v.data != nullptr; }

template <typename T, typename S>
__device__ __forceinline__ T read(const strided_view<S>& v, std::int64_t row, std::int64_t t) {
    return widen<T>(*v.at(row, t));
}

/// Steps t..t+N-1 of a time-contiguous row (vectorised; alignment host-checked).
template <typename T, int N, typename S>
__device__ __forceinline__ void read_items(const strided_view<S>& v, std::int64_t row, std::int64_t t,
                                           T (&x)[N]) {
    using stored = typename std::remove_const<S>::type;
    stored raw[N];
    load_run<N>(v.data + row * v.row_stride + t, raw);  // time-contiguous: no column stride to multiply
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] = widen<T>(raw[j]);
}

template <typename S, typename T>
__device__ __forceinline__ void write(const strided_view<S>& v, std::int64_t row, std::int64_t t, T x) {
    *v.at(row, t) = narrowing<S>::to(x);
}

template <typename S, typename T, int N>
__device__ __forceinline__ void write_items(const strided_view<S>& v, std::int64_t row, std::int64_t t,
                                            const T (&x)[N]) {
    S raw[N];
#pragma unroll
    for (int j = 0; j < N; ++j) raw[j] = narrowing<S>::to(x[j]);
    store_run<N>(v.data + row * v.row_stride + t, raw);
}

// ---- typed_view: storage type as data ----------------------------------------

/// The storage types an array may have.
enum class storage : int { f32, f64, bf16, f16, byte };

/// A strided view of any storage type. `data` is null for an absent array.
struct typed_view {
    void* data = nullptr;
    std::int64_t row_stride = 0, col_stride = 0;
    storage type = storage::f32;
};

__device__ __forceinline__ bool present(const typed_view& v) { return v.data != nullptr; }

template <typename T>
__device__ __forceinline__ T load_one(const typed_view& v, std::int64_t i) {
    switch (v.type) {
        case storage::f32: return widen<T>(static_cast<const float*>(v.data)[i]);
        case storage::f64: return widen<T>(static_cast<const double*>(v.data)[i]);
        case storage::bf16: return widen<T>(static_cast<const bf16_bits*>(v.data)[i]);
        case storage::f16: return widen<T>(static_cast<const f16_bits*>(v.data)[i]);
        default: return widen<T>(static_cast<const flag_byte*>(v.data)[i]);
    }
}

template <typename T>
__device__ __forceinline__ T read(const typed_view& v, std::int64_t row, std::int64_t t) {
    return load_one<T>(v, row * v.row_stride + t * v.col_stride);
}

template <typename T>
__device__ __forceinline__ void write(const typed_view& v, std::int64_t row, std::int64_t t, T x) {
    const std::int64_t i = row * v.row_stride + t * v.col_stride;
    switch (v.type) {
        case storage::f32: static_cast<float*>(v.data)[i] = narrowing<float>::to(x); return;
        case storage::f64: static_cast<double*>(v.data)[i] = narrowing<double>::to(x); return;
        case storage::bf16: static_cast<bf16_bits*>(v.data)[i] = narrowing<bf16_bits>::to(x); return;
        case storage::f16: static_cast<f16_bits*>(v.data)[i] = narrowing<f16_bits>::to(x); return;
        default: return;  // outputs are floats (checked)
    }
}

// ---- carries of split rows, kept in an output between launches ----------------

/// Two numbers of arithmetic type T per segment (slot 0: d or the carry; slot 1:
/// k), stored in a time-contiguous output of any float dtype over the first
/// 2 * sizeof(T) bytes of the segment (a segment holds >= 1024 elements), as
/// 16-bit pieces so that no alignment beyond the element's own is needed.
/// A scan over reversed time (a forward recurrence, see family_steps.cuh) has
/// `reversed_horizon` = the horizon: its step t is the output's element
/// horizon - 1 - t, and a segment's slots are mirrored: slot i ends (i + 1) *
/// sizeof(T) bytes before element horizon - t, in the segment's own elements
/// as in the forward order (so that no other block writes them before they
/// are read, and a short last segment, which stores slot 0 only, needs as few
/// elements as forward).
template <typename T>
struct carry_slots {
    unsigned char* data = nullptr;
    std::int64_t row_stride_bytes = 0;
    int element_bytes = 0;
    std::int64_t reversed_horizon = 0;  ///< 0: the scan runs over the output's own time order

    __device__ __forceinline__ std::uint16_t* at(std::int64_t row, std::int64_t t, int slot) const {
        const std::int64_t offset = reversed_horizon
                                        ? (reversed_horizon - t) * element_bytes - (slot + 1) * int(sizeof(T))
                                        : t * element_bytes + slot * int(sizeof(T));
        return reinterpret_cast<std::uint16_t*>(data + row * row_stride_bytes + offset);
    }
    __device__ __forceinline__ T load(std::int64_t row, std::int64_t t, int slot) const {
        constexpr int pieces = sizeof(T) / 2;
        std::uint16_t w[pieces];
        const std::uint16_t* p = at(row, t, slot);
#pragma unroll
        for (int i = 0; i < pieces; ++i) w[i] = p[i];
        T x;
        __builtin_memcpy(&x, w, sizeof(T));
        return x;
    }
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, int slot, T x) const {
        constexpr int pieces = sizeof(T) / 2;
        std::uint16_t w[pieces];
        __builtin_memcpy(w, &x, sizeof(T));
        std::uint16_t* p = at(row, t, slot);
#pragma unroll
        for (int i = 0; i < pieces; ++i) p[i] = w[i];
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
