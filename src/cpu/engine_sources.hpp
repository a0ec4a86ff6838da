// Where the engine's traversals (engine_traversals.hpp) read their lines: a
// source hands a traversal the lines of a row (along_time: row(), row_done())
// or of a step of a block of rows (across_rows: step(), step_done()).
//   - call_lines: the call's memory itself (float arrays of the arithmetic type
//     C, flags of C or one byte, in the traversal's layout): no copy.
//   - converting_lines: every other call (16-bit floats, mixed flag types,
//     strides of neither layout): each input line is loaded converted to C into
//     a scratch line (flags as 0/1, the puff advantage's dones as values), the
//     producer reads the scratch lines through the same lanes, and the outputs
//     are converted back from theirs. Lines that need no conversion (of type C,
//     or byte flags read as bytes, adjacent along the traversal) are read in
//     place. One producer and epilogue per estimator then serves every dtype
//     and layout; only the lines differ.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

struct next_step_lines;  // engine_traversals.hpp

/// The call's own memory. The lines of (row, t) from those of (0, 0), worked out
/// once per unit: a unit of short rows asks for one per row.
struct call_lines {
    const arrays& a;
    lines origin;                    // (0, 0)
    int present[role_count], count = 0;
    std::int64_t row_bytes[role_count];

    explicit call_lines(const arrays& arrays_) : a(arrays_), origin(arrays_, 0, 0) {
        for (int k = 0; k < role_count; ++k)
            if (origin.at[k]) present[count] = k, row_bytes[count++] = a.by_role[k].row_stride * a.by_role[k].size;
    }
    bool streams() const { return a.walk.stream; }
    PUFF_SIMD_INLINE lines at(std::int64_t r, std::int64_t t) const {
        lines l = origin;
        for (int j = 0; j < count; ++j) {
            const int k = present[j];
            l.at[k] = origin.at[k] + r * row_bytes[j] + t * origin.step_bytes[k];
        }
        return l;
    }
    PUFF_SIMD_INLINE lines row(std::int64_t r) const { return at(r, 0); }
    void row_done(std::int64_t) const {}
    /// The lines a traversal across rows starts from and hands to step(): the
    /// absent roles' null addresses and every role's step_bytes stay as they are.
    lines start_lines() const { return origin; }
    /// Step t of the block at row `first`, into l: only the present roles' addresses
    /// change. Rewriting a traversal's lines rather than returning a fresh copy: the
    /// copy (a rep movsq of 320 bytes per step) was most of the time of a narrow block
    /// (2048x16 f32 time-major GAE, one thread, 2026-12-04: 120 us against 34 batch-major).
    PUFF_SIMD_INLINE void step(lines& l, std::int64_t first, int, std::int64_t t, bool) const {
        for (int j = 0; j < count; ++j) {
            const int k = present[j];
            l.at[k] = origin.at[k] + first * row_bytes[j] + t * origin.step_bytes[k];
        }
    }
    void step_done(std::int64_t, int, std::int64_t) const {}
    template <typename Ahead = next_step_lines>
    Ahead ahead(std::int64_t first, std::int64_t t, int rows) const { return Ahead(a, first, t, rows); }
};

/// The roles a converting source loads as flags (0 or 1): terminated, truncated,
/// greedy and sample_mask, but for the puff advantage, whose dones are used arithmetically.
inline bool loads_as_flag(role r, bool arithmetic_dones) {
    return (r == role::terminated && !arithmetic_dones) || r == role::truncated || r == role::greedy ||
           r == role::sample_mask;
}

/// Converted copies of the lines, in scratch of this thread (grown to the
/// largest unit seen). Along time: a whole row per line (horizon elements);
/// across rows: two lines per role (step t, and the step read beside it).
template <typename C>
struct converting_lines {
    const arrays& a;
    bool arithmetic_dones, across;
    C* line[role_count] = {};          // the scratch line of a converted role
    bool in_place[role_count] = {};    // a role read in the call's memory
    std::int64_t pitch = 0;            // elements from one line to the next of a role (across rows)

