// Collectives for the reverse scan of affine maps x -> d + k*x.
//
// A backward recurrence A_t = d_t + k_t * A_{t+1} is the reverse scan of its
// maps: A_t = (f_t o f_{t+1} o ... o f_end)(A_after_end). Composition is
// associative, so threads, warps and blocks each compose a run of steps and
// combine the runs in a tree. A row's last step is marked as an end that cuts
// the chain, so rows packed back to back never see each other.
#pragma once

#include "gpu/vendor.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

template <typename T>
struct affine {
    T k, d;  ///< x -> d + k * x
    /// A row's last step, or a run that reaches it: nothing after it is read.
    /// A row end cannot be k = 0 alone: rows sit back to back in a block, and
    /// 0 * inf from the next row would put a NaN into this one. (A done inside
    /// a row is k = 0 and keeps the formula's IEEE arithmetic, 0 * inf = NaN.)
    /// No default member initializer: the struct lives in __shared__ memory;
    /// brace-initialising only k and d leaves it false.
    bool end;
};

template <typename T>
__device__ __forceinline__ affine<T> identity_map() {
    return {T(1), T(0)};
}

/// The decay of two composed maps, a * b. A composed run multiplies many steps'
/// decays, and that product overflows where every step's own arithmetic stays
/// finite (decays of 1e5: 1e5^8 > FLT_MAX); inf then met a 0 (a zero input, a
/// done's k = 0) as NaN where the recurrence is 0 (issue 31). Finite factors
/// whose product overflows give the largest finite value of its sign instead,
/// so 0 times it stays 0; an inf or NaN factor (an input's) keeps IEEE arithmetic.
/// Comparisons, not isinf/isfinite: one spelling for CUDA, HIP and the HIP CPU runtime.
template <typename T>
__device__ __forceinline__ T decay_product(T a, T b) {
    constexpr T largest = sizeof(T) == 4 ? T(3.4028234663852886e38) : T(1.7976931348623157e308);
    const T p = a * b;
    const bool overflowed = (p > largest || p < -largest) && a <= largest && a >= -largest &&
                            b <= largest && b >= -largest;
    return overflowed ? (p > 0 ? largest : -largest) : p;
}

/// outer o inner: apply `inner` (later steps) first, then `outer` (an earlier step).
template <typename T>
__device__ __forceinline__ affine<T> compose(affine<T> outer, affine<T> inner) {
    if (outer.end) return outer;
    return {decay_product(outer.k, inner.k), outer.d + outer.k * inner.d, inner.end};
}

template <typename T>
__device__ __forceinline__ T apply(affine<T> m, T x) {
    return m.end ? m.d : m.d + m.k * x;
}

/// Inclusive reverse scan over a group of `width` lanes (a logical warp):
/// lane i gets m_i o m_{i+1} o ... o m_{width-1}. Kogge-Stone, log2(width) steps.
template <int width, typename T>
__device__ __forceinline__ affine<T> warp_reverse_scan(affine<T> m, int lane) {
    static_assert((width & (width - 1)) == 0 && width <= physical_warp_size,
                  "a logical warp is a power of two no wider than the physical one");
#pragma unroll
    for (int offset = 1; offset < width; offset *= 2) {
        const T k = shfl_down<width>(m.k, offset);
        const T d = shfl_down<width>(m.d, offset);
        const bool end = shfl_down<width>(static_cast<int>(m.end), offset) != 0;
        if (lane + offset < width) m = compose(m, affine<T>{k, d, end});
    }
    return m;
}

/// The exclusive counterpart from an inclusive result: lane i gets the maps of
/// lanes i+1 .. width-1 (identity for the top lane).
template <int width, typename T>
__device__ __forceinline__ affine<T> warp_exclusive_from_inclusive(affine<T> inclusive, int lane) {
    const T k = shfl_down<width>(inclusive.k, 1);
    const T d = shfl_down<width>(inclusive.d, 1);
    const bool end = shfl_down<width>(static_cast<int>(inclusive.end), 1) != 0;
    return lane + 1 < width ? affine<T>{k, d, end} : identity_map<T>();
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
