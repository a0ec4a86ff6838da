// Where the engine's traversals (engine_traversals.hpp) read their lines: a
// source hands a traversal the lines of a row (along_time: row(), row_done())
// or of a step of a block of rows (across_rows: step(), step_done()).
//   - call_lines: the call's memory itself (float arrays of the arithmetic type
//     C, flags of C or one byte, in the traversal's layout): no copy.
//   - converting_lines: every other call (16-bit floats, mixed flag types,
//     strides of neither layout): each input line is loaded converted to C into
//     a scratch line (flags as 0/1, the puff advantage's dones as values), the
//     producer reads the scratch lines through the same lanes, and the outputs
//     are converted back from theirs. One producer and epilogue per estimator
//     then serves every dtype and layout; only the lines differ.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/engine.hpp"

namespace puffadv::detail::engine {

struct next_step_lines;  // engine_traversals.hpp

/// The call's own memory.
struct call_lines {
    const arrays& a;
    bool streams() const { return a.stream; }
    lines row(std::int64_t r) const { return lines(a, r, 0); }
    void row_done(std::int64_t) const {}
    lines step(std::int64_t first, int, std::int64_t t, bool) const { return lines(a, first, t); }
    void step_done(std::int64_t, int, std::int64_t) const {}
    template <typename Ahead = next_step_lines>
    Ahead ahead(std::int64_t first, std::int64_t t) const { return Ahead(a, first, t); }
};

/// The roles a converting source loads as flags (0 or 1): terminated, truncated
/// and greedy, but for the puff advantage, whose dones are used arithmetically.
inline bool loads_as_flag(role r, bool arithmetic_dones) {
    return (r == role::terminated && !arithmetic_dones) || r == role::truncated || r == role::greedy;
}

/// Converted copies of the lines, in scratch of this thread (grown to the
/// largest unit seen). Along time: a whole row per line (horizon elements);
/// across rows: two lines per role (step t, and the step read beside it).
template <typename C>
struct converting_lines {
    const arrays& a;
    bool arithmetic_dones;
    C* line[role_count] = {};  // null: the role is not a present line
    std::int64_t pitch = 0;    // elements from one line to the next of a role (across rows)

    /// `elements`: the longest line (the horizon along time, the block's rows across).
    converting_lines(const arrays& arrays_, bool arithmetic_dones_, std::int64_t elements, bool across)
        : a(arrays_), arithmetic_dones(arithmetic_dones_) {
        static thread_local std::vector<C> scratch;
        pitch = (elements + W<C> + 15) / 16 * 16 + 16;  // padded: lines a power of two apart alias in L1
        const std::int64_t per_role = across ? 2 * pitch : pitch;
        int count = 0;
        for (int k = 0; k < role_count; ++k) count += a.by_role[k].present && is_line(role(k));
        if (scratch.size() < std::size_t(count * per_role)) scratch.resize(std::size_t(count * per_role));
        C* next = scratch.data();
        for (int k = 0; k < role_count; ++k)
            if (a.by_role[k].present && is_line(role(k))) line[k] = next, next += per_role;
    }
    bool streams() const { return false; }

    lines row(std::int64_t r) const {
        lines l;
        const int T = static_cast<int>(a.horizon);
        for (int k = 0; k < role_count; ++k) {
            l.at[k] = reinterpret_cast<const char*>(line[k]);
            l.step_bytes[k] = sizeof(C);
            const view& v = a.by_role[k];
            if (line[k] && !is_output(role(k)))
                load<C>(v.type, v.at(r, 0), v.col_stride, T, line[k], loads_as_flag(role(k), arithmetic_dones));
        }
        return l;
    }
    void row_done(std::int64_t r) const {
        for (role k : {role::advantages, role::returns}) {
            const view& v = a[k];
            if (line[int(k)]) store<C>(v.type, v.at(r, 0), v.col_stride, static_cast<int>(a.horizon), line[int(k)]);
        }
    }

    // Step t's lines sit at line[k] + (t & 1) * pitch: the step read beside it (t + 1
    // backwards, t - 1 forwards), loaded the step before, is the other one, which the
    // lanes reach as at + dt * step_bytes.
    lines step(std::int64_t first, int n, std::int64_t t, bool forward) const {
        lines l;
        const std::int64_t here = (t & 1) * pitch;
        const std::int64_t beside = (forward ? -1 : 1) * ((t & 1) ? -pitch : pitch);
        for (int k = 0; k < role_count; ++k) {
            l.at[k] = line[k] ? reinterpret_cast<const char*>(line[k] + here) : nullptr;
            l.step_bytes[k] = beside * std::int64_t(sizeof(C));
            const view& v = a.by_role[k];
            if (line[k] && !is_output(role(k)))
                load<C>(v.type, v.at(first, t), v.row_stride, n, line[k] + here,
                        loads_as_flag(role(k), arithmetic_dones));
        }
        return l;
    }
    void step_done(std::int64_t first, int n, std::int64_t t) const {
        const std::int64_t here = (t & 1) * pitch;
        for (role k : {role::advantages, role::returns}) {
            const view& v = a[k];
            if (line[int(k)]) store<C>(v.type, v.at(first, t), v.row_stride, n, line[int(k)] + here);
        }
    }
    template <typename Ahead = next_step_lines>
    Ahead ahead(std::int64_t, std::int64_t) const { return Ahead(); }  // the loads above stream
};

}  // namespace puffadv::detail::engine
