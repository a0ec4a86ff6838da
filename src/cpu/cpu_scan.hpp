// SIMD building blocks for the CPU backends: a reverse scan of affine maps
// inside one vector register, flag masks, streaming stores and row sums.
//
// The advantage recurrence A_t = delta_t + k_t * A_{t+1} composes associatively:
// (d_i, k_i) o (d_j, k_j) = (d_i + k_i d_j, k_i k_j). A vector holding the maps
// of W consecutive steps is scanned in log2(W) shift-and-combine steps, after
// which lane i maps A_{t+W} (the carry from the later block) straight to A_{t+i}.
// Rows then cost one dependent multiply-add per W steps instead of per step.
//
// GCC/Clang vector extensions keep this portable: the baseline build uses SSE2
// and the target_clones in the kernels add an AVX2 version picked at load time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

// Runtime dispatch for the kernels that use these vectors: an AVX2 clone picked
// by the loader on CPUs that have it, the portable SSE2 baseline everywhere else.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PUFF_NO_CLONES)
#define PUFF_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PUFF_SIMD_CLONES
#endif

// The vectors never cross a non-inlined call boundary, so the ABI note GCC
// gives for 32-byte vectors in an SSE2 build does not apply.
#if defined(__GNUC__)  // GCC and Clang
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// Always inlined, at -O0 too: a 32-byte vector passed to an out-of-line helper
// from an AVX2 clone uses another calling convention than the SSE2 helper expects
// (Debug builds crashed with a SEGV at address 0x1 in splat()).
#define PUFF_SIMD_INLINE inline __attribute__((always_inline))

namespace puffadv::detail::simd {

/// 32-byte vectors: 8 floats or 4 doubles. Spelled out per type because GCC
/// drops vector_size on a typedef that depends on a template parameter.
template <typename T>
struct lanes;
/// `mask` is what comparing two `vec` gives (all bits set in a true lane);
/// `bytes` is W one-byte flags.
template <>
struct lanes<float> {
    static constexpr int width = 8;
    typedef float vec __attribute__((vector_size(32)));
    typedef float unaligned __attribute__((vector_size(32), aligned(alignof(float)), may_alias));
    typedef std::int32_t mask __attribute__((vector_size(32)));
    typedef std::uint8_t bytes __attribute__((vector_size(8), aligned(1), may_alias));
};
template <>
struct lanes<double> {
    static constexpr int width = 4;
    typedef double vec __attribute__((vector_size(32)));
    typedef double unaligned __attribute__((vector_size(32), aligned(alignof(double)), may_alias));
    typedef std::int64_t mask __attribute__((vector_size(32)));
    typedef std::uint8_t bytes __attribute__((vector_size(4), aligned(1), may_alias));
};
template <typename T>
using vec = typename lanes<T>::vec;
template <typename T>
using mask = typename lanes<T>::mask;

template <typename T>
PUFF_SIMD_INLINE vec<T> load(const T* p) {
    return *reinterpret_cast<const typename lanes<T>::unaligned*>(p);
}

template <typename T>
PUFF_SIMD_INLINE void store(T* p, vec<T> v) {
    *reinterpret_cast<typename lanes<T>::unaligned*>(p) = v;
}

/// Stores v at p (16-byte aligned) past the caches, where the target has such
/// stores (SSE2: two 16-byte halves, the same code in every clone); callers
/// fence() before their results are read. Elsewhere a plain store.
template <typename T>
PUFF_SIMD_INLINE void stream(T* p, vec<T> v) {
#if defined(__SSE2__)
    if constexpr (sizeof(T) == 4) {
        _mm_stream_ps(p, (__m128)__builtin_shufflevector(v, v, 0, 1, 2, 3));
        _mm_stream_ps(p + 4, (__m128)__builtin_shufflevector(v, v, 4, 5, 6, 7));
    } else {
        _mm_stream_pd(p, (__m128d)__builtin_shufflevector(v, v, 0, 1));
        _mm_stream_pd(p + 2, (__m128d)__builtin_shufflevector(v, v, 2, 3));
    }
#else
    store<T>(p, v);
#endif
}

/// Orders the stream() stores before any later store (another thread may read them next).
PUFF_SIMD_INLINE void fence() {
#if defined(__SSE2__)
    _mm_sfence();
#endif
}

template <typename T>
PUFF_SIMD_INLINE vec<T> splat(T x) {
    return vec<T>{} + x;
}

/// Lane i takes lane i + S of `a`; lanes past the end take `fill`'s lane i.
template <int S, typename V, std::size_t... I>
PUFF_SIMD_INLINE V shift_down(V a, V fill, std::index_sequence<I...>) {
    constexpr int W = sizeof...(I);
    return __builtin_shufflevector(a, fill, (static_cast<int>(I) + S < W ? static_cast<int>(I) + S
                                                                       : W + static_cast<int>(I))...);
}

/// Every lane takes lane 0.
template <typename V, std::size_t... I>
PUFF_SIMD_INLINE V broadcast_first(V a, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, a, static_cast<int>(I * 0)...);
}

