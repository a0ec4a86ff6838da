// The CPU engine's vocabulary: one call's arrays, and the lanes a traversal
// hands to an estimator.
//
// Every estimator is one first-order scan S_t = delta_t + k_t S_{t+1} (or, run
// forwards, S_t = delta_t + k_t S_{t-1}) with a producer and an epilogue:
//   - the producer makes (delta_t, k_t) from one group of lanes' inputs, which
//     it loads through the lanes: values(view, dt, fill), flags<F>(view, dt);
//     dt = +1 reads the later step (V_{t+1}, PufferLib's rewards at t+1), -1
//     the earlier one, and a step outside the row reads `fill`;
//   - the epilogue makes the outputs (advantages, returns) from the scanned S_t
//     and S_{t+1}.
// A traversal (engine_traversals.hpp) decides what a group of lanes is and
// knows no estimator; an estimator (estimators_*.hpp) is written once against
// the lanes' interface and knows no traversal. Two kinds of lanes:
//   - time_lanes: W steps t .. t+W-1 of one row (time-contiguous rows, [B, T]);
//   - row_lanes: step t of W rows r .. r+W-1 (row-adjacent data, [T, B]).
// kEdge lanes are the rare groups that reach past the row's first or last step
// (or past the block's last row): their loads check every lane; the others
// are plain vector loads.
#pragma once

#include <cstdint>
#include <mutex>

#include "cpu/conventions_cpu.hpp"
#include "cpu/cpu_scan.hpp"

#if defined(__GNUC__)  // the vectors never cross a non-inlined call by value (cpu_scan.hpp)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace puffadv::detail::engine {

template <typename C>
using V = simd::vec<C>;
template <typename C>
using M = simd::mask<C>;
template <typename C>
constexpr int W = simd::lanes<C>::width;

/// One call's arrays, by their part in the scan; absent ones are !present.
struct arrays {
    std::int64_t rows = 0, horizon = 0;
    view rewards, values, terminated, truncated, last_value, bootstrap, importance;
    view next_values, target, behaviour, greedy;
    view advantages, returns, abs_sums, sums, square_sums;
    bool stream = false;  // outputs stored past the caches (engine_serves.cpp: streams)
};

/// Flags of one byte (bool, uint8) rather than of the floats' type.
inline bool byte_flags(dtype t) { return t == dtype::uint8 || t == dtype::boolean; }

/// The outputs an epilogue gives for a group of lanes.
template <typename C>
struct outputs {
    V<C> advantages, returns;
};

/// A mask from a per-lane predicate (edge groups only: a scalar loop).
template <typename C, typename Pred>
PUFF_SIMD_INLINE M<C> mask_of(Pred pred) {
    M<C> m{};
    for (int i = 0; i < W<C>; ++i) m[i] = pred(i) ? -1 : 0;
    return m;
}

/// W steps t .. t+W-1 of one row (every [rows, horizon] array has col_stride 1,
/// or the row has at most one step).
template <typename C, bool kEdge>
struct time_lanes {
    const arrays& a;
    std::int64_t row, t;
    bad_step& bad;

    std::int64_t row_of(int) const { return row; }
    std::int64_t step_of(int i) const { return t + i; }
    bool inside(std::int64_t s) const { return s >= 0 && s < a.horizon; }
    /// The lanes that hold a step of the row.
    PUFF_SIMD_INLINE M<C> valid() const {
        if constexpr (!kEdge) return M<C>{} == M<C>{};
        else return mask_of<C>([&](int i) { return inside(t + i); });
    }
    /// The lanes that hold the row's last step.
    PUFF_SIMD_INLINE M<C> last_step() const {
        if constexpr (!kEdge) return M<C>{};
        else return mask_of<C>([&](int i) { return t + i == a.horizon - 1; });
    }
    /// fill(row) in the lanes that hold the row's last step, 0 elsewhere.
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> at_last_step(Fill fill) const {
        if constexpr (!kEdge) return V<C>{};
        else return simd::zero_where<C>(~last_step(), simd::splat<C>(fill(row)));
    }
    template <typename T>
    const T* at(const view& v, std::int64_t s) const {
        return static_cast<const T*>(v.at(row, s));
    }
    /// Each lane's value at its step + dt; fill(row) outside the row.
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> values(const view& v, int dt, Fill fill) const {
        const std::int64_t s = t + dt;
        if constexpr (kEdge) {
            if (s < 0 || s + W<C> > a.horizon) {
                if (dt == 1 && s + W<C> == a.horizon + 1 && t >= 0)  // the last lane is past the end
                    return simd::shift_in<C>(simd::load<C>(at<C>(v, t)), simd::splat<C>(fill(row)));
                alignas(32) C x[W<C>];
                const C outside = fill(row);
                for (int i = 0; i < W<C>; ++i) x[i] = inside(s + i) ? *at<C>(v, s + i) : outside;
                return simd::load<C>(x);
            }
        }
        return simd::load<C>(at<C>(v, s));
    }
    /// The lanes whose flag at step + dt is set (non-zero); none outside the row.
    template <typename F>
    PUFF_SIMD_INLINE M<C> flags(const view& v, int dt) const {
        const std::int64_t s = t + dt;
        if constexpr (kEdge) {
            if (s < 0 || s + W<C> > a.horizon) {
                F x[W<C>] = {};
                for (int i = 0; i < W<C>; ++i)
                    if (inside(s + i)) x[i] = *at<F>(v, s + i);
                return simd::set_lanes<C>(x);
            }
        }
        return simd::set_lanes<C>(at<F>(v, s));
    }
    PUFF_SIMD_INLINE void store(const view& v, V<C> x) const {
        if (!v.present) return;
        if constexpr (kEdge) {
            for (int i = 0; i < W<C>; ++i)
                if (inside(t + i)) *static_cast<C*>(v.at(row, t + i)) = x[i];
        } else if (a.stream) {
            simd::stream<C>(static_cast<C*>(v.at(row, t)), x);
        } else {
            simd::store<C>(static_cast<C*>(v.at(row, t)), x);
        }
    }
};

