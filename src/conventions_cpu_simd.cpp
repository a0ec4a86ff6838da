// One-pass SIMD kernels of the standard conventions (GAE, TD(lambda), V-trace)
// for the calls most code makes: float32 or float64 arrays, flags of that type
// or bool/uint8, every [rows, horizon] array with its steps adjacent ([B, T])
// or its rows adjacent ([T, B], time_axis=0). Everything else takes the general
// kernels of conventions_cpu.cpp, which convert lines into scratch first.
//
// Each input is loaded once into vector registers and each output stored once,
// as in the puff kernel (advantage_cpu.cpp): no scratch lines, no flag
// conversion pass, no copy of the next values. The producer is the general
// kernels' formula, lane for lane:
//   V'_t    = V_{t+1}, or the end value / bootstrap value (truncations are rare:
//             a branch per block, not a stream)
//   delta_t = rho_t (r_t + gamma V'_t [+0 where terminated, even for NaN] - V_t)
//   k_t     = gamma lambda c_t (1 - done_t)
//   pg_t    = rho_pg_t (r_t + gamma V'_t - V_t) + gamma rho_pg_t (1 - done_t) A_{t+1}
// Time-contiguous rows scan W steps in registers (cpu_scan.hpp) and chain the
// blocks; row-adjacent data steps W rows at a time through time, no scan.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conventions_cpu.hpp"
#include "cpu_scan.hpp"

