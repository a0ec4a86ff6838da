// Pieces the one-pass SIMD traversals share (conventions_cpu_simd.cpp and
// conventions_cpu_family_simd.cpp: time-contiguous rows; conventions_cpu_simd_blocks.cpp
// and conventions_cpu_family_simd_blocks.cpp: row-adjacent data): the producers of
// each step's affine map (the standard conventions' here, the estimator family's
// further down), the output stores, the bootstrap at truncations. Private to those files.
//
// The producer is the general kernels' formula (conventions_cpu.cpp), lane for lane:
//   V'_t    = V_{t+1}; the end value after the last step; the bootstrap value where
//             truncated (rare: a branch per vector, not a stream)
//   td_t    = r_t + gamma V'_t - V_t, with V'_t read as +0 where terminated (even a NaN)
//   delta_t = rho_t td_t,  k_t = gamma lambda c_t (1 - done_t)      A_t = delta_t + k_t A_{t+1}
//   pg_t    = rho_pg_t td_t + gamma rho_pg_t (1 - done_t) A_{t+1}   (V-trace)
#pragma once

#include <cstdint>
#include <initializer_list>

#include "cpu/conventions_cpu.hpp"
#include "cpu/cpu_scan.hpp"

// The vectors never cross a non-inlined call boundary by value (cpu_scan.hpp).
#if defined(__GNUC__)  // GCC and Clang
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace puffadv::detail::simd_kernels {

template <typename C>
using V = simd::vec<C>;
template <typename C>
using M = simd::mask<C>;
template <typename C>
constexpr int W = simd::lanes<C>::width;

template <typename C>
struct coefficients {
    V<C> one, gamma, gamma_lambda, rho_clip, c_clip, rho_pg_clip;
};

template <typename C>
PUFF_SIMD_INLINE coefficients<C> splat_coefficients(const kernel_args<C>& a) {
    return {simd::splat<C>(C(1)),       simd::splat<C>(a.gamma),  simd::splat<C>(a.gamma_lambda),
            simd::splat<C>(a.rho_clip), simd::splat<C>(a.c_clip), simd::splat<C>(a.rho_pg_clip)};
}

/// W steps' affine maps A_t = delta + decay A_{t+1} and V-trace's pg terms pg_t = q + p A_{t+1}.
template <typename C>
struct maps {
    V<C> delta, decay, q, p;
};

template <typename C, bool kImp, bool kPg>
PUFF_SIMD_INLINE maps<C> produce(const coefficients<C>& k, V<C> r, V<C> v, V<C> v_next, M<C> terminated,
                                 M<C> done, V<C> ratio) {
    const V<C> not_done = simd::zero_where<C>(done, k.one);
    const V<C> td = r + k.gamma * simd::zero_where<C>(terminated, v_next) - v;
    maps<C> m;
    m.delta = kImp ? simd::clip<C>(ratio, k.rho_clip) * td : td;
    m.decay = (kImp ? k.gamma_lambda * simd::clip<C>(ratio, k.c_clip) : k.gamma_lambda) * not_done;
    if (kPg) {
        const V<C> rho_pg = kImp ? simd::clip<C>(ratio, k.rho_pg_clip) : k.one;
        m.q = kImp ? rho_pg * td : td;
        m.p = k.gamma * rho_pg * not_done;
    }
    return m;
}

template <typename C>
const C* at(const view& v, std::int64_t row, std::int64_t t) {
    return static_cast<const C*>(v.at(row, t));
}
template <typename C>
C* out_at(const view& v, std::int64_t row, std::int64_t t) {
    return v.present ? static_cast<C*>(v.at(row, t)) : nullptr;
}

// V'_t after the buffer's last step.
template <typename C>
C value_after_end(const kernel_args<C>& a, std::int64_t row) {
    return a.last_value.present ? *at<C>(a.last_value, row, 0) : *at<C>(a.bootstrap, row, a.horizon - 1);
}

inline bool wants_sums(const view& abs_sums, const view& sums, const view& square_sums) {
    return abs_sums.present || sums.present || square_sums.present;
}

// An output's W lanes at p (null: not requested), past the caches if `stream`
// (a copy of a.stream: the streaming stores may alias anything, so a.stream
// itself would be reloaded after each).
template <typename C>
PUFF_SIMD_INLINE void store_output(bool stream, C* p, V<C> x) {
    if (!p) return;
    if (stream)
        simd::stream<C>(p, x);
    else
        simd::store<C>(p, x);
}

// Whether the present outputs can take store_output's streaming stores: each
// starts 16-byte aligned and so does each of its lines the traversal walks
// (rows when `time_contiguous`, else steps).
inline bool outputs_stream_aligned(const view& advantages, const view& returns, bool time_contiguous) {
    for (const view* v : {&advantages, &returns}) {
        if (!v->present) continue;
        const std::int64_t outer = (time_contiguous ? v->row_stride : v->col_stride) * v->size;
        if (reinterpret_cast<std::uintptr_t>(v->base) % 16 != 0 || outer % 16 != 0) return false;
    }
    return true;
}

// V' where truncated: `next` (W values) takes bootstrap_values at the lanes
// whose `truncated` flag is set, lane i at (row + i row_step, t + i t_step).
// Also finds a step both terminated and truncated (an error the caller
// reports). `a`: any kernel's arguments with a bootstrap view of type C.
// Out of line and scalar: rare, and its unrolled lanes were most of
// each kernel's code.
template <typename C, typename F, typename Args>
__attribute__((noinline)) void bootstrap_truncated(const Args& a, C* next, const F* truncated,
                                                   const F* terminated, std::int64_t row, std::int64_t row_step,
                                                   std::int64_t t, std::int64_t t_step, bad_step& bad) {
    for (int i = 0; i < W<C>; ++i) {
        if (truncated[i] == F(0)) continue;
        next[i] = *at<C>(a.bootstrap, row + i * row_step, t + i * t_step);
        if (terminated[i] != F(0)) bad.keep_first(row + i * row_step, t + i * t_step);
    }
}

/// The same, on vectors.
template <typename C, typename F, typename Args>
PUFF_SIMD_INLINE V<C> bootstrap_truncated(const Args& a, V<C> next, const F* truncated,
                                          const F* terminated, std::int64_t row, std::int64_t row_step,
                                          std::int64_t t, std::int64_t t_step, bad_step& bad) {
    alignas(32) C patched[W<C>];
    simd::store<C>(patched, next);
    bootstrap_truncated<C, F>(a, patched, truncated, terminated, row, row_step, t, t_step, bad);
    return simd::load<C>(patched);
}

// Prefetches the bootstrap values that n adjacent flags will have read (the one
// of flag 0 at `bootstrap`, the others `stride` bytes apart). The reads are
// scattered, and a memory latency per truncation, not hidden behind the chain
// of blocks, made 65536x128 f32 GAE with 1 % truncations 14 ms instead of 10
// (one thread). Row-adjacent data goes without: a pass over the next step's
// flags cost more than it saved there (9 -> 11 ms at no truncations).
template <typename C, typename F>
PUFF_SIMD_INLINE void prefetch_bootstraps(const F* flags, std::int64_t n, const char* bootstrap,
                                          std::int64_t stride) {
    const std::int64_t full = n - n % W<C>;
    for (std::int64_t j = full; j < n; ++j)
        if (flags[j] != F(0)) __builtin_prefetch(bootstrap + j * stride);
    // Descending, as the kernel reads: an ascending pass here slowed its streams.
    M<C> any{};
    for (std::int64_t j = full - W<C>; j >= 0; j -= W<C>) any |= simd::set_lanes<C>(flags + j);
    if (!simd::any_lane<C>(any)) return;
    for (std::int64_t j = full - W<C>; j >= 0; j -= W<C>) {
        const M<C> set = simd::set_lanes<C>(flags + j);
        for (int i = 0; i < W<C>; ++i)
            if (set[i]) __builtin_prefetch(bootstrap + (j + i) * stride);
    }
}

// ---- the estimator family (conventions_cpu_family_simd*.cpp) ----
//
// The general family kernels' formulas (conventions_cpu_family.cpp), lane for
// lane, as maps of the scan S_t = delta_t + decay_t S_{t+1} (episodic_sum:
// forwards, S_t from S_{t-1}); flags are masks, "0 where f" is zero_where:
//   discounted_returns  delta = r + gamma B (0 where terminated)        decay = gamma (0 where done)
//   retrace (Delta)     delta = r + gamma nv (0 where terminated) - q  decay = gamma c_{t+1} (0 where done)
//   q_lambda (G)        delta = r + (done ? gamma nv (0 where terminated) : gamma (1 - lambda_t) nv)
//                       decay = gamma lambda_t (0 where done), lambda_t = lambda greedy_{t+1}
//   episodic_sum        delta = x                                      decay = gamma lambda (0 where reset)
// The traversal hands `done` with the row's last step set for q_lambda (its trace is cut there),
// and episodic_sum's reset_t (dones_{t-1}, or dones_t with reset_at_start) as `done`.
// n_step_returns is no scan: its [T, B] traversal keeps the windows W1 .. Wn of the later step
// (conventions_cpu_family_simd_blocks.cpp).
enum class family_kind { discounted, retrace, q_lambda, episodic, n_step };

template <typename C>
struct family_coefficients {
    V<C> one, gamma, lambda, gamma_lambda, c_clip;
};

template <typename C, typename Args>
PUFF_SIMD_INLINE family_coefficients<C> splat_family_coefficients(const Args& a) {
    return {simd::splat<C>(C(1)), simd::splat<C>(a.gamma), simd::splat<C>(a.lambda),
            simd::splat<C>(a.gamma * a.lambda), simd::splat<C>(a.c_clip)};
}

/// The value after the row's last step (discounted and n-step returns): last_value,
/// bootstrap_values[T-1], or 0 (`Args`: family_args<C>).
template <typename C, typename Args>
C family_value_after_end(const Args& a, std::int64_t row) {
    if (a.last_value.present) return *at<C>(a.last_value, row, 0);
    if (a.bootstrap.present) return *at<C>(a.bootstrap, row, a.horizon - 1);
    return C(0);
}

/// W steps' (or rows') inputs as a traversal loaded them.
template <typename C>
struct family_inputs {
    V<C> r, q, boot;  // q: the values (retrace, q_lambda); boot: B_t (discounted) or next_values
    M<C> terminated, done;
    V<C> later;  // retrace: c_{t+1}; q_lambda: greedy_{t+1} as 0 or 1 (1 without greedy flags)
};

template <typename C, family_kind K>
PUFF_SIMD_INLINE maps<C> produce_family(const family_coefficients<C>& k, const family_inputs<C>& in) {
    maps<C> m;
    if constexpr (K == family_kind::discounted) {
        m.delta = in.r + simd::zero_where<C>(in.terminated, k.gamma * in.boot);
        m.decay = simd::zero_where<C>(in.done, k.gamma);
    } else if constexpr (K == family_kind::retrace) {
        m.delta = in.r + simd::zero_where<C>(in.terminated, k.gamma * in.boot) - in.q;
        m.decay = simd::zero_where<C>(in.done, k.gamma * in.later);
    } else if constexpr (K == family_kind::q_lambda) {
        const V<C> lambda_t = k.lambda * in.later;
        const V<C> stop = simd::zero_where<C>(in.terminated, k.gamma * in.boot);
        const V<C> go = k.gamma * ((k.one - lambda_t) * in.boot);
        m.delta = in.r + simd::zero_where<C>(~in.done, stop) + simd::zero_where<C>(in.done, go);
        m.decay = simd::zero_where<C>(in.done, k.gamma * lambda_t);
    } else {
        m.delta = in.r;
        m.decay = simd::zero_where<C>(in.done, k.gamma_lambda);
    }
    return m;
}

/// Retrace's trace c_t = lambda min(c_clip, pi_t / mu_t) (a NaN ratio gives the clip).
template <typename C>
PUFF_SIMD_INLINE V<C> retrace_trace(const family_coefficients<C>& k, V<C> target, V<C> behaviour) {
    return k.lambda * simd::clip<C>(target / behaviour, k.c_clip);
}

/// W flags as 0 or 1.
template <typename C, typename F>
PUFF_SIMD_INLINE V<C> flag_values(const family_coefficients<C>& k, const F* flags) {
    return simd::zero_where<C>(~simd::set_lanes<C>(flags), k.one);
}

/// The advantages and returns from the scanned S: Q(lambda) scans its returns G
/// (A = G - q, where q was read); Retrace its advantages (returns S + q); the rest
/// give S for both.
template <typename C, family_kind K>
PUFF_SIMD_INLINE V<C> family_advantage(V<C> s, V<C> q, bool q_read) {
    return K == family_kind::q_lambda && q_read ? s - q : s;
}
template <typename C, family_kind K>
PUFF_SIMD_INLINE V<C> family_return(V<C> s, V<C> q) {
    return K == family_kind::retrace ? s + q : s;
}

// Lanes of `both` (terminated and truncated set: an error the caller reports) into
// bad, lane i at (row + i row_step, t + i t_step). Out of line: rare.
template <typename C>
__attribute__((noinline)) void keep_both_set(const M<C>& both, std::int64_t row, std::int64_t row_step,
                                             std::int64_t t, std::int64_t t_step, bad_step& bad) {
    for (int i = 0; i < W<C>; ++i)
        if (both[i]) bad.keep_first(row + i * row_step, t + i * t_step);
}

inline bool byte_flags(dtype t) { return t == dtype::uint8 || t == dtype::boolean; }

/// Calls kernel<F, kImp, kPg>(a, first, count) with F the flag type (C, or a byte
/// for bool/uint8) and the estimator's importance/pg terms fixed at compile time.
template <typename C, template <typename, typename, bool, bool> class Kernel>
bad_step dispatch(const kernel_args<C>& a, std::int64_t first, int count) {
    using fn = bad_step (*)(const kernel_args<C>&, std::int64_t, int);
    static constexpr fn by_float_flags[4] = {Kernel<C, C, false, false>::run, Kernel<C, C, false, true>::run,
                                             Kernel<C, C, true, false>::run, Kernel<C, C, true, true>::run};
    static constexpr fn by_byte_flags[4] = {
        Kernel<C, std::uint8_t, false, false>::run, Kernel<C, std::uint8_t, false, true>::run,
        Kernel<C, std::uint8_t, true, false>::run, Kernel<C, std::uint8_t, true, true>::run};
    const int which = (a.importance.present ? 2 : 0) + (a.pg ? 1 : 0);
    return (byte_flags(a.dones.type) ? by_byte_flags : by_float_flags)[which](a, first, count);
}

/// Calls kernel<F, K>::run(a, first, count) with F the flag type (C, or a byte for
/// bool/uint8) and K the family kind, fixed at compile time (`Args`: family_args<C>).
template <typename C, template <typename, typename, family_kind> class Kernel, typename Args>
bad_step family_dispatch(const Args& a, std::int64_t first, int count) {
    using fn = bad_step (*)(const Args&, std::int64_t, int);
    static constexpr fn by_float_flags[5] = {
        Kernel<C, C, family_kind::discounted>::run, Kernel<C, C, family_kind::retrace>::run,
        Kernel<C, C, family_kind::q_lambda>::run, Kernel<C, C, family_kind::episodic>::run,
        Kernel<C, C, family_kind::n_step>::run};
    static constexpr fn by_byte_flags[5] = {
        Kernel<C, std::uint8_t, family_kind::discounted>::run, Kernel<C, std::uint8_t, family_kind::retrace>::run,
        Kernel<C, std::uint8_t, family_kind::q_lambda>::run, Kernel<C, std::uint8_t, family_kind::episodic>::run,
        Kernel<C, std::uint8_t, family_kind::n_step>::run};
    const int which = a.kind == estimator::discounted_returns ? 0
                      : a.kind == estimator::retrace          ? 1
                      : a.kind == estimator::q_lambda         ? 2
                      : a.kind == estimator::episodic_sum     ? 3
                                                              : 4;  // n_step_returns (family_simd_serves)
    return (byte_flags(a.terminated.type) ? by_byte_flags : by_float_flags)[which](a, first, count);
}

}  // namespace puffadv::detail::simd_kernels
