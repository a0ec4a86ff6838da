// GAE / TD(lambda) / V-trace targets and the general puff advantage as plug-ins
// of the row-scan kernels (see the Producer and Epilogue concepts in
// puff_steps.cuh), for any supported dtype: float32/float64/bfloat16/float16
// values, bool/uint8/float flags, and outputs of the arithmetic or input dtype.
//
// An array's dtype is data (a code read by a uniform switch), not a template
// parameter: the kernels are memory-bound and every thread takes the same
// branch, so one instantiation per arithmetic type serves all dtype mixes.
// Reduced-precision floats are converted with integer bit operations, the same
// as the CPU backend does, so CUDA and HIP need no vendor half/bf16 headers.
#pragma once

#include "affine_scan.cuh"
#include "views.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// The storage types an array may have.
enum class storage : int { f32, f64, bf16, f16, byte };

/// A strided view of any storage type. `data` is null for an absent array.
struct typed_view {
    void* data = nullptr;
    std::int64_t row_stride = 0, col_stride = 0;
    storage type = storage::f32;
};

__device__ __forceinline__ float bf16_to_float(std::uint16_t b) { return __uint_as_float(std::uint32_t(b) << 16); }

__device__ __forceinline__ std::uint16_t float_to_bf16(float f) {
    const std::uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
    return static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // nearest even
}

__device__ __forceinline__ float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
    const std::uint32_t shifted = std::uint32_t(h & 0x7FFFu) << 13;
    const std::uint32_t exponent = shifted & 0x0F800000u;
    std::uint32_t bits;
    if (exponent == 0x0F800000u)  // inf / NaN
        bits = shifted + ((127u - 15u + 128u - 16u) << 23);
    else if (exponent == 0)  // zero / subnormal: let the FPU normalise
        bits = __float_as_uint(__uint_as_float(shifted + (113u << 23)) - __uint_as_float(113u << 23));
    else
        bits = shifted + ((127u - 15u) << 23);
    return __uint_as_float(bits | sign);
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

template <typename T>
__device__ __forceinline__ T load_one(const typed_view& v, std::int64_t i) {
    switch (v.type) {
        case storage::f32: return T(static_cast<const float*>(v.data)[i]);
        case storage::f64: return T(static_cast<const double*>(v.data)[i]);
        case storage::bf16: return T(bf16_to_float(static_cast<const std::uint16_t*>(v.data)[i]));
        case storage::f16: return T(half_to_float(static_cast<const std::uint16_t*>(v.data)[i]));
        default: return T(static_cast<const std::uint8_t*>(v.data)[i] != 0);
    }
}

template <typename T>
__device__ __forceinline__ T load_at(const typed_view& v, std::int64_t row, std::int64_t t) {
    return load_one<T>(v, row * v.row_stride + t * v.col_stride);
}

/// Steps t..t+3: one 16-, 8- or 4-byte access (the host checked alignment).
template <typename T>
__device__ __forceinline__ void load4_at(const typed_view& v, std::int64_t row, std::int64_t t, T (&x)[4]) {
    const std::int64_t i = row * v.row_stride + t;
    switch (v.type) {
        case storage::f32: {
            const float4 q = *reinterpret_cast<const float4*>(static_cast<const float*>(v.data) + i);
            x[0] = T(q.x), x[1] = T(q.y), x[2] = T(q.z), x[3] = T(q.w);
            return;
        }
        case storage::f64: {
            const double2* p = reinterpret_cast<const double2*>(static_cast<const double*>(v.data) + i);
            const double2 a = p[0], b = p[1];
            x[0] = T(a.x), x[1] = T(a.y), x[2] = T(b.x), x[3] = T(b.y);
            return;
        }
        case storage::bf16:
        case storage::f16: {
            const uint2 q = *reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(v.data) + i);
            const std::uint16_t h[4] = {std::uint16_t(q.x), std::uint16_t(q.x >> 16), std::uint16_t(q.y),
                                        std::uint16_t(q.y >> 16)};
#pragma unroll
            for (int j = 0; j < 4; ++j) x[j] = T(v.type == storage::bf16 ? bf16_to_float(h[j]) : half_to_float(h[j]));
            return;
        }
        default: {
            const std::uint32_t q = *reinterpret_cast<const std::uint32_t*>(static_cast<const std::uint8_t*>(v.data) + i);
#pragma unroll
            for (int j = 0; j < 4; ++j) x[j] = T(((q >> (8 * j)) & 0xFFu) != 0);
            return;
        }
    }
}

template <typename T>
__device__ __forceinline__ void store_at(const typed_view& v, std::int64_t row, std::int64_t t, T x) {
    const std::int64_t i = row * v.row_stride + t * v.col_stride;
    switch (v.type) {
        case storage::f32: static_cast<float*>(v.data)[i] = float(x); return;
        case storage::f64: static_cast<double*>(v.data)[i] = double(x); return;
        case storage::bf16: static_cast<std::uint16_t*>(v.data)[i] = float_to_bf16(float(x)); return;
        case storage::f16: static_cast<std::uint16_t*>(v.data)[i] = float_to_half(float(x)); return;
        default: return;  // outputs are floats (checked)
    }
}

