// The CPU engine's dtype conversions (reduced precision included, branch-free
// so the loops vectorise) and strided line loads and stores: the converting
// sources (engine_sources.hpp) read every dtype and stride through them into
// lines of the arithmetic type, and store the outputs back.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cpu/views.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// Always inlined: the converting sources (engine_sources.hpp) run inside the engine's
// traversals, whose AVX2 clones then convert 8 lanes at a time (out of line, the
// baseline SSE2 copy converted a row's lines at half the speed).
#define PUFF_CONVERT_INLINE inline __attribute__((always_inline))

namespace puffadv::detail {

// ---- reduced-precision conversions, branch-free so the loops vectorise ----

PUFF_CONVERT_INLINE std::uint32_t bits_of(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
PUFF_CONVERT_INLINE float float_of(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

PUFF_CONVERT_INLINE float bf16_to_float(std::uint16_t b) { return float_of(std::uint32_t(b) << 16); }

// Round to nearest even; a NaN stays a (quiet) NaN instead of rounding to inf.
PUFF_CONVERT_INLINE std::uint16_t float_to_bf16(float f) {
    const std::uint32_t u = bits_of(f);
    const std::uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    return static_cast<std::uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
}

// IEEE half -> float, exact for normals, subnormals, infinities and NaNs.
PUFF_CONVERT_INLINE float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t shifted = std::uint32_t(h & 0x7FFFu) << 13;
    const std::uint32_t exponent = shifted & 0x0F800000u;
    std::uint32_t normal = shifted + ((127u - 15u) << 23);
    normal = exponent == 0x0F800000u ? normal + ((128u - 16u) << 23) : normal;  // inf / NaN
    // Subnormal: let the FPU normalise it.
    const float sub = float_of(shifted + (1u << 23) + ((127u - 15u) << 23)) - float_of(113u << 23);
    const std::uint32_t magnitude = exponent == 0 ? bits_of(sub) : normal;
    return float_of(magnitude | sign);
}

// float -> IEEE half, round to nearest even, overflow to inf, NaN kept.
PUFF_CONVERT_INLINE std::uint16_t float_to_half(float f) {
    const std::uint32_t u = bits_of(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    std::uint16_t out;
    if (a >= 0x47800000u) {  // >= 65536 (after rounding: overflow), inf or NaN
        out = static_cast<std::uint16_t>(a > 0x7F800000u ? 0x7E00u : 0x7C00u);
    } else if (a < 0x38800000u) {  // below the smallest normal half: subnormal or zero
        // Adding 0.5 aligns the half-subnormal bits at the bottom, rounded by the FPU.
        out = static_cast<std::uint16_t>(bits_of(float_of(a) + 0.5f) - bits_of(0.5f));
    } else {
        const std::uint32_t odd = (a >> 13) & 1u;
        out = static_cast<std::uint16_t>((a + ((15u - 127u) << 23) + 0xFFFu + odd) >> 13);
    }
    return static_cast<std::uint16_t>(out | sign);
}

// x86 with F16C converts eight halves per instruction: 2x the portable loop's
// throughput on float16 lines. Chosen at run time; plain functions (no vector
// arguments), so calling them from baseline code is ABI-safe.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(PUFF_NO_CLONES)
#define PUFF_F16C 1
__attribute__((target("avx,f16c"))) inline void halves_to_floats_f16c(const std::uint16_t* in, int n, float* out) {
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + j))));
    for (; j < n; ++j) out[j] = half_to_float(in[j]);
}
__attribute__((target("avx,f16c"))) inline void floats_to_halves_f16c(const float* in, int n, std::uint16_t* out) {
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + j), _MM_FROUND_TO_NEAREST_INT));
    for (; j < n; ++j) out[j] = float_to_half(in[j]);
}
inline bool has_f16c() {
    static const bool yes = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return yes;
}
#else
#define PUFF_F16C 0
#endif

// ---- typed array access ----

template <typename C, typename S, typename F>
PUFF_CONVERT_INLINE void gather(const void* first, std::int64_t stride, int n, C* out, F convert) {
    const S* p = static_cast<const S*>(first);
    if (stride == 1) {
        for (int i = 0; i < n; ++i) out[i] = convert(p[i]);
    } else {
        for (int i = 0; i < n; ++i) out[i] = convert(p[i * stride]);
    }
}

