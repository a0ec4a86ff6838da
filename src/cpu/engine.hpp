// The CPU engine's vocabulary: one call's arrays, and the lanes a traversal
// hands to an estimator.
//
// Every estimator is one first-order scan S_t = delta_t + k_t S_{t+1} (or, run
// forwards, S_t = delta_t + k_t S_{t-1}) with a producer and an epilogue:
//   - the producer makes (delta_t, k_t) from one group of lanes' inputs, which
//     it loads through the lanes by role (core/kinds.hpp's argument_role):
//     values(role::rewards, dt, fill), flags<F>(role::terminated, dt), and
//     present(role) for an optional array; any [rows, horizon] role loads so;
//     dt = +1 reads the later step (V_{t+1}, PufferLib's rewards at t+1), -1
//     the earlier one, and a step outside the row reads `fill`;
//   - the epilogue makes the outputs (advantages, returns) from the scanned S_t
//     and the S scanned just before it (S_{t+1}; run forwards, S_{t-1}).
// A traversal (engine_traversals.hpp) decides what a group of lanes is and
// knows no estimator; an estimator (estimators_*.hpp) is written once against
// the lanes' interface and knows no traversal. Two kinds of lanes:
//   - time_lanes: W steps t .. t+W-1 of one row (time-contiguous rows, [B, T]);
//   - row_lanes: step t of W rows r .. r+W-1 (row-adjacent data, [T, B]).
// kEdge lanes are the rare groups that reach past the row's first or last step
// (or past the block's last row): their loads check every lane; the others
// are plain vector loads. The lanes read lines of the arithmetic type C: the
// call's memory itself, or a converting source's copy of it (16-bit floats,
// other strides: engine_sources.hpp), so one producer serves every dtype and layout.
#pragma once

#include <cstdint>
#include <mutex>

#include "core/kinds.hpp"
#include "cpu/convert.hpp"
#include "cpu/cpu_scan.hpp"
#include "cpu/views.hpp"

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

using role = argument_role;

/// How the traversals read one call, chosen once by its entry (engine_run.hpp:
/// choose_walk) and read by run_engine, the sources and the traversals.
struct walk_choice {
    bool converting = false;   // through converted lines (engine_sources.hpp), not the call's memory
    bool stream = false;       // outputs stored past the caches (engine_run.hpp: streams)
    int interleaved_rows = 0;  // time-major rows walked by along_time<N> or flat_rows; 0: neither
};

/// One call's arrays by role (kinds.hpp's visit_field fills them); absent ones are !present.
struct arrays {
    std::int64_t rows = 0, horizon = 0;
    view by_role[role_count];
    walk_choice walk;           // how the traversals read it: engine_run.hpp's choose_walk
    const view& operator[](role r) const { return by_role[static_cast<int>(r)]; }
    view& operator[](role r) { return by_role[static_cast<int>(r)]; }
};

/// Flags of one byte (bool, uint8) rather than of the floats' type.
inline bool byte_flags(dtype t) { return t == dtype::uint8 || t == dtype::boolean; }

/// The outputs an epilogue gives for a group of lanes.
template <typename C>
struct outputs {
    V<C> advantages, returns;
};

/// Whether the lanes load `r` along [rows, horizon] (bootstrap_values is read
/// element by element at truncations; [rows] arrays per row).
constexpr bool is_line(role r) { return !is_per_row(r) && r != role::bootstrap_values; }

/// Each role's address at one (row, step) of the traversal, null where absent.
/// A local of the traversal, copied per row (or step): the lanes read their
/// addresses from it, not from the call's views, which every vector store
/// (may_alias) would make the compiler load again.
struct lines {
    const char* at[role_count];
    std::int64_t step_bytes[role_count];  // from one step to the next
    lines() = default;
    lines(const arrays& a, std::int64_t row, std::int64_t t) {
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            at[k] = v.present && is_line(role(k)) ? static_cast<const char*>(v.at(row, t)) : nullptr;
            step_bytes[k] = v.col_stride * v.size;
        }
    }
};

inline bool wants_sums(const arrays& a) {
    return a[role::abs_sums].present || a[role::sums].present || a[role::square_sums].present;
}

/// One row's sums of |A|, A and A^2 into the present [rows] outputs.
inline void write_sums(const arrays& a, std::int64_t row, const double* totals) {
    write_row_sums(a[role::abs_sums], a[role::sums], a[role::square_sums], row, totals);
}

/// A mask from a per-lane predicate (edge groups only: a scalar loop).
template <typename C, typename Pred>
PUFF_SIMD_INLINE M<C> mask_of(Pred pred) {
    M<C> m{};
    for (int i = 0; i < W<C>; ++i) m[i] = pred(i) ? -1 : 0;
    return m;
}

