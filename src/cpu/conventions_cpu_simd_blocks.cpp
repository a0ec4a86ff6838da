// One-pass SIMD kernel of the standard conventions for data whose rows are
// adjacent (time-major [T, B] arrays, time_axis=0, as CleanRL and SB3 store
// rollouts): a block of rows steps back through time, W rows per vector, each
// lane its own recurrence A_t = delta_t + k_t A_{t+1} with the carries in a
// scratch line, so no scan is needed. Which calls it serves, and the producer,
// as conventions_cpu_simd.cpp.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/conventions_simd.hpp"

namespace puffadv::detail {
namespace simd_kernels {
namespace {

// Where W rows' sums of |A|, A and A^2 accumulate; null: not wanted.
struct row_sums {
    double *abs = nullptr, *sum = nullptr, *square = nullptr;
};

// W rows from `row` at step t; pointers are at (row, t) (the caller's memory or
// padded copies of the block's last rows).
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_INLINE void rows_step(const kernel_args<C>& a, const coefficients<C>& k, std::int64_t row,
                                std::int64_t t, const C* r, const C* v, const C* v_next, const F* term,
                                const F* trunc, const C* imp, C* carry, C* adv, C* ret, bool stream,
                                const row_sums& sums, bad_step& bad) {
    const V<C> values = simd::load<C>(v);
    V<C> next = simd::load<C>(v_next);
    const M<C> terminated = simd::set_lanes<C>(term);
    M<C> done = terminated;
    if (trunc) {
        const M<C> truncated = simd::set_lanes<C>(trunc);
        if (simd::any_lane<C>(truncated)) {
            next = bootstrap_truncated<C, F>(a, next, trunc, term, row, 1, t, 0, bad);
            done |= truncated;
        }
    }
    const maps<C> m = produce<C, kImp, kPg>(k, simd::load<C>(r), values, next, terminated, done,
                                            kImp ? simd::load<C>(imp) : k.one);
    const V<C> later = simd::load<C>(carry);  // A_{t+1}
    const V<C> advantage = m.delta + m.decay * later;
    simd::store<C>(carry, advantage);
    const V<C> out = kPg ? m.q + m.p * later : advantage;
    store_output(stream, adv, out);
    store_output(stream, ret, advantage + values);
    if (sums.abs) simd::add_to_lanes(out, sums.abs, sums.sum, sums.square);
}

// The last n - full < W rows of a block at step t, through copies padded with
// zeros (pointers at (first, t)). Out of line (rows that are no multiple of W
// only), so compiled once for the baseline; no vector crosses the call.
template <typename C, typename F, bool kImp, bool kPg>
__attribute__((noinline)) void padded_rows_step(const kernel_args<C>& a, const coefficients<C>& k,
                                                std::int64_t first, int full, int n, std::int64_t t, const C* r,
                                                const C* v, const C* v_next, const F* term, const F* trunc,
                                                const C* imp, C* carry, C* adv, C* ret, const row_sums& sums,
                                                bad_step& bad) {
    const int rest = n - full;
    alignas(32) C r_pad[W<C>] = {}, v_pad[W<C>] = {}, vn_pad[W<C>] = {}, imp_pad[W<C>] = {};
    alignas(32) C adv_pad[W<C>], ret_pad[W<C>];
    F term_pad[W<C>] = {}, trunc_pad[W<C>] = {};
    std::copy(r + full, r + n, r_pad);
    std::copy(v + full, v + n, v_pad);
    std::copy(v_next + full, v_next + n, vn_pad);
    std::copy(term + full, term + n, term_pad);
    if (trunc) std::copy(trunc + full, trunc + n, trunc_pad);
    if (kImp) std::copy(imp + full, imp + n, imp_pad);
    rows_step<C, F, kImp, kPg>(a, k, first + full, t, r_pad, v_pad, vn_pad, term_pad, trunc ? trunc_pad : nullptr,
                               imp_pad, carry + full, adv ? adv_pad : nullptr, ret ? ret_pad : nullptr, false,
                               sums, bad);
    if (adv) std::copy(adv_pad, adv_pad + rest, adv + full);
    if (ret) std::copy(ret_pad, ret_pad + rest, ret + full);
}

// Scratch of a block, per thread and arithmetic type, grown to the largest
// block seen: the carries A_{t+1}, the end values V'_{H-1} and the row sums.
template <typename C>
struct block_scratch {
    std::vector<C> carry, end_values;
    std::vector<double> sums;
};

template <typename C>
block_scratch<C>& scratch_for(int n, bool sums) {
    static thread_local block_scratch<C> s;
    if (s.carry.size() < std::size_t(n) + W<C>) {  // + W: the padded remainder's lanes
        s.carry.resize(n + W<C>);
        s.end_values.resize(n + W<C>);
    }
    if (sums && s.sums.size() < 3 * (std::size_t(n) + W<C>)) s.sums.resize(3 * (n + W<C>));
    return s;
}

template <typename C>
constexpr int kLineElements = 64 / sizeof(C);  // a cache line

// The lines of step t - 1, prefetched one cache line ahead of the reads and
// writes of step t: beside them, the hardware prefetcher restarted at every
// page of every step's line. 65536x128 f32 time-major GAE, one thread, 8192-row
// blocks: 8.0 -> 6.4 ms (4096 rows: 8.8 -> 6.4; 16384: 7.1 -> 6.3).
struct next_step_lines {
    const char *rewards = nullptr, *values = nullptr, *flags = nullptr, *importance = nullptr;
    char *advantages = nullptr, *returns = nullptr;
    int flag_size = 0;