template <typename T>
PUFF_SIMD_INLINE vec<T> broadcast_first(vec<T> a) {
    return broadcast_first(a, std::make_index_sequence<lanes<T>::width>{});
}

template <int S, typename T>
PUFF_SIMD_INLINE void combine_with_later(vec<T>& d, vec<T>& k) {
    constexpr auto W = lanes<T>::width;
    if constexpr (S < W) {
        const vec<T> d_later = shift_down<S>(d, vec<T>{}, std::make_index_sequence<W>{});
        const vec<T> k_later = shift_down<S>(k, splat<T>(1), std::make_index_sequence<W>{});
        d = d + k * d_later;
        k = k * k_later;
        combine_with_later<2 * S, T>(d, k);
    }
}

/// In place: lane i becomes the composition of the maps of lanes i, i + N, ...
/// up to W-1 (N: lanes from one step to the next; N rows interleaved, time-major).
template <typename T, int N = 1>
PUFF_SIMD_INLINE void reverse_scan(vec<T>& d, vec<T>& k) {
    combine_with_later<N, T>(d, k);
}

/// Lane i takes lane i - S of `a`; the first S lanes take the last S of `earlier`.
template <int S, typename V, std::size_t... I>
PUFF_SIMD_INLINE V shift_up(V a, V earlier, std::index_sequence<I...>) {
    constexpr int W = sizeof...(I);
    return __builtin_shufflevector(a, earlier, (static_cast<int>(I) >= S ? static_cast<int>(I) - S
                                                                        : 2 * W - S + static_cast<int>(I))...);
}

template <int S, typename T>
PUFF_SIMD_INLINE void combine_with_earlier(vec<T>& d, vec<T>& k) {
    constexpr auto W = lanes<T>::width;
    if constexpr (S < W) {
        const vec<T> d_earlier = shift_up<S>(d, vec<T>{}, std::make_index_sequence<W>{});
        const vec<T> k_earlier = shift_up<S>(k, splat<T>(1), std::make_index_sequence<W>{});
        d = d + k * d_earlier;
        k = k * k_earlier;
        combine_with_earlier<2 * S, T>(d, k);
    }
}

/// In place, for forward recurrences x_i = d_i + k_i x_{i-1}: lane i becomes the
/// composition of the maps of lanes i .. 0 (it maps the carry x_{-1} to x_i).
template <typename T, int N = 1>
PUFF_SIMD_INLINE void forward_scan(vec<T>& d, vec<T>& k) {
    combine_with_earlier<N, T>(d, k);
}

/// Lane i takes lane i % N (the first step's lanes of N interleaved rows, repeated).
template <int N, typename V, std::size_t... I>
PUFF_SIMD_INLINE V tile_first(V a, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, a, static_cast<int>(I % N)...);
}

/// Lane i takes lane W - N + i % N (the last step's lanes, repeated).
template <int N, typename V, std::size_t... I>
PUFF_SIMD_INLINE V tile_last(V a, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, a, static_cast<int>(sizeof...(I) - N + I % N)...);
}

template <int N, typename T>
PUFF_SIMD_INLINE vec<T> tile_first(vec<T> a) {
    return tile_first<N>(a, std::make_index_sequence<lanes<T>::width>{});
}

template <int N, typename T>
PUFF_SIMD_INLINE vec<T> tile_last(vec<T> a) {
    return tile_last<N>(a, std::make_index_sequence<lanes<T>::width>{});
}

/// The index of window(): lane i reads lane i + r of two adjacent vectors (0 <= r < W,
/// known at run time). Made once per call: built per block, it cost 8 inserts.
/// Inlined: a vector returned out of line breaks between the clones (ASan builds).
template <typename T>
PUFF_SIMD_INLINE mask<T> window_index(int r) {
    mask<T> index;
    for (int i = 0; i < lanes<T>::width; ++i) index[i] = i + r;
    return index;
}

/// Lane i takes lane index[i] of `a` followed by `b`: the W elements r past the
/// start of two adjacent vectors. GCC: two lane permutations and a blend
/// (vpermps with AVX2); elsewhere lane by lane.
template <typename T>
PUFF_SIMD_INLINE vec<T> window(vec<T> a, vec<T> b, mask<T> index) {
#if defined(__GNUC__) && !defined(__clang__)
    return __builtin_shuffle(a, b, index);
#else
    constexpr int W = lanes<T>::width;
    vec<T> x;
    for (int i = 0; i < W; ++i) x[i] = index[i] < W ? a[index[i]] : b[index[i] - W];
    return x;
#endif
}

/// Every lane takes the last.
template <typename V, std::size_t... I>
PUFF_SIMD_INLINE V broadcast_last(V a, std::index_sequence<I...>) {
    return __builtin_shufflevector(a, a, static_cast<int>(I * 0 + sizeof...(I) - 1)...);
}
template <typename T>
PUFF_SIMD_INLINE vec<T> broadcast_last(vec<T> a) {
    return broadcast_last(a, std::make_index_sequence<lanes<T>::width>{});
}