/// W steps t .. t+W-1 of one row (every [rows, horizon] array has col_stride 1,
/// or the row has at most one step). `row_lines`: the row's step 0.
/// N > 1: N rows interleaved (time-major [T, N] data, rows adjacent and steps
/// N apart): the lanes are W / N steps of all N rows, t and horizon count
/// elements of the flattened array (t a multiple of W), and dt = +-1 reads the
/// step N elements away. `row` is then the call's first row (0). N == 0: as N > 1
/// with the count of rows known at run time (`dynamic_rows`; flat_rows).
template <typename C, bool kEdge, int N = 1>
struct time_lanes {
    const arrays& a;
    const lines& row_lines;
    std::int64_t row, t, horizon;
    bool stream;
    bad_step& bad;
    int dynamic_rows = 0;

    /// Elements from one step of a lane's row to the next.
    int rows() const { return N > 0 ? N : dynamic_rows; }
    bool present(role k) const { return row_lines.at[static_cast<int>(k)] != nullptr; }
    std::int64_t row_of(int i) const { return N == 1 ? row : row + (t + i) % rows(); }
    std::int64_t step_of(int i) const { return N == 1 ? t + i : (t + i) / rows(); }
    bool inside(std::int64_t s) const { return s >= 0 && s < horizon; }
    /// The lanes that hold a step of the row.
    PUFF_SIMD_INLINE M<C> valid() const {
        if constexpr (kEdge) {
            if (t < 0 || t + W<C> > horizon) return mask_of<C>([&](int i) { return inside(t + i); });
        }
        return M<C>{} == M<C>{};
    }
    /// The lanes that hold the row's last step.
    PUFF_SIMD_INLINE M<C> last_step() const {
        if constexpr (!kEdge) return M<C>{};
        else return mask_of<C>([&](int i) { return t + i >= horizon - rows() && t + i < horizon; });
    }
    /// fill(row) in the lanes that hold the row's last step, 0 elsewhere.
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> at_last_step(Fill fill) const {
        if constexpr (!kEdge) {
            return V<C>{};
        } else if constexpr (N == 1) {
            return simd::zero_where<C>(~last_step(), simd::splat<C>(fill(row)));
        } else {
            alignas(32) C x[W<C>] = {};
            for (int i = 0; i < W<C>; ++i)
                if (t + i >= horizon - rows() && t + i < horizon) x[i] = fill(row_of(i));
            return simd::load<C>(x);
        }
    }
    template <typename T>
    const T* at(role k, std::int64_t s) const {
        return reinterpret_cast<const T*>(row_lines.at[static_cast<int>(k)] + s * std::int64_t(sizeof(T)));
    }
    /// Each lane's value at its step + dt; fill(its row) outside the row.
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> values(role k, int dt, Fill fill) const {
        const std::int64_t s = t + dt * rows();
        if constexpr (kEdge) {
            if (s < 0 || s + W<C> > horizon) {
                if (N == 1 && dt == 1 && s + W<C> == horizon + 1 && t >= 0)  // the last lane is past the end
                    return simd::shift_in<C>(simd::load<C>(at<C>(k, t)), simd::splat<C>(fill(row)));
                alignas(32) C x[W<C>];
                if constexpr (N == 1) {
                    const C outside = fill(row);
                    for (int i = 0; i < W<C>; ++i) x[i] = inside(s + i) ? *at<C>(k, s + i) : outside;
                } else {
                    for (int i = 0; i < W<C>; ++i) x[i] = inside(s + i) ? *at<C>(k, s + i) : fill(row_of(i));
                }
                return simd::load<C>(x);
            }
        }
        return simd::load<C>(at<C>(k, s));
    }
    /// The lanes whose flag at step + dt is set (non-zero); none outside the row.
    template <typename F>
    PUFF_SIMD_INLINE M<C> flags(role k, int dt) const {
        const std::int64_t s = t + dt * rows();
        if constexpr (kEdge) {
            if (s < 0 || s + W<C> > horizon) {
                // The earlier step of a forward scan's first block (every row has one):
                // the flags of steps 0 .. W-1 moved up a lane, none before step 0.
                if (N == 1 && dt == -1 && s == -1 && W<C> <= horizon)
                    return simd::shift_in_earlier<C>(simd::set_lanes<C>(at<F>(k, 0)), M<C>{});
                F x[W<C>] = {};
                for (int i = 0; i < W<C>; ++i)
                    if (inside(s + i)) x[i] = *at<F>(k, s + i);
                return simd::set_lanes<C>(x);
            }
        }
        return simd::set_lanes<C>(at<F>(k, s));
    }
    PUFF_SIMD_INLINE void store(role k, V<C> x) const {
        if (!present(k)) return;
        C* p = const_cast<C*>(at<C>(k, t));
        if (kEdge && (t < 0 || t + W<C> > horizon)) {
            for (int i = 0; i < W<C>; ++i)
                if (inside(t + i)) p[i] = x[i];
        } else if (stream) {
            simd::stream<C>(p, x);
        } else {
            simd::store<C>(p, x);
        }
    }
};