/// Step t of rows row .. row+W-1 (every [rows, horizon] array has row_stride 1,
/// or one row); kEdge: only the first n rows are the block's.
template <typename C, bool kEdge>
struct row_lanes {
    const arrays& a;
    std::int64_t row, t;
    int n;
    bad_step& bad;

    std::int64_t row_of(int i) const { return row + i; }
    std::int64_t step_of(int) const { return t; }
    bool inside(std::int64_t s) const { return s >= 0 && s < a.horizon; }
    PUFF_SIMD_INLINE M<C> valid() const {
        if constexpr (!kEdge) return M<C>{} == M<C>{};
        else return mask_of<C>([&](int i) { return i < n; });
    }
    PUFF_SIMD_INLINE M<C> last_step() const {
        return t == a.horizon - 1 ? M<C>{} == M<C>{} : M<C>{};
    }
    int lanes() const { return kEdge ? n : W<C>; }
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> at_last_step(Fill fill) const {
        if (t != a.horizon - 1) return V<C>{};
        alignas(32) C x[W<C>] = {};
        for (int i = 0; i < lanes(); ++i) x[i] = fill(row + i);
        return simd::load<C>(x);
    }
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> values(const view& v, int dt, Fill fill) const {
        const std::int64_t s = t + dt;
        if (!inside(s) || kEdge) {
            alignas(32) C x[W<C>] = {};
            for (int i = 0; i < lanes(); ++i) x[i] = inside(s) ? *static_cast<const C*>(v.at(row + i, s)) : fill(row + i);
            return simd::load<C>(x);
        }
        return simd::load<C>(static_cast<const C*>(v.at(row, s)));
    }
    template <typename F>
    PUFF_SIMD_INLINE M<C> flags(const view& v, int dt) const {
        const std::int64_t s = t + dt;
        if (!inside(s)) return M<C>{};
        if constexpr (kEdge) {
            F x[W<C>] = {};
            for (int i = 0; i < n; ++i) x[i] = *static_cast<const F*>(v.at(row + i, s));
            return simd::set_lanes<C>(x);
        }
        return simd::set_lanes<C>(static_cast<const F*>(v.at(row, s)));
    }
    PUFF_SIMD_INLINE void store(const view& v, V<C> x) const {
        if (!v.present) return;
        if constexpr (kEdge) {
            for (int i = 0; i < n; ++i) *static_cast<C*>(v.at(row + i, t)) = x[i];
        } else if (a.stream) {
            simd::stream<C>(static_cast<C*>(v.at(row, t)), x);
        } else {
            simd::store<C>(static_cast<C*>(v.at(row, t)), x);
        }
    }
};

/// A scalar of type C at (row, t) of a float view of type C.
template <typename C>
inline C element(const view& v, std::int64_t row, std::int64_t t) {
    return *static_cast<const C*>(v.at(row, t));
}

/// `next` with bootstrap_values at the lanes whose `truncated` is set; a lane
/// both truncated and `terminated` is kept in lanes.bad (an error the caller
/// reports). Out of line in effect (rare): a scalar loop over the lanes.
template <typename C, typename Lanes>
PUFF_SIMD_INLINE V<C> bootstrap_truncated(const Lanes& lanes, V<C> next, M<C> truncated, M<C> terminated) {
    alignas(32) C x[W<C>];
    simd::store<C>(x, next);
    for (int i = 0; i < W<C>; ++i) {
        if (!truncated[i]) continue;
        x[i] = element<C>(lanes.a.bootstrap, lanes.row_of(i), lanes.step_of(i));
        if (terminated[i]) lanes.bad.keep_first(lanes.row_of(i), lanes.step_of(i));
    }
    return simd::load<C>(x);
}

/// The lanes both terminated and truncated, into lanes.bad.
template <typename C, typename Lanes>
inline void keep_both_set(const Lanes& lanes, M<C> both) {
    for (int i = 0; i < W<C>; ++i)
        if (both[i]) lanes.bad.keep_first(lanes.row_of(i), lanes.step_of(i));
}

/// The first bad step across threads.
struct shared_bad_step {
    bad_step first;
    std::mutex lock;
    void keep(const bad_step& b) {
        if (b.row < 0) return;
        std::lock_guard<std::mutex> guard(lock);
        first.keep_first(b.row, b.step);
    }
};

}  // namespace puffadv::detail::engine