    template <typename C>
    next_step_lines(const kernel_args<C>& a, std::int64_t first, std::int64_t t) {
        if (t == 0) return;
        auto line = [&](const view& v) { return v.present ? static_cast<char*>(v.at(first, t - 1)) : nullptr; };
        rewards = line(a.rewards), values = line(a.values), flags = line(a.dones);
        importance = line(a.importance);
        if (!a.stream) advantages = line(a.advantages), returns = line(a.returns);  // streamed: no line to fetch
        flag_size = a.dones.size;
    }
    /// Element i of every line, C being the float type (called once per cache line of
    /// floats: byte flags get their lines four times, truncations none).
    template <typename C>
    PUFF_SIMD_INLINE void prefetch(std::int64_t i) const {
        if (!rewards) return;
        const std::int64_t at = i * std::int64_t(sizeof(C));
        __builtin_prefetch(rewards + at);
        __builtin_prefetch(values + at);
        __builtin_prefetch(flags + i * flag_size);
        if (importance) __builtin_prefetch(importance + at);
        if (advantages) __builtin_prefetch(advantages + at, 1);
        if (returns) __builtin_prefetch(returns + at, 1);
    }
};

// Rows [first, first + n) step back through time together: at each step the
// block's rows are adjacent, read as long runs (the blocks are large for that:
// simd_block_rows).
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_CLONES bad_step rows_across_time(const kernel_args<C>& a, std::int64_t first, int n) {
    const coefficients<C> k = splat_coefficients(a);
    const bool want_sums = wants_sums(a.abs_sums, a.sums, a.square_sums);
    block_scratch<C>& scratch = scratch_for<C>(n, want_sums);
    C* const carry = scratch.carry.data();  // hoisted: a thread_local's address was re-derived per vector
    C* const end_values = scratch.end_values.data();
    const std::size_t pitch = std::size_t(n) + W<C>;
    double* const sums = want_sums ? scratch.sums.data() : nullptr;
    auto sums_at = [&](int i) {
        return sums ? row_sums{sums + i, sums + pitch + i, sums + 2 * pitch + i} : row_sums{};
    };
    const int full = n - n % W<C>;  // rows in whole vectors; the rest go through padded copies
    const bool stream = a.stream;
    bad_step bad;
    std::fill(carry, carry + pitch, C(0));
    if (a.horizon > 0)
        for (int i = 0; i < n; ++i) end_values[i] = value_after_end(a, first + i);
    if (sums) std::fill(sums, sums + 3 * pitch, 0.0);
    for (std::int64_t t = a.horizon - 1; t >= 0; --t) {
        const C* r = at<C>(a.rewards, first, t);
        const C* v = at<C>(a.values, first, t);
        const C* v_next = t + 1 < a.horizon ? at<C>(a.values, first, t + 1) : end_values;
        const F* term = static_cast<const F*>(a.dones.at(first, t));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(first, t)) : nullptr;
        const C* imp = kImp ? at<C>(a.importance, first, t) : nullptr;
        C* adv = out_at<C>(a.advantages, first, t);
        C* ret = out_at<C>(a.returns, first, t);
        const next_step_lines ahead(a, first, t);
        for (int i = 0; i < full; i += W<C>) {
            if (i % kLineElements<C> == 0) ahead.prefetch<C>(i);
            rows_step<C, F, kImp, kPg>(a, k, first + i, t, r + i, v + i, v_next + i, term + i,
                                       trunc ? trunc + i : nullptr, imp + (kImp ? i : 0), carry + i,
                                       adv ? adv + i : nullptr, ret ? ret + i : nullptr, stream, sums_at(i), bad);
        }
        if (full < n)
            padded_rows_step<C, F, kImp, kPg>(a, k, first, full, n, t, r, v, v_next, term, trunc, imp, carry, adv,
                                              ret, sums_at(full), bad);
    }
    if (sums)
        for (int i = 0; i < n; ++i) {
            const double totals[3] = {sums[i], sums[pitch + i], sums[2 * pitch + i]};
            write_row_sums(a, first + i, totals);
        }
    if (stream) simd::fence();
    return bad;
}

template <typename C, typename F, bool kImp, bool kPg>
struct across_time {
    static bad_step run(const kernel_args<C>& a, std::int64_t first, int count) {
        return rows_across_time<C, F, kImp, kPg>(a, first, count);
    }
};

}  // namespace
}  // namespace simd_kernels

template <typename C>
bad_step standard_simd_block(const kernel_args<C>& a, std::int64_t first, int count) {
    return simd_kernels::dispatch<C, simd_kernels::across_time>(a, first, count);
}

template bad_step standard_simd_block(const kernel_args<float>&, std::int64_t, int);
template bad_step standard_simd_block(const kernel_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