/// Step t of rows row .. row+W-1 (every [rows, horizon] array has row_stride 1,
/// or one row); kEdge: only the first n rows are the block's. `step_lines`:
/// step t at the block's first row, `offset` rows before this group's.
template <typename C, bool kEdge>
struct row_lanes {
    const arrays& a;
    const lines& step_lines;
    std::int64_t row, t, horizon;
    int offset, n;
    bool stream;
    bad_step& bad;

    bool present(role k) const { return step_lines.at[static_cast<int>(k)] != nullptr; }
    std::int64_t row_of(int i) const { return row + i; }
    std::int64_t step_of(int) const { return t; }
    bool inside(std::int64_t s) const { return s >= 0 && s < horizon; }
    PUFF_SIMD_INLINE M<C> valid() const {
        if constexpr (!kEdge) return M<C>{} == M<C>{};
        else return mask_of<C>([&](int i) { return i < n; });
    }
    PUFF_SIMD_INLINE M<C> last_step() const {
        return t == horizon - 1 ? M<C>{} == M<C>{} : M<C>{};
    }
    int lanes() const { return kEdge ? n : W<C>; }
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> at_last_step(Fill fill) const {
        if (t != horizon - 1) return V<C>{};
        alignas(32) C x[W<C>] = {};
        for (int i = 0; i < lanes(); ++i) x[i] = fill(row + i);
        return simd::load<C>(x);
    }
    template <typename T>
    const T* at(role k, int dt) const {
        return reinterpret_cast<const T*>(step_lines.at[static_cast<int>(k)] + dt * step_lines.step_bytes[static_cast<int>(k)]) + offset;
    }
    // Step t itself is always inside (dt = 0 is known after inlining: no test).
    bool shifted_inside(int dt) const { return dt == 0 || inside(t + dt); }
    template <typename Fill>
    PUFF_SIMD_INLINE V<C> values(role k, int dt, Fill fill) const {
        if (kEdge || !shifted_inside(dt)) {
            alignas(32) C x[W<C>] = {};
            for (int i = 0; i < lanes(); ++i) x[i] = shifted_inside(dt) ? at<C>(k, dt)[i] : fill(row + i);
            return simd::load<C>(x);
        }
        return simd::load<C>(at<C>(k, dt));
    }
    template <typename F>
    PUFF_SIMD_INLINE M<C> flags(role k, int dt) const {
        if (!shifted_inside(dt)) return M<C>{};
        if constexpr (kEdge) {
            F x[W<C>] = {};
            for (int i = 0; i < n; ++i) x[i] = at<F>(k, dt)[i];
            return simd::set_lanes<C>(x);
        }
        return simd::set_lanes<C>(at<F>(k, dt));
    }
    PUFF_SIMD_INLINE void store(role k, V<C> x) const {
        if (!present(k)) return;
        C* p = const_cast<C*>(at<C>(k, 0));
        if constexpr (kEdge) {
            for (int i = 0; i < n; ++i) p[i] = x[i];
        } else if (stream) {
            simd::stream<C>(p, x);
        } else {
            simd::store<C>(p, x);
        }
    }
};

/// The value at (row, t) of a float view, as C (any float dtype: the per-row
/// and element-read arrays are not staged by the converting sources).
template <typename C>
inline C element(const view& v, std::int64_t row, std::int64_t t) {
    if (v.type == dtype_of<C>) return *static_cast<const C*>(v.at(row, t));
    return load_one<C>(v, row, t);
}

/// `next` with bootstrap_values at the lanes whose `truncated` is set; a lane
/// also `terminated` is terminated (Gymnasium's meaning, issue 33): its bootstrap
/// is never read. Out of line in effect (rare): a scalar loop over the lanes.
template <typename C, typename Lanes>
PUFF_SIMD_INLINE V<C> bootstrap_truncated(const Lanes& lanes, V<C> next, M<C> truncated, M<C> terminated) {
    alignas(32) C x[W<C>];
    simd::store<C>(x, next);
    for (int i = 0; i < W<C>; ++i) {
        if (!truncated[i] || terminated[i]) continue;  // flagged both: terminated (issue 33)
        x[i] = element<C>(lanes.a[role::bootstrap_values], lanes.row_of(i), lanes.step_of(i));
    }
    return simd::load<C>(x);
}

/// A per-step scalar of a group of lanes (gamma_t or lambda_t at each lane's step):
/// the array of role k where the call has one, else `scalar`. kSteps is the
/// producer's compile-time choice: the scalar form reads no array and tests nothing.
template <typename C, bool kSteps, typename Lanes>
PUFF_SIMD_INLINE V<C> per_step(const Lanes& in, role k, V<C> scalar) {
    if constexpr (!kSteps) return scalar;
    else return in.present(k) ? in.values(k, 0, [](std::int64_t) { return C(0); }) : scalar;
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
