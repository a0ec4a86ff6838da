// linear_recurrence's producer and epilogue for the CPU engine (engine.hpp):
// the engine's scan itself, y_t = x_t + a_t y_{t-1} (forward) or
// y_t = x_t + a_t y_{t+1} (kForward false), with the inputs as they come:
//   delta = x_t (the caller's inputs: role::rewards)   k = a_t (role::decay)
// The y outside the row is the seed (last_value; absent: 0). Forwards it is the
// carry the first block chains from. Backwards the traversal's top block zeroes
// the maps past the row's end (they would carry nothing), so the seed is folded
// into the last step's input instead: delta_{T-1} = x_{T-1} + a_{T-1} seed.
#pragma once

#include <cstdint>

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

template <typename C, bool kFwd>
struct recurrence_producer {
    using scalar = C;
    static constexpr bool kForward = kFwd;
    const arrays& a;
    struct step {
        V<C> delta, decay;
    };
    explicit recurrence_producer(const arrays& arrays_) : a(arrays_) {}
    static C zero(std::int64_t) { return C(0); }
    C seed_of(std::int64_t row) const {
        return a[role::last_value].present ? element<C>(a[role::last_value], row, 0) : C(0);
    }
    C seed(std::int64_t row) const { return kForward ? seed_of(row) : C(0); }
    void prefetch_row(std::int64_t) const {}
    template <typename Lanes>
    PUFF_SIMD_INLINE step produce(const Lanes& in) const {
        const V<C> x = in.values(role::rewards, 0, zero);
        const V<C> k = in.values(role::decay, 0, zero);
        if constexpr (kForward) {
            return {x, k};
        } else {
            if (!a[role::last_value].present) return {x, k};
            // The seed in the lanes at the row's last step only (0 elsewhere: a select, so
            // a seed of inf or NaN reaches no other step).
            const V<C> after = in.at_last_step([this](std::int64_t row) { return seed_of(row); });
            return {x + simd::zero_where<C>(~in.last_step(), k * after), k};
        }
    }
    template <typename Lanes>
    PUFF_SIMD_INLINE outputs<C> finish(const Lanes&, const step&, V<C> s, V<C>) const {
        return {s, s};
    }
};

}  // namespace puffadv::detail::engine
