// The lane moves of a time-major call of n rows walked interleaved where n does
// not divide a vector's W lanes (3 of float64's 4; 3, 5, 6 and 7 of float32's 8):
// SB3's and CleanRL's few environments (issue 33). along_time<0>
// (engine_traversals.hpp) scans such a call as one flat row whose lanes hold
// steps of rows that change from block to block; every move it needs is one
// permutation of lanes, the same for every block, made here once per call.
// Measured on the 2-core AVX-512 machine, float32 GAE, time-major: 2048x3
// 19.4 -> 10.5 us (batch-major 10.4), 2048x6 32.6 -> 12.8 us (15.0), against the
// gathered lines these calls took before (docs/benchmarks.md).
#pragma once

#include <type_traits>

#include "cpu/cpu_scan.hpp"

#if defined(__GNUC__)  // the vectors never cross a non-inlined call by value (cpu_scan.hpp)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace puffadv::detail::simd {

/// The 32-bit lane indexes of a permutation of a vector's lanes (of doubles: each
/// lane's two halves), made at run time: a double vector is permuted as 8 floats
/// (AVX2 has vpermps with an index vector, no vpermpd).
using lane_index = mask<float>;

template <typename T>
PUFF_SIMD_INLINE lane_index index_of(const int* from) {
    constexpr int kHalves = sizeof(T) / 4;
    lane_index index;
    for (int i = 0; i < 8; ++i) index[i] = from[i / kHalves] * kHalves + i % kHalves;
    return index;
}

/// Lane i takes the lane of `a` that `index` names, the index known at run time. GCC:
/// one lane permutation (vpermps with AVX2); elsewhere lane by lane.
template <typename T>
PUFF_SIMD_INLINE vec<T> permute(vec<T> a, lane_index index) {
#if defined(__GNUC__) && !defined(__clang__)
    return (vec<T>)__builtin_shuffle((vec<float>)a, index);
#else
    vec<float> x, f = (vec<float>)a;
    for (int i = 0; i < 8; ++i) x[i] = f[index[i] & 7];
    return (vec<T>)x;
#endif
}

/// The lane moves of n rows interleaved where n does not divide W (3 of 4 lanes;
/// 3, 5, 6 and 7 of 8), known at run time: a vector's lanes then hold steps of rows
/// that change from block to block, but every move is one of the flattened call,
/// the same for every block: the scan's rounds (lane i composes lane i + n, i + 2n
/// .. of its vector), the carry (lane i's chain leaves its vector n lanes past its
/// last lane, in the block beside it) and S' (the element n lanes away, in this
/// block or the one beside it). Backwards "beside" is the block after; forwards,
/// the one before. Permutations and selects of indexes made once per call (AVX2:
/// vpermps, vblendvps).
template <typename T>
struct interleaved_moves {
    static constexpr int W = lanes<T>::width;
    static constexpr int kMostRounds = 2;  // shifts n and 2n below W: n >= 3, W <= 8
    static_assert(W <= 8, "interleaved_moves: n >= 3 takes at most two rounds below 8 lanes");
    int rounds = 0;
    lane_index round_index[kMostRounds], carry_index, later_index;
    mask<T> round_inside[kMostRounds], later_inside;

    interleaved_moves(int n, bool forward) {
        int from[W];
        for (int shift = n; shift < W && rounds < kMostRounds; shift *= 2, ++rounds) {
            for (int i = 0; i < W; ++i) {
                const int j = forward ? i - shift : i + shift;
                from[i] = (j + W) % W;
                round_inside[rounds][i] = j >= 0 && j < W ? -1 : 0;
            }
            round_index[rounds] = index_of<T>(from);
        }
        // Backwards: lane i's chain ends at the last lane j = i (mod n), whose
        // successor is lane j + n - W = (i - W) mod n of the next block. Forwards:
        // it starts at lane i mod n, whose predecessor is lane W - n + i mod n.
        for (int i = 0; i < W; ++i) from[i] = forward ? W - n + i % n : ((i - W) % n + n) % n;
        carry_index = index_of<T>(from);
        for (int i = 0; i < W; ++i) {
            const int j = forward ? i - n : i + n;
            from[i] = (j + W) % W;
            later_inside[i] = j >= 0 && j < W ? -1 : 0;
        }
        later_index = index_of<T>(from);
    }
    /// d and k scanned in place (reverse_scan and forward_scan for n known at run time).
    PUFF_SIMD_INLINE void scan(vec<T>& d, vec<T>& k) const {
        for (int r = 0; r < rounds; ++r) {
            const vec<T> d_beside = round_inside[r] ? permute<T>(d, round_index[r]) : vec<T>{};
            const vec<T> k_beside = round_inside[r] ? permute<T>(k, round_index[r]) : splat<T>(1);
            d = d + k * d_beside;
            k = k * k_beside;
        }
    }
    /// Each lane's carry from the S of the block scanned before (`beside`).
    PUFF_SIMD_INLINE vec<T> carry(vec<T> beside) const { return permute<T>(beside, carry_index); }
    /// S', the step n lanes away: in s, or in `beside`.
    PUFF_SIMD_INLINE vec<T> later(vec<T> s, vec<T> beside) const {
        return later_inside ? permute<T>(s, later_index) : permute<T>(beside, later_index);
    }
};

}  // namespace puffadv::detail::simd

namespace puffadv::detail::engine {

// N: rows interleaved where N divides W (the shuffles fixed), 0: n rows known at run
// time that do not (`moves`, interleaved_moves); `no_moves` elsewhere.
struct no_moves {};
template <int N, typename C>
using moves_of = std::conditional_t<N == 0, simd::interleaved_moves<C>, no_moves>;

// The moves of n rows interleaved (N = 0), made once per call; nothing otherwise.
template <int N, typename C>
moves_of<N, C> moves_for(int n, bool forward) {
    if constexpr (N == 0) return simd::interleaved_moves<C>(n, forward);
    else return no_moves{};
}

}  // namespace puffadv::detail::engine

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
