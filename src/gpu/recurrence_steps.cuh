// linear_recurrence on the GPU: the engine's scan itself as a kind (kinds.cuh
// says what a kind is), y_t = x_t + a_t y_{t+1} (reverse) or
// y_t = x_t + a_t y_{t-1} (forward), y outside the row the seed (absent: 0).
// The reverse recurrence is the row scan as it runs; the forward one runs over
// reversed time as the episodic sums do (family_steps.cuh: episodic_producer,
// whose flat groups flip the rows): the scan's step u is time horizon - 1 - u.
// Either way the seed is folded into the input of the row's last scanned step
// (x + a seed), the bootstrap's place in the other producers, and that step's
// map ends the chain.
#pragma once

#include <cstdint>
#include <type_traits>

#include "gpu/family_kinds.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

template <typename T, typename Values = typed_view, bool Forward = false, bool Flipped = false>
struct recurrence_producer {
    using value_type = T;
    struct step {
        T input, decay;
    };
    struct lookahead {};

    Values inputs, decays;
    Values seed;  ///< [rows]: row_stride only
    std::int64_t horizon;
    std::int64_t rows = 0;  ///< Flipped: scan row r is memory row rows - 1 - r

    /// Only a scan over reversed time flips its rows (planner.cuh: flips_rows).
    template <bool F = Forward, std::enable_if_t<F, int> = 0>
    recurrence_producer<T, Values, Forward, true> with_flipped_rows(std::int64_t all_rows) const {
        return {inputs, decays, seed, horizon, all_rows};
    }
    __device__ __forceinline__ std::int64_t time_of(std::int64_t u) const { return Forward ? horizon - 1 - u : u; }
    __device__ __forceinline__ std::int64_t memory_row(std::int64_t r) const {
        if constexpr (Flipped)
            return rows - 1 - r;
        else
            return r;
    }
    __device__ __forceinline__ void fold_seed(step& s, T seed_value) const {
        s.input = s.input + s.decay * seed_value;
    }

    __device__ __forceinline__ step load(std::int64_t scan_row, std::int64_t u) const {
        const std::int64_t row = memory_row(scan_row), t = time_of(u);
        step s{read<T>(inputs, row, t), read<T>(decays, row, t)};
        if (u == horizon - 1 && present(seed)) fold_seed(s, read<T>(seed, row, 0));
        return s;
    }
    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        const std::int64_t row = memory_row(at.row);
        // Forward: the run of N elements ending at time horizon - 1 - at.t, reversed in
        // registers (before the row's start, in the memory row before, where a flat group
        // runs over it: episodic_producer).
        const std::int64_t t = Forward ? horizon - at.t - N : at.t;
        const T seed_value = at.holds_end(horizon) && present(seed) ? read<T>(seed, row, 0) : T(0);
        T x[N], a[N];
        read_items(inputs, row, t, x);
        read_items(decays, row, t, a);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            s[j] = Forward ? step{x[N - 1 - j], a[N - 1 - j]} : step{x[j], a[j]};
            if (at.row_end(j, horizon) && present(seed)) fold_seed(s[j], seed_value);
        }
    }

    static __device__ __forceinline__ lookahead ahead(const step&) { return {}; }
    __device__ __forceinline__ lookahead load_ahead(std::int64_t, std::int64_t) const { return {}; }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead&, bool last) const {
        if (last) return {T(0), cur.input, true};
        return {cur.decay, cur.input, false};
    }
};

/// The kinds table's entry (engine.cuh: estimator::linear_recurrence). `Forward`:
/// y_t from y_{t-1}, a scan over reversed time.
template <bool Forward>
struct recurrence_kind : family_kind_defaults {
    static constexpr bool reversed = Forward;
    static void read(call_layout& layout, const standard_arrays& a) {
        layout.input(a.rewards);
        layout.input(a.decay);
        layout.output(a.advantages);
        layout.output(a.fused.returns);
    }
    template <typename In, typename Inputs>
    using tuning = widest_tuning<In, standard_scan_policy>;
    template <typename T, typename Inputs, typename Cols>
    static auto producer(const standard_arrays& a, const standard_params&, Cols c) {
        return recurrence_producer<T, typename Cols::input, Forward>{c.in(a.rewards), c.in(a.decay),
                                                                     c.in(a.last_value), a.rewards.cols};
    }
    template <typename T, typename Cols>
    static auto epilogue(const standard_arrays& a, const standard_params&, Cols c) {
        return store_same<T, typename Cols::output, Forward>{c.out(a.advantages), c.out(a.fused.returns),
                                                             a.rewards.cols};
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