// The vectors never cross a non-inlined call boundary (cpu_scan.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace puffadv::detail {
namespace {

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

bool wants_sums(const view& abs_sums, const view& sums, const view& square_sums) {
    return abs_sums.present || sums.present || square_sums.present;
}

template <typename C>
void write_sums(const kernel_args<C>& a, std::int64_t row, const double* totals) {
    const view* outs[3] = {&a.abs_sums, &a.sums, &a.square_sums};
    for (int i = 0; i < 3; ++i) {
        if (!outs[i]->present) continue;
        void* p = outs[i]->at(row, 0);
        if (outs[i]->type == dtype::float64)
            *static_cast<double*>(p) = totals[i];
        else
            *static_cast<float*>(p) = static_cast<float>(totals[i]);
    }
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

// V' where truncated: lanes of `truncated` take bootstrap_values at (rows[i], steps[i]).
// Also finds a step both terminated and truncated (an error the caller reports).
template <typename C>
PUFF_SIMD_INLINE V<C> bootstrap_truncated(const kernel_args<C>& a, V<C> v_next, M<C> truncated,
                                          M<C> terminated, std::int64_t row, std::int64_t row_step,
                                          std::int64_t t, std::int64_t t_step, bad_step& bad) {
    alignas(32) C patched[W<C>];
    simd::store<C>(patched, v_next);
    for (int i = 0; i < W<C>; ++i) {
        if (!truncated[i]) continue;
        patched[i] = *at<C>(a.bootstrap, row + i * row_step, t + i * t_step);
        if (terminated[i]) bad.keep_first(row + i * row_step, t + i * t_step);
    }
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

// ---- time-contiguous rows: W steps per vector, scanned in registers ----

// The W steps from t of one row; pointers are at step t (the caller's memory or
// a padded copy of the top block). `chained` is A_{t+W} on entry, A_t on exit.
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_INLINE void steps_block(const kernel_args<C>& a, const coefficients<C>& k, std::int64_t row,
                                  std::int64_t t, const C* r, const C* v, V<C> v_next, const F* term,
                                  const F* trunc, const C* imp, V<C>& chained, C* adv, C* ret, bool stream,
                                  simd::double_sums* sums, bad_step& bad) {
    const V<C> values = simd::load<C>(v);
    const M<C> terminated = simd::set_lanes<C>(term);
    M<C> done = terminated;
    if (trunc) {
        const M<C> truncated = simd::set_lanes<C>(trunc);
        if (simd::any_lane<C>(truncated)) {
            v_next = bootstrap_truncated<C>(a, v_next, truncated, terminated, row, 0, t, 1, bad);
            done |= truncated;
        }
    }
    maps<C> m = produce<C, kImp, kPg>(k, simd::load<C>(r), values, v_next, terminated, done,
                                      kImp ? simd::load<C>(imp) : k.one);
    simd::reverse_scan<C>(m.delta, m.decay);
    const V<C> advantage = m.delta + m.decay * chained;  // A_t .. A_{t+W-1}
    V<C> out = advantage;
    if (kPg) out = m.q + m.p * simd::shift_in<C>(advantage, chained);  // needs A_{t+1} .. A_{t+W}
    chained = simd::broadcast_first<C>(advantage);
    store_output(stream, adv, out);
    store_output(stream, ret, advantage + values);
    if (sums) sums->add(out);
}

// The top block of a row, steps [t, horizon): fewer than W steps, or W whose
// last V' is the end value. Partial blocks go through copies padded with
// terminated steps of zeros, whose maps are exactly 0 and leave A_{horizon} = 0.
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_INLINE void top_block(const kernel_args<C>& a, const coefficients<C>& k, std::int64_t row,
                                std::int64_t t, int n, const C* r, const C* v, const F* term, const F* trunc,
                                const C* imp, C end, V<C>& chained, C* adv, C* ret, bool stream,
                                simd::double_sums* sums, bad_step& bad) {
    if (n == W<C>) {
        const V<C> v_next = simd::shift_in<C>(simd::load<C>(v), simd::splat<C>(end));
        return steps_block<C, F, kImp, kPg>(a, k, row, t, r, v, v_next, term, trunc, imp, chained, adv, ret,
                                            stream, sums, bad);
    }
    alignas(32) C r_pad[W<C>] = {}, v_pad[W<C>] = {}, vn_pad[W<C>] = {}, imp_pad[W<C>] = {};
    alignas(32) C adv_pad[W<C>], ret_pad[W<C>];
    F term_pad[W<C>], trunc_pad[W<C>] = {};
    std::fill(term_pad, term_pad + W<C>, F(1));
    std::copy(r, r + n, r_pad);
    std::copy(v, v + n, v_pad);
    std::copy(v + 1, v + n, vn_pad);
    vn_pad[n - 1] = end;
    std::copy(term, term + n, term_pad);
    if (trunc) std::copy(trunc, trunc + n, trunc_pad);
    if (kImp) std::copy(imp, imp + n, imp_pad);
    // The padding's lanes come out +0 and add nothing to the sums.
    steps_block<C, F, kImp, kPg>(a, k, row, t, r_pad, v_pad, simd::load<C>(vn_pad), term_pad,
                                 trunc ? trunc_pad : nullptr, imp_pad, chained, adv ? adv_pad : nullptr,
                                 ret ? ret_pad : nullptr, false, sums, bad);
    if (adv) std::copy(adv_pad, adv_pad + n, adv);
    if (ret) std::copy(ret_pad, ret_pad + n, ret);
}

// Rows are walked in descending order, each from its last step down, so each
// array is read as one descending stream (the prefetcher's best case; see
// advantage_cpu.cpp).
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_CLONES bad_step rows_along_time(const kernel_args<C>& a, std::int64_t first, int count) {
    const coefficients<C> k = splat_coefficients(a);
    const bool want_sums = wants_sums(a.abs_sums, a.sums, a.square_sums);
    const std::int64_t horizon = a.horizon;
    const int top = static_cast<int>((horizon - 1) % W<C>) + 1;  // steps in the top block: 1 .. W
    const bool stream = a.stream;
    bad_step bad;
    if (horizon == 0) {  // nothing to estimate, but the row sums are written: zeros
        const double zeros[3] = {0, 0, 0};
        if (want_sums)
            for (std::int64_t row = first; row < first + count; ++row) write_sums(a, row, zeros);
        return bad;
    }
    for (std::int64_t row = first + count - 1; row >= first; --row) {
        const C* r = at<C>(a.rewards, row, 0);
        const C* v = at<C>(a.values, row, 0);
        const F* term = static_cast<const F*>(a.dones.at(row, 0));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(row, 0)) : nullptr;
        const C* imp = kImp ? at<C>(a.importance, row, 0) : nullptr;
        C* adv = out_at<C>(a.advantages, row, 0);
        C* ret = out_at<C>(a.returns, row, 0);
        if (trunc && row > 0) {  // the next row's truncations
            const char* boot = static_cast<const char*>(a.bootstrap.at(row - 1, 0));
            const std::int64_t stride = a.bootstrap.col_stride * a.bootstrap.size;
            prefetch_bootstraps<C, F>(static_cast<const F*>(a.truncated.at(row - 1, 0)), horizon, boot, stride);
        }
        simd::double_sums sums;
        simd::double_sums* sums_or_null = want_sums ? &sums : nullptr;
        V<C> chained = simd::splat<C>(C(0));  // A_horizon
        std::int64_t t = horizon - top;
        top_block<C, F, kImp, kPg>(a, k, row, t, top, r + t, v + t, term + t, trunc ? trunc + t : nullptr,
                                   imp + (kImp ? t : 0), value_after_end(a, row), chained,
                                   adv ? adv + t : nullptr, ret ? ret + t : nullptr, stream, sums_or_null, bad);
        for (t -= W<C>; t >= 0; t -= W<C>)
            steps_block<C, F, kImp, kPg>(a, k, row, t, r + t, v + t, simd::load<C>(v + t + 1), term + t,
                                         trunc ? trunc + t : nullptr, imp + (kImp ? t : 0), chained,
                                         adv ? adv + t : nullptr, ret ? ret + t : nullptr, stream, sums_or_null,
                                         bad);
        if (want_sums) {
            double totals[3] = {0, 0, 0};
            sums.total_into(totals);
            write_sums(a, row, totals);
        }
    }
    if (stream) simd::fence();
    return bad;
}

// ---- row-adjacent data: W rows per vector, stepping back through time ----

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
            next = bootstrap_truncated<C>(a, next, truncated, terminated, row, 1, t, 0, bad);
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
        if (full < n) {
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
            rows_step<C, F, kImp, kPg>(a, k, first + full, t, r_pad, v_pad, vn_pad, term_pad,
                                       trunc ? trunc_pad : nullptr, imp_pad, carry + full,
                                       adv ? adv_pad : nullptr, ret ? ret_pad : nullptr, false, sums_at(full), bad);
            if (adv) std::copy(adv_pad, adv_pad + rest, adv + full);
            if (ret) std::copy(ret_pad, ret_pad + rest, ret + full);
        }
    }
    if (sums)
        for (int i = 0; i < n; ++i) {
            const double totals[3] = {sums[i], sums[pitch + i], sums[2 * pitch + i]};
            write_sums(a, first + i, totals);
        }
    if (stream) simd::fence();
    return bad;
}