/// x < limit ? x : limit, per lane: a NaN x gives the limit, like fmin.
template <typename T>
PUFF_SIMD_INLINE vec<T> clip(vec<T> x, vec<T> limit) {
    return x < limit ? x : limit;
}

/// Lane i takes lane i + N; the last N lanes take `next`'s own (callers pass a
/// splat, or N interleaved rows' values repeated: tile_first).
template <typename T, int N = 1>
PUFF_SIMD_INLINE vec<T> shift_in(vec<T> a, vec<T> next) {
    return shift_down<N>(a, next, std::make_index_sequence<lanes<T>::width>{});
}

/// Lane i takes lane i - N; the first N lanes take `earlier`'s last N (callers
/// pass a splat, or N interleaved rows' values repeated: tile_last).
template <typename T, int N = 1>
PUFF_SIMD_INLINE vec<T> shift_in_earlier(vec<T> a, vec<T> earlier) {
    return shift_up<N>(a, earlier, std::make_index_sequence<lanes<T>::width>{});
}

/// Lane i takes lane i - 1 of a mask; lane 0 takes `earlier`'s last.
template <typename T>
PUFF_SIMD_INLINE mask<T> shift_in_earlier(mask<T> a, mask<T> earlier) {
    return shift_up<1>(a, earlier, std::make_index_sequence<lanes<T>::width>{});
}

/// The lanes of W flags that are set (non-zero; a NaN float flag is set).
template <typename T>
PUFF_SIMD_INLINE mask<T> set_lanes(const T* flags) {
    return load<T>(flags) != T(0);
}
template <typename T>
PUFF_SIMD_INLINE mask<T> set_lanes(const std::uint8_t* flags) {
    const auto b = *reinterpret_cast<const typename lanes<T>::bytes*>(flags);
    return __builtin_convertvector(b, mask<T>) != 0;
}

/// x in the lanes of `m` that are clear, +0 in the others (bitwise: a NaN x is
/// dropped too, and no floating-point select is needed).
template <typename T>
PUFF_SIMD_INLINE vec<T> zero_where(mask<T> m, vec<T> x) {
    return (vec<T>)((mask<T>)x & ~m);
}

template <typename T>
PUFF_SIMD_INLINE bool any_lane(mask<T> m) {
    std::uint64_t words[sizeof m / 8];
    std::memcpy(words, &m, sizeof m);
    std::uint64_t any = 0;
    for (std::uint64_t w : words) any |= w;
    return any != 0;
}

/// Every lane finite (x - x is 0 for a finite x, NaN for an inf or a NaN).
template <typename T>
PUFF_SIMD_INLINE bool all_finite(vec<T> x) {
    const mask<T> finite = (x - x) == vec<T>{};
    return !any_lane<T>(~finite);
}

PUFF_SIMD_INLINE vec<double> abs(vec<double> x) {
    return (vec<double>)((mask<double>)x & (mask<double>{} + INT64_MAX));
}

/// Adds |x|, x and x^2 of each lane, in double, to abs_sums[i], sums[i], square_sums[i].
PUFF_SIMD_INLINE void add_to_lanes(vec<double> x, double* abs_sums, double* sums, double* square_sums) {
    store<double>(abs_sums, load<double>(abs_sums) + abs(x));
    store<double>(sums, load<double>(sums) + x);
    store<double>(square_sums, load<double>(square_sums) + x * x);
}
PUFF_SIMD_INLINE void add_to_lanes(vec<float> x, double* abs_sums, double* sums, double* square_sums) {
    add_to_lanes(__builtin_convertvector(__builtin_shufflevector(x, x, 0, 1, 2, 3), vec<double>), abs_sums,
                 sums, square_sums);
    add_to_lanes(__builtin_convertvector(__builtin_shufflevector(x, x, 4, 5, 6, 7), vec<double>),
                 abs_sums + 4, sums + 4, square_sums + 4);
}

/// Running sums of |x|, x and x^2 in double, one per lane of a double vector.
struct double_sums {
    vec<double> abs{}, sum{}, square{};

    PUFF_SIMD_INLINE void add(vec<double> x) {
        abs += simd::abs(x);
        sum += x;
        square += x * x;
    }
    PUFF_SIMD_INLINE void add(vec<float> x) {
        add(__builtin_convertvector(__builtin_shufflevector(x, x, 0, 1, 2, 3), vec<double>));
        add(__builtin_convertvector(__builtin_shufflevector(x, x, 4, 5, 6, 7), vec<double>));
    }
    /// |x|, x, x^2 summed over the lanes, added to out[0..2].
    PUFF_SIMD_INLINE void total_into(double* out) const {
        for (int i = 0; i < 4; ++i) out[0] += abs[i], out[1] += sum[i], out[2] += square[i];
    }
};

}  // namespace puffadv::detail::simd

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
