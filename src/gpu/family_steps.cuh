// The estimator family beyond GAE / TD(lambda) / V-trace (issue 20, FAMILY.md)
// on the GPU: the producers of the row scan (Producer / Epilogue concepts in
// puff_steps.cuh) of discounted returns and the episodic sums (a forward
// recurrence, run as the backward scan over reversed time), and the helpers
// the action-value producers share (Retrace, Q(lambda):
// action_value_steps.cuh). n-step returns are not a scan: a window per output
// (n_step_window.cuh).
//
// The formulas are the CPU backend's, term by term: (1 - terminated_t) X is
// "0 where terminated, else X" (a NaN in X at a terminated step stays out),
// (1 - done_t) multiplies (0 * NaN = NaN reaches the earlier steps of the row),
// a ratio is clipped by an explicit select (a NaN ratio gives the clip), and a
// step both terminated and truncated is terminated (episode_flags, issue 33).
#pragma once

#include <type_traits>

#include "gpu/standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

template <typename T>
__device__ __forceinline__ T exp_of(T x) {
    if constexpr (std::is_same_v<T, float>)
        return expf(x);
    else
        return exp(x);
}

/// Bit 0: terminated, bit 1: truncated (flags are set when non-zero); a step
/// flagged both is terminated (Gymnasium's meaning, issue 33), never both bits.
template <typename T>
__device__ __forceinline__ std::uint32_t episode_flags(T terminated, T truncated) {
    return terminated != T(0) ? 1u : truncated != T(0) ? 2u : 0u;
}

/// r_t + gamma (1 - terminated_t) next_t - q_t.
template <typename T>
__device__ __forceinline__ T one_step_error(T reward, T next, T q, std::uint32_t flags, T gamma) {
    return reward + (flags & 1u ? T(0) : gamma * next) - q;
}

/// Discounted returns (FAMILY.md 1):
///   G_t = r_t + gamma (1 - term_t) B_t + gamma (1 - done_t) G_{t+1},
/// B_t the bootstrap at truncated steps and at the row's last (bootstrap_values,
/// else last_value, else 0). No values are read. The bootstrap is folded into
/// the reward where it is read, as in standard_producer (a vector load of
/// bootstrap_values with the other inputs where there are truncations), so a
/// step is two words and its map needs nothing of the next step: no lookahead.
/// (The standard producer with values read as 0 computes the same, with the
/// checks and registers of four more optional arrays: slower, docs/benchmarks.md.)
/// Steps: gamma_t read at each step (a step keeps it for its map).
template <typename T, typename Values = typed_view, typename Flags = Values, bool Steps = false>
struct returns_producer {
    using value_type = T;
    struct step : step_discounts<T, Steps> {
        T reward;             ///< r_t, plus gamma B_t where the bootstrap is read and t is not terminated
        std::uint32_t flags;  ///< bit 0 terminated, bit 1 truncated
    };
    struct lookahead {};

    Values rewards;
    Flags terminated, truncated;
    Values bootstrap_values, last_value;
    std::int64_t horizon;
    T gamma;
    Values gamma_steps{};  ///< Steps: per-step gamma (absent: the scalar)

    __device__ __forceinline__ T gamma_of(const step& s) const {
        if constexpr (Steps) return s.gamma;
        else return gamma;
    }
    __device__ __forceinline__ step make_step(std::int64_t row, std::int64_t t, T reward, std::uint32_t flags) const {
        step s;
        s.reward = reward, s.flags = flags;
        if constexpr (Steps) s.gamma = present(gamma_steps) ? read<T>(gamma_steps, row, t) : gamma;
        (void)row, (void)t;
        return s;
    }