template <typename T>
__device__ __forceinline__ void store4_at(const typed_view& v, std::int64_t row, std::int64_t t, const T (&x)[4]) {
    const std::int64_t i = row * v.row_stride + t;
    switch (v.type) {
        case storage::f32:
            *reinterpret_cast<float4*>(static_cast<float*>(v.data) + i) =
                make_float4(float(x[0]), float(x[1]), float(x[2]), float(x[3]));
            return;
        case storage::f64: {
            double2* p = reinterpret_cast<double2*>(static_cast<double*>(v.data) + i);
            p[0] = make_double2(double(x[0]), double(x[1]));
            p[1] = make_double2(double(x[2]), double(x[3]));
            return;
        }
        case storage::bf16:
        case storage::f16: {
            std::uint32_t h[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                h[j] = v.type == storage::bf16 ? float_to_bf16(float(x[j])) : float_to_half(float(x[j]));
            *reinterpret_cast<uint2*>(static_cast<std::uint16_t*>(v.data) + i) =
                make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
            return;
        }
        default: return;
    }
}

template <typename T>
__device__ __forceinline__ T clip_to(T x, T limit) { return x < limit ? x : limit; }  // NaN -> the clip

template <typename T>
__device__ __forceinline__ T quiet_nan() { return T(__int_as_float(0x7fc00000)); }

/// SPEC section 6. A step loads its value, reward, flags and ratio. Where the
/// buffer does not hold V_{t+1} (truncation, last step) the bootstrap is read
/// then and folded into the reward, r_t + gamma V'_t, so that a step stays four
/// words (register pressure) and the map needs no row or time.
template <typename T>
struct standard_producer {
    using value_type = T;
    struct step {
        T value, reward, ratio;
        std::uint32_t flags;  ///< bit 0 terminated, bit 1 truncated, bit 2 bootstrapped (V'_t is in reward)
    };

    typed_view values, rewards, terminated, truncated, importance, bootstrap_values;
    typed_view last_value;  ///< [rows]: row_stride only
    std::int64_t horizon;
    T gamma, gamma_lambda, rho_clip, c_clip;

    __device__ __forceinline__ step finish(std::int64_t row, std::int64_t t, T value, T reward, T term, T trunc,
                                           T ratio) const {
        step s{value, reward, ratio, std::uint32_t(term != T(0)) | (std::uint32_t(trunc != T(0)) << 1)};
        if (((s.flags & 2u) || t == horizon - 1) && !(s.flags & 1u)) {  // rare: a branch, not a stream
            const T bootstrap = bootstrap_values.data ? load_at<T>(bootstrap_values, row, t)
                                                      : load_one<T>(last_value, row * last_value.row_stride);
            s.reward = reward + gamma * bootstrap;
            s.flags |= 4u;
        }
        return s;
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return finish(row, t, load_at<T>(values, row, t), load_at<T>(rewards, row, t),
                      load_at<T>(terminated, row, t), truncated.data ? load_at<T>(truncated, row, t) : T(0),
                      importance.data ? load_at<T>(importance, row, t) : T(1));
    }

    __device__ __forceinline__ void load4(std::int64_t row, std::int64_t t, step (&s)[4]) const {
        T v[4], r[4], d[4], u[4] = {T(0), T(0), T(0), T(0)}, w[4] = {T(1), T(1), T(1), T(1)};
        load4_at(values, row, t, v);
        load4_at(rewards, row, t, r);
        load4_at(terminated, row, t, d);
        if (truncated.data) load4_at(truncated, row, t, u);
        if (importance.data) load4_at(importance, row, t, w);
#pragma unroll
        for (int j = 0; j < 4; ++j) s[j] = finish(row, t + j, v[j], r[j], d[j], u[j], w[j]);
    }

    /// r_t + gamma (1 - terminated_t) V'_t - V_t, with V'_t = `next_value` inside an episode.
    static __device__ __forceinline__ T td_error(const step& cur, T gamma, T next_value) {
        return cur.reward + (cur.flags & 5u ? T(0) : gamma * next_value) - cur.value;
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const step& next, bool last) const {
        const bool has_ratio = importance.data != nullptr;
        const T rho = has_ratio ? clip_to(cur.ratio, rho_clip) : T(1);
        const T c = has_ratio ? clip_to(cur.ratio, c_clip) : T(1);
        // Both flags on one step is an error the host cannot see without a sync:
        // a NaN marks the row (the CPU backend raises ValueError instead).
        const T delta = (cur.flags & 3u) == 3u ? quiet_nan<T>() : rho * td_error(cur, gamma, next.value);
        return {cur.flags & 3u ? T(0) : gamma_lambda * c, delta, last};
    }
};

/// SPEC section 1 with any dtypes (the float32/float64 path is puff_producer).
template <typename T>
struct puff_any_producer {
    using value_type = T;
    struct step {
        T value, reward, done, ratio;
    };

    typed_view values, rewards, dones, importance;
    T gamma, gamma_lambda, rho_clip, c_clip;

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return {load_at<T>(values, row, t), load_at<T>(rewards, row, t), load_at<T>(dones, row, t),
                load_at<T>(importance, row, t)};
    }

    __device__ __forceinline__ void load4(std::int64_t row, std::int64_t t, step (&s)[4]) const {
        T v[4], r[4], d[4], w[4];
        load4_at(values, row, t, v);
        load4_at(rewards, row, t, r);
        load4_at(dones, row, t, d);
        load4_at(importance, row, t, w);
#pragma unroll
        for (int j = 0; j < 4; ++j) s[j] = step{v[j], r[j], d[j], w[j]};
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const step& next, bool last) const {
        if (last) return {T(0), T(0), true};
        const T not_done = T(1) - next.done;
        const T delta = clip_to(cur.ratio, rho_clip) * (next.reward + gamma * next.value * not_done - cur.value);
        return {gamma_lambda * clip_to(cur.ratio, c_clip) * not_done, delta};
    }
};