// n elements from `first`, `stride` elements apart, converted to C. Flags load
// as 0/1 (non-zero is set); values keep their value.
template <typename C>
PUFF_CONVERT_INLINE void load(dtype type, const void* first, std::int64_t stride, int n, C* out, bool flag) {
    switch (type) {
        case dtype::float32:
            if (flag) return gather<C, float>(first, stride, n, out, [](float x) { return C(x != 0.0f); });
            return gather<C, float>(first, stride, n, out, [](float x) { return C(x); });
        case dtype::float64:
            if (flag) return gather<C, double>(first, stride, n, out, [](double x) { return C(x != 0.0); });
            return gather<C, double>(first, stride, n, out, [](double x) { return C(x); });
        case dtype::bfloat16:
            if (flag)
                return gather<C, std::uint16_t>(first, stride, n, out,
                                                [](std::uint16_t x) { return C((x & 0x7FFFu) != 0); });
            return gather<C, std::uint16_t>(first, stride, n, out,
                                            [](std::uint16_t x) { return C(bf16_to_float(x)); });
        case dtype::float16:
            if (flag)
                return gather<C, std::uint16_t>(first, stride, n, out,
                                                [](std::uint16_t x) { return C((x & 0x7FFFu) != 0); });
#if PUFF_F16C
            if constexpr (sizeof(C) == 4)
                if (stride == 1 && has_f16c())
                    return halves_to_floats_f16c(static_cast<const std::uint16_t*>(first), n, out);
#endif
            return gather<C, std::uint16_t>(first, stride, n, out,
                                            [](std::uint16_t x) { return C(half_to_float(x)); });
        case dtype::uint8:
        case dtype::boolean:
            return gather<C, std::uint8_t>(first, stride, n, out, [](std::uint8_t x) { return C(x != 0); });
    }
}

template <typename C>
inline C load_one(const view& v, std::int64_t row, std::int64_t t, bool flag = false) {
    C x{};  // load's switch writes it for every dtype; GCC cannot see that (-Wmaybe-uninitialized)
    load<C>(v.type, v.at(row, t), 1, 1, &x, flag);
    return x;
}

template <typename D, typename C, typename F>
PUFF_CONVERT_INLINE void scatter(void* first, std::int64_t stride, int n, const C* in, F convert) {
    D* p = static_cast<D*>(first);
    if (stride == 1) {
        for (int i = 0; i < n; ++i) p[i] = convert(in[i]);
    } else {
        for (int i = 0; i < n; ++i) p[i * stride] = convert(in[i]);
    }
}

template <typename C>
PUFF_CONVERT_INLINE void store(dtype type, void* first, std::int64_t stride, int n, const C* in) {
    switch (type) {
        case dtype::float32: return scatter<float>(first, stride, n, in, [](C x) { return float(x); });
        case dtype::float64: return scatter<double>(first, stride, n, in, [](C x) { return double(x); });
        case dtype::bfloat16:
            return scatter<std::uint16_t>(first, stride, n, in, [](C x) { return float_to_bf16(float(x)); });
        case dtype::float16:
#if PUFF_F16C
            if constexpr (sizeof(C) == 4)
                if (stride == 1 && has_f16c())
                    return floats_to_halves_f16c(in, n, static_cast<std::uint16_t*>(first));
#endif
            return scatter<std::uint16_t>(first, stride, n, in, [](C x) { return float_to_half(float(x)); });
        default: return;  // outputs are checked to be float
    }
}

template <typename C> constexpr dtype dtype_of = sizeof(C) == 8 ? dtype::float64 : dtype::float32;

// n elements from (row, t) on, `stride` apart: the caller's memory itself when no
// conversion is needed (values, not flags, of type C, adjacent), else `buffer`.
template <typename C>
inline const C* line_of(const view& v, std::int64_t row, std::int64_t t, std::int64_t stride, int n, C* buffer,
                 bool flag) {
    if (!flag && v.type == dtype_of<C> && stride == 1) return static_cast<const C*>(v.at(row, t));
    load<C>(v.type, v.at(row, t), stride, n, buffer, flag);
    return buffer;
}

}  // namespace puffadv::detail