    /// `elements`: the longest line (the horizon along time, the block's rows across);
    /// `flag_bytes`: the producer reads flags of one byte (all of them are, adjacent).
    converting_lines(const arrays& arrays_, bool arithmetic_dones_, bool flag_bytes, std::int64_t elements,
                     bool across_)
        : a(arrays_), arithmetic_dones(arithmetic_dones_), across(across_) {
        static thread_local std::vector<C> scratch;
        pitch = (elements + W<C> + 15) / 16 * 16 + 16;  // padded: lines a power of two apart alias in L1
        const std::int64_t per_role = across ? 2 * pitch : pitch;
        int count = 0;
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            if (!v.present || !is_line(role(k))) continue;
            const bool adjacent = across ? v.row_stride == 1 || a.rows <= 1 : v.col_stride == 1 || a.horizon <= 1;
            const bool flag = loads_as_flag(role(k), arithmetic_dones);
            in_place[k] = adjacent && (flag && flag_bytes ? byte_flags(v.type) : v.type == dtype_of<C>);
            count += !in_place[k];
        }
        if (scratch.size() < std::size_t(count * per_role)) scratch.resize(std::size_t(count * per_role));
        C* next = scratch.data();
        for (int k = 0; k < role_count; ++k)
            if (a.by_role[k].present && is_line(role(k)) && !in_place[k]) line[k] = next, next += per_role;
    }
    bool streams() const { return false; }

    PUFF_SIMD_INLINE lines row(std::int64_t r) const {
        lines l;
        const int T = static_cast<int>(a.horizon);
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            l.at[k] = in_place[k] ? static_cast<const char*>(v.at(r, 0)) : reinterpret_cast<const char*>(line[k]);
            l.step_bytes[k] = v.col_stride * v.size;  // unused along time
            if (line[k] && !is_output(role(k)))
                load<C>(v.type, v.at(r, 0), v.col_stride, T, line[k], loads_as_flag(role(k), arithmetic_dones));
        }
        return l;
    }
    PUFF_SIMD_INLINE void row_done(std::int64_t r) const {
        for (role k : {role::advantages, role::returns}) {
            const view& v = a[k];
            if (line[int(k)]) store<C>(v.type, v.at(r, 0), v.col_stride, static_cast<int>(a.horizon), line[int(k)]);
        }
    }

    lines start_lines() const { return lines{}; }  // step() writes every role's entries
    // Step t's lines sit at line[k] + (t & 1) * pitch: the step read beside it (t + 1
    // backwards, t - 1 forwards), loaded the step before, is the other one, which the
    // lanes reach as at + dt * step_bytes.
    PUFF_SIMD_INLINE void step(lines& l, std::int64_t first, int n, std::int64_t t, bool forward) const {
        const std::int64_t here = (t & 1) * pitch;
        const std::int64_t beside = (forward ? -1 : 1) * ((t & 1) ? -pitch : pitch);
        for (int k = 0; k < role_count; ++k) {
            const view& v = a.by_role[k];
            if (in_place[k]) {
                l.at[k] = static_cast<const char*>(v.at(first, t));
                l.step_bytes[k] = v.col_stride * v.size;
                continue;
            }
            l.at[k] = line[k] ? reinterpret_cast<const char*>(line[k] + here) : nullptr;
            l.step_bytes[k] = beside * std::int64_t(sizeof(C));
            if (line[k] && !is_output(role(k)))
                load<C>(v.type, v.at(first, t), v.row_stride, n, line[k] + here,
                        loads_as_flag(role(k), arithmetic_dones));
        }
    }
    PUFF_SIMD_INLINE void step_done(std::int64_t first, int n, std::int64_t t) const {
        const std::int64_t here = (t & 1) * pitch;
        for (role k : {role::advantages, role::returns}) {
            const view& v = a[k];
            if (line[int(k)]) store<C>(v.type, v.at(first, t), v.row_stride, n, line[int(k)] + here);
        }
    }
    template <typename Ahead = next_step_lines>
    Ahead ahead(std::int64_t, std::int64_t, int) const { return Ahead(); }  // the loads above stream
};

}  // namespace puffadv::detail::engine
