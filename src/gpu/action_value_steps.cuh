// Retrace(lambda) and Q(lambda) on the GPU (issue 20, FAMILY.md 2 and 3): the
// producers of the row scan over action values (Producer / Epilogue concepts in
// puff_steps.cuh), beside the returns and episodic ones of family_steps.cuh,
// whose conventions they follow term by term.
#pragma once

#include "gpu/family_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Retrace(lambda) on action values (FAMILY.md 2):
///   Delta_t = r_t + gamma (1 - term_t) nv_t - q_t + gamma (1 - done_t) c_{t+1} Delta_{t+1},
///   c_t = lambda min(c_clip, pi_t / mu_t)   (log_probs: exp(log pi_t - log mu_t)),
/// nv_t = E_pi Q(s_{t+1}, .), read at every step (the bootstrap everywhere).
/// A step keeps its one-step error, q_t (the returns Q_ret = Delta + q) and
/// c_t; the map of t needs c_{t+1} (the lookahead: one shuffle).
template <typename T, typename Values = typed_view, typename Flags = Values>
struct retrace_producer {
    using value_type = T;
    struct step {
        T value;  ///< q_t, named as the epilogue (store_estimate) reads it
        T error, trace;
        std::uint32_t flags;
    };
    struct lookahead {
        T trace;  ///< c_{t+1}
    };

    Values q_values, rewards, next_values;
    Flags terminated, truncated;
    Values target, behaviour;
    T gamma, lambda, c_clip;
    bool log_probs;

    __device__ __forceinline__ T trace(T pi, T mu) const {
        return lambda * clip_to(log_probs ? exp_of(pi - mu) : pi / mu, c_clip);
    }
    __device__ __forceinline__ step make_step(T q, T r, T nv, T term, T trunc, T pi, T mu) const {
        const std::uint32_t f = episode_flags(term, trunc);
        return {q, one_step_error(r, nv, q, f, gamma), trace(pi, mu), f};
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return make_step(read<T>(q_values, row, t), read<T>(rewards, row, t), read<T>(next_values, row, t),
                         read<T>(terminated, row, t), present(truncated) ? read<T>(truncated, row, t) : T(0),
                         read<T>(target, row, t), read<T>(behaviour, row, t));
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        const std::int64_t row = at.row, t = at.t;  // nothing per row: a flat group reads as one run
        T q[N], r[N], nv[N], d[N], u[N], pi[N], mu[N];
        read_items(q_values, row, t, q);
        read_items(rewards, row, t, r);
        read_items(next_values, row, t, nv);
        read_items(terminated, row, t, d);
        if (present(truncated))
            read_items(truncated, row, t, u);
        else
            for (int j = 0; j < N; ++j) u[j] = T(0);
        read_items(target, row, t, pi);
        read_items(behaviour, row, t, mu);
#pragma unroll
        for (int j = 0; j < N; ++j) s[j] = make_step(q[j], r[j], nv[j], d[j], u[j], pi[j], mu[j]);
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return {s.trace}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t row, std::int64_t t) const {
        return {trace(read<T>(target, row, t), read<T>(behaviour, row, t))};
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& next, bool last) const {
        return {cur.flags & 3u ? T(0) : gamma * next.trace, cur.error, last};
    }
};

/// Q(lambda) (FAMILY.md 3), scanned in the returns G (as the reference reads):
///   G_t = r_t + gamma [(1 - lambda_t) nv_t + lambda_t G_{t+1}]   inside an episode and the row,
///       = r_t + gamma (1 - term_t) nv_t                          at its end,
/// lambda_t = lambda (Peng) or lambda greedy_{t+1} (Watkins); nv_t = max_a Q(s_{t+1}, a).
/// The map of t needs greedy_{t+1} (the lookahead: one shuffle of the step's
/// flag word, bit 2 = greedy; always set for Peng). The
/// epilogue (store_target) writes G and the advantages G - q_t, so q is read
/// only when the advantages are asked for (returns alone move rl-triton's
/// bytes: r, nv, terminated, G).
template <typename T, typename Values = typed_view, typename Flags = Values>
struct q_lambda_producer {
    using value_type = T;
    struct step {
        T value;  ///< q_t (0 when the advantages are not stored)
        T reward, next_value;
        std::uint32_t flags;  ///< bit 0 terminated, bit 1 truncated, bit 2 greedy
    };
    struct lookahead {
        std::uint32_t flags;  ///< of step t + 1: its bit 2 says whether the trace goes on
    };

    Values q_values, rewards, next_values;  ///< q_values absent unless the advantages are stored
    Flags terminated, truncated, greedy;    ///< greedy absent: Peng
    T gamma, lambda;

    static __device__ __forceinline__ std::uint32_t flags_of(T term, T trunc, T greedy_flag) {
        return episode_flags(term, trunc) | (std::uint32_t(greedy_flag != T(0)) << 2);
    }
    __device__ __forceinline__ T greedy_at(std::int64_t row, std::int64_t t) const {
        return present(greedy) ? read<T>(greedy, row, t) : T(1);
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return {present(q_values) ? read<T>(q_values, row, t) : T(0), read<T>(rewards, row, t),
                read<T>(next_values, row, t),
                flags_of(read<T>(terminated, row, t), present(truncated) ? read<T>(truncated, row, t) : T(0),
                         greedy_at(row, t))};
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        const std::int64_t row = at.row, t = at.t;  // nothing per row: a flat group reads as one run
        T q[N], r[N], nv[N], d[N], u[N], g[N];
        if (present(q_values))
            read_items(q_values, row, t, q);
        else
            for (int j = 0; j < N; ++j) q[j] = T(0);
        read_items(rewards, row, t, r);
        read_items(next_values, row, t, nv);
        read_items(terminated, row, t, d);
        if (present(truncated))
            read_items(truncated, row, t, u);
        else
            for (int j = 0; j < N; ++j) u[j] = T(0);
        if (present(greedy))
            read_items(greedy, row, t, g);
        else
            for (int j = 0; j < N; ++j) g[j] = T(1);
#pragma unroll
        for (int j = 0; j < N; ++j) s[j] = step{q[j], r[j], nv[j], flags_of(d[j], u[j], g[j])};
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return {s.flags}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t row, std::int64_t t) const {
        return {flags_of(T(0), T(0), greedy_at(row, t))};
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& next, bool last) const {
        const T one_step = one_step_error(cur.reward, cur.next_value, T(0), cur.flags, gamma);
        if (last || (cur.flags & 3u)) return {T(0), one_step, last};
        const T trace = next.flags & 4u ? lambda : T(0);
        return {gamma * trace, cur.reward + gamma * (T(1) - trace) * cur.next_value, false};
    }
};

/// Stores a scan of the returns G: returns G, advantages G - q_t.
template <typename T, typename Out = typed_view>
struct store_target {
    Out advantages, returns;

    template <typename Step, typename Next>
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, T g, const Step& s, T, const Next&) const {
        if (present(advantages)) write(advantages, row, t, g - s.value);
        if (present(returns)) write(returns, row, t, g);
    }
    template <int N, bool Flat, typename Step, typename Next>
    __device__ __forceinline__ void store_items(const item_places<N, Flat>& at, const T (&g)[N],
                                                const Step (&s)[N], T, const Next&) const {
        if (present(advantages)) {
            T a[N];
#pragma unroll
            for (int j = 0; j < N; ++j) a[j] = g[j] - s[j].value;
            write_items(advantages, at.row, at.t, a);
        }
        if (present(returns)) write_items(returns, at.row, at.t, g);
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