    __device__ __forceinline__ T end_bootstrap(std::int64_t row) const {
        if (present(bootstrap_values)) return read<T>(bootstrap_values, row, horizon - 1);
        return present(last_value) ? read<T>(last_value, row, 0) : T(0);
    }
    __device__ __forceinline__ void bootstrap(step& s, T b) const {
        if (!(s.flags & 1u)) s.reward = s.reward + gamma_of(s) * b;
    }

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        step s = make_step(row, t, read<T>(rewards, row, t),
                           episode_flags(read<T>(terminated, row, t),
                                         present(truncated) ? read<T>(truncated, row, t) : T(0)));
        if (t == horizon - 1)
            bootstrap(s, end_bootstrap(row));
        else if (s.flags == 2u)
            bootstrap(s, read<T>(bootstrap_values, row, t));
        return s;
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        T r[N], d[N];
        const bool holds_end = at.holds_end(horizon);  // at.row's end
        const bool truncations = present(truncated);  // then bootstrap_values is present (checked)
        const T end_value = holds_end && !truncations ? end_bootstrap(at.row) : T(0);
        read_items(rewards, at.row, at.t, r);
        read_items(terminated, at.row, at.t, d);
        if (truncations) {
            T u[N], b[N];
            read_items(truncated, at.row, at.t, u);
            read_items(bootstrap_values, at.row, at.t, b);
#pragma unroll
            for (int j = 0; j < N; ++j) {
                s[j] = make_step(at.row_of(j), at.t_of(j), r[j], episode_flags(d[j], u[j]));
                if ((s[j].flags & 2u) || at.row_end(j, horizon)) bootstrap(s[j], b[j]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < N; ++j) {
                s[j] = make_step(at.row_of(j), at.t_of(j), r[j], episode_flags(d[j], T(0)));
                if (at.row_end(j, horizon)) bootstrap(s[j], end_value);
            }
        }
    }

    static __device__ __forceinline__ lookahead ahead(const step&) { return {}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t, std::int64_t) const { return {}; }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead&, bool last) const {
        return {cur.flags & 3u ? T(0) : gamma_of(cur), cur.reward, last};
    }
};

/// Episodic sums and eligibility traces (FAMILY.md 5), a forward recurrence
///   C_t = x_t + kappa (1 - reset_t) C_{t-1},   C_{-1} = seed (absent: 0),
/// reset_t = dones_{t-1} ("ends_at", dones_{-1} = 0) or dones_t ("starts_at"),
/// scanned backwards over reversed time: the scan's step u is time
/// horizon - 1 - u of the (forward) views. Time-contiguous rows still load
/// N steps in one access (the run ending at the step, reversed in registers).
/// The seed is folded into the first step's input, as the bootstrap into a
/// reward in standard_producer. Under "ends_at" the map of u needs the done of
/// scan step u + 1 (time t - 1): the lookahead. Flat groups (scan_rows.cuh)
/// take the producer with_flipped_rows: the scan runs backwards over the whole
/// packed run of rows * horizon elements, scan row r being memory row
/// rows - 1 - r, so that a group of N scan steps is one run of N elements even
/// across a row's start (aligned by the kernel's phase). Flipped is a type
/// (a runtime select of the row cost the generic kernels 900 bytes of spills).
/// Steps: kappa_t = gamma_t lambda_t, read at the step whose decay it is (time t: C_t's).
template <typename T, typename Values = typed_view, typename Flags = Values, bool Flipped = false, bool Steps = false>
struct episodic_producer {
    using value_type = T;
    struct step : step_discounts<T, Steps> {
        T input, done;
    };
    struct lookahead {
        T done;
    };

    Values inputs;
    Flags dones;
    Values seed;  ///< [rows]: row_stride only
    std::int64_t horizon;
    T kappa;
    bool starts_at;
    std::int64_t rows = 0;  ///< Flipped: scan row r is memory row rows - 1 - r
    Values gamma_steps{}, lambda_steps{};  ///< Steps: per-step arrays (absent: the scalars)
    T gamma = T(0), lambda = T(0);         ///< Steps: the scalars where an array is absent