/// Stores A (any float dtype) and the returns A + V; either may be absent.
template <typename T>
struct store_estimate {
    typed_view advantages, returns;

    template <typename Step>
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, T a, const Step& s) const {
        if (advantages.data) store_at(advantages, row, t, a);
        if (returns.data) store_at(returns, row, t, a + s.value);
    }
    template <typename Step>
    __device__ __forceinline__ void store4(std::int64_t row, std::int64_t t, const T (&a)[4],
                                           const Step (&s)[4]) const {
        if (advantages.data) store4_at(advantages, row, t, a);
        if (returns.data) {
            const T r[4] = {a[0] + s[0].value, a[1] + s[1].value, a[2] + s[2].value, a[3] + s[3].value};
            store4_at(returns, row, t, r);
        }
    }
};

/// V-trace's pg advantages from the targets vs (already written) in one
/// elementwise pass: pg_t = min(ratio_t, rho_pg_clip) (r_t + gamma (1 - term_t) vs'_t - V_t).
template <typename T>
__global__ void vtrace_pg_kernel(standard_producer<T> p, typed_view vs, typed_view pg, T rho_pg_clip,
                                 std::int64_t rows) {
    const std::int64_t total = rows * p.horizon;
    for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < total;
         i += std::int64_t(gridDim.x) * blockDim.x) {
        const std::int64_t row = i / p.horizon, t = i % p.horizon;
        const auto s = p.load(row, t);
        // vs_{t+1} wherever the buffer holds it, a termination included: the formula
        // multiplies it by (1 - term_t), so a NaN there reaches pg_t as on the CPU
        // (a select would mask it). Where the bootstrap was read, it is in s.reward.
        const bool in_buffer = !(s.flags & 6u) && t + 1 < p.horizon;
        const T next = in_buffer ? load_at<T>(vs, row, t + 1) : T(0);
        const T not_terminated = s.flags & 1u ? T(0) : T(1);
        const T rho = p.importance.data ? clip_to(s.ratio, rho_pg_clip) : T(1);
        const T td = (s.flags & 3u) == 3u ? quiet_nan<T>()
                                           : s.reward + p.gamma * next * not_terminated - s.value;
        store_at(pg, row, t, rho * td);
    }
}

/// Row sums of |A|, A and A^2 (any of the three outputs may be absent), a warp
/// per row, accumulated in float64 whatever the dtype.
/// The host launches widest_warp_size threads per row: narrower warps leave the surplus idle.
__global__ void row_sums_kernel(typed_view a, std::int64_t rows, std::int64_t horizon, typed_view abs_sums,
                                typed_view sums, typed_view square_sums) {
    constexpr int warp = physical_warp_size;
    const int lane = threadIdx.x % warp;
    const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / warp;
    if (row >= rows) return;  // whole warps leave together
    double s_abs = 0, s = 0, s_sq = 0;
    for (std::int64_t t = lane; t < horizon; t += warp) {
        const double x = load_at<double>(a, row, t);
        s_abs += x < 0 ? -x : x, s += x, s_sq += x * x;
    }
#pragma unroll
    for (int offset = warp / 2; offset > 0; offset /= 2) {
        s_abs += shfl_down<warp>(s_abs, offset);
        s += shfl_down<warp>(s, offset);
        s_sq += shfl_down<warp>(s_sq, offset);
    }
    if (lane != 0) return;
    const typed_view* out[3] = {&abs_sums, &sums, &square_sums};
    const double value[3] = {s_abs, s, s_sq};
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (out[i]->data) store_at(*out[i], row, 0, value[i]);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