// ---- dispatch on what the call has ----

template <typename C>
using kernel = bad_step (*)(const kernel_args<C>&, std::int64_t, int);

template <typename C, typename F, bool kImp, bool kPg>
bad_step along(const kernel_args<C>& a, std::int64_t first, int count) {
    return rows_along_time<C, F, kImp, kPg>(a, first, count);
}
template <typename C, typename F, bool kImp, bool kPg>
bad_step across(const kernel_args<C>& a, std::int64_t first, int count) {
    return rows_across_time<C, F, kImp, kPg>(a, first, count);
}

bool byte_flags(dtype t) { return t == dtype::uint8 || t == dtype::boolean; }

template <typename C, typename F, bool kAlong>
bad_step run_with_flags(const kernel_args<C>& a, std::int64_t first, int count) {
    static constexpr kernel<C> table[2][4] = {
        {along<C, F, false, false>, along<C, F, false, true>, along<C, F, true, false>, along<C, F, true, true>},
        {across<C, F, false, false>, across<C, F, false, true>, across<C, F, true, false>,
         across<C, F, true, true>}};
    return table[kAlong ? 0 : 1][(a.importance.present ? 2 : 0) + (a.pg ? 1 : 0)](a, first, count);
}

template <typename C, bool kAlong>
bad_step run(const kernel_args<C>& a, std::int64_t first, int count) {
    if (byte_flags(a.dones.type)) return run_with_flags<C, std::uint8_t, kAlong>(a, first, count);
    return run_with_flags<C, C, kAlong>(a, first, count);
}

}  // namespace

template <typename C>
bool standard_simd_serves(const kernel_args<C>& a, bool time_contiguous) {
    constexpr dtype own = sizeof(C) == 8 ? dtype::float64 : dtype::float32;
    if (a.kind != producer::standard || a.values.type != own) return false;
    for (const view* v : {&a.rewards, &a.last_value, &a.bootstrap, &a.importance, &a.advantages, &a.returns})
        if (v->present && v->type != own) return false;
    const bool bytes = byte_flags(a.dones.type);
    if (!bytes && a.dones.type != own) return false;
    if (a.truncated.present && byte_flags(a.truncated.type) != bytes) return false;
    if (a.truncated.present && !bytes && a.truncated.type != own) return false;
    // The layout each traversal loads vectors along; bootstrap and last_value are read per element.
    for (const view* v : {&a.values, &a.rewards, &a.dones, &a.truncated, &a.importance, &a.advantages,
                          &a.returns}) {
        if (!v->present) continue;
        if (time_contiguous ? v->col_stride != 1 && a.horizon > 1 : v->row_stride != 1 && a.rows > 1)
            return false;
    }
    return true;
}

template <typename C>
bool standard_simd_streams(const kernel_args<C>& a, bool time_contiguous) {
    std::int64_t bytes = 0;
    for (const view* v : {&a.advantages, &a.returns}) {
        if (!v->present) continue;
        const std::int64_t outer = (time_contiguous ? v->row_stride : v->col_stride) * v->size;
        if (reinterpret_cast<std::uintptr_t>(v->base) % 16 != 0 || outer % 16 != 0) return false;
        bytes += a.rows * a.horizon * v->size;
    }
    return bytes >= kStreamingBytes;
}

template <typename C>
bad_step standard_simd_rows(const kernel_args<C>& a, std::int64_t first, int count) {
    return run<C, true>(a, first, count);
}

template <typename C>
bad_step standard_simd_block(const kernel_args<C>& a, std::int64_t first, int count) {
    return run<C, false>(a, first, count);
}

template bool standard_simd_serves(const kernel_args<float>&, bool);
template bool standard_simd_serves(const kernel_args<double>&, bool);
template bool standard_simd_streams(const kernel_args<float>&, bool);
template bool standard_simd_streams(const kernel_args<double>&, bool);
template bad_step standard_simd_rows(const kernel_args<float>&, std::int64_t, int);
template bad_step standard_simd_rows(const kernel_args<double>&, std::int64_t, int);
template bad_step standard_simd_block(const kernel_args<float>&, std::int64_t, int);
template bad_step standard_simd_block(const kernel_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