    episodic_producer<T, Values, Flags, true, Steps> with_flipped_rows(std::int64_t all_rows) const {
        return {inputs, dones, seed, horizon, kappa, starts_at, all_rows, gamma_steps, lambda_steps, gamma, lambda};
    }
    /// kappa (1 - reset); per-step kappa_t is selected away where reset (a NaN too), as on the CPU.
    __device__ __forceinline__ T decay(const step& s, T reset) const {
        if constexpr (Steps) return reset != T(0) ? T(0) : s.gamma_lambda;
        else return kappa * (T(1) - reset);
    }
    __device__ __forceinline__ step make_step(std::int64_t row, std::int64_t t, T input, T done) const {
        step s;
        s.input = input, s.done = done;
        if constexpr (Steps)
            static_cast<step_discounts<T, true>&>(s) = discounts_at(gamma_steps, lambda_steps, gamma, lambda, row, t);
        (void)row, (void)t;
        return s;
    }
    __device__ __forceinline__ std::int64_t time_of(std::int64_t u) const { return horizon - 1 - u; }
    __device__ __forceinline__ std::int64_t memory_row(std::int64_t r) const {
        if constexpr (Flipped)
            return rows - 1 - r;
        else
            return r;
    }
    __device__ __forceinline__ T done_at(std::int64_t row, std::int64_t t) const {
        return read<T>(dones, row, t) != T(0) ? T(1) : T(0);
    }
    /// C_0 = x_0 + kappa (1 - reset_0) seed: reset_0 is dones_0 ("starts_at") or 0.
    __device__ __forceinline__ void fold_seed(step& s, T seed_value) const {
        s.input = s.input + decay(s, starts_at ? s.done : T(0)) * seed_value;
    }

    __device__ __forceinline__ step load(std::int64_t scan_row, std::int64_t u) const {
        const std::int64_t row = memory_row(scan_row), t = time_of(u);
        step s = make_step(row, t, read<T>(inputs, row, t), done_at(row, t));
        if (t == 0 && present(seed)) fold_seed(s, read<T>(seed, row, 0));
        return s;
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        const std::int64_t row = memory_row(at.row);
        // The run's first element in memory: before the row's start (t < 0,
        // the memory row before) where a flat group runs over the row's start.
        const std::int64_t t = horizon - at.t - N;
        const bool holds_start = at.holds_end(horizon);  // the scan row's end is the row's start
        const T seed_value = holds_start && present(seed) ? read<T>(seed, row, 0) : T(0);
        T x[N], d[N];
        read_items(inputs, row, t, x);
        read_items(dones, row, t, d);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            s[j] = make_step(row, t + N - 1 - j, x[N - 1 - j], d[N - 1 - j] != T(0) ? T(1) : T(0));
            if (at.row_end(j, horizon) && present(seed)) fold_seed(s[j], seed_value);
        }
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return {s.done}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t scan_row, std::int64_t u) const {
        return {done_at(memory_row(scan_row), time_of(u))};
    }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& before, bool last) const {
        if (last) return {T(0), cur.input, true};
        return {decay(cur, starts_at ? cur.done : before.done), cur.input, false};
    }
};

/// Stores A into either output (the kinds without values: discounted returns,
/// episodic sums, whose returns are A). Reversed: the scan's step u is time
/// horizon - 1 - u, and Flipped its rows as episodic_producer's.
template <typename T, typename Out = typed_view, bool Reversed = false, bool Flipped = false>
struct store_same {
    Out advantages, returns;
    std::int64_t horizon;
    std::int64_t rows = 0;  ///< Flipped: scan row r is memory row rows - 1 - r

    store_same<T, Out, Reversed, true> with_flipped_rows(std::int64_t all_rows) const {
        return {advantages, returns, horizon, all_rows};
    }
    __device__ __forceinline__ std::int64_t memory_row(std::int64_t r) const {
        if constexpr (Flipped)
            return rows - 1 - r;
        else
            return r;
    }
    template <typename Step, typename Next>
    __device__ __forceinline__ void store(std::int64_t scan_row, std::int64_t u, T a, const Step&, T,
                                          const Next&) const {
        const std::int64_t row = memory_row(scan_row), t = Reversed ? horizon - 1 - u : u;
        if (present(advantages)) write(advantages, row, t, a);
        if (present(returns)) write(returns, row, t, a);
    }
    template <int N, bool Flat, typename Step, typename Next>
    __device__ __forceinline__ void store_items(const item_places<N, Flat>& at, const T (&a)[N],
                                                const Step (&)[N], T, const Next&) const {
        const std::int64_t row = memory_row(at.row), u = at.t;
        T forward[N];
#pragma unroll
        for (int j = 0; j < N; ++j) forward[j] = Reversed ? a[N - 1 - j] : a[j];
        const std::int64_t t = Reversed ? horizon - u - N : u;
        if (present(advantages)) write_items(advantages, row, t, forward);
        if (present(returns)) write_items(returns, row, t, forward);
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
