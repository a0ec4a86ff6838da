// CPU kernels of the estimator family beyond GAE / TD(lambda) / V-trace:
// discounted returns, Retrace, Q(lambda), episodic sums (kinds that are one
// first-order scan A_t = delta_t + k_t A_{t+1}, like the standard ones) and
// n-step returns (a window of n steps per output; windows longer than 64 steps
// and shorter than the row: one O(T) pass per row, run_long_windows).
// Definitions: conventions.hpp and docs/conventions.md.
//
// Two traversals, both over every dtype (lines converted into C scratch, or
// read in place when they already are contiguous C), so that the arithmetic is
// plain loops the compiler vectorises:
//   - blocks: a block of rows steps back through time together, one line of
//     rows per step. Serves every layout and n_step_returns; on time-major
//     [T, B] data the lines are contiguous. Lookaheads (Retrace's c_{t+1},
//     Q(lambda)'s greedy_{t+1}, V_{t+1}) are the later step's lines;
//     episodic_sum's forward scan runs on time-reversed views;
//   - tiles: rows whose steps are adjacent ([B, T]) are produced along time in
//     chunks, then 8 rows run the recurrence interleaved (their dependency chains
//     overlap); the lookahead is the next element. episodic_sum scans forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "conventions_cpu_family.hpp"
#include "conventions_cpu_lines.hpp"
#include "cpu_scan.hpp"  // PUFF_SIMD_CLONES
#include "cpu_threads.hpp"

namespace puffadv::detail {
namespace {

constexpr int kRows = 256;         // rows per block (one unit of thread work) at most
constexpr int kStridedRows = 64;   // ... where a step's rows are not adjacent: their cache lines stay in L1
constexpr std::int64_t kElementsPerThread = 1 << 15;
constexpr std::int64_t kWindowScratchBytes = 1 << 21;  // n_step_returns: the n lines of W per block

// The first (row, step) with terminated and truncated both set, across threads.
struct shared_bad_step {
    bad_step first;
    std::mutex lock;
    void keep(const bad_step& b) {
        if (b.row < 0) return;
        std::lock_guard<std::mutex> guard(lock);
        first.keep_first(b.row, b.step);
    }
};

// Scratch lines of one block, carved out of this thread's buffers (pointers, so
// that the loops do not look the thread-local storage up again at every use).
template <typename C>
struct block_lines {
    C *r, *term, *trunc, *boot, *acc, *out, *zeros, *values_end, *target, *behaviour;
    C *v[2], *term_keep[2], *next_factor[2];
    C* windows;  // n_step_returns: W_1 .. W_levels of the later step, `pitch` apart
    double* sums[3];
    std::int64_t pitch;
};

template <typename C>
block_lines<C> scratch_for(int rows, std::int64_t levels) {
    static thread_local std::vector<C> lines;
    static thread_local std::vector<double> sums;
    // Padded past a multiple of 4 KB: lines a power of two apart alias in the caches' low address bits.
    const std::int64_t pitch = (rows + 15) / 16 * 16 + 16;
    constexpr int kLines = 16;
    lines.resize(static_cast<std::size_t>(pitch * (kLines + levels)));
    sums.resize(static_cast<std::size_t>(3 * pitch));
    block_lines<C> b{};
    C* next = lines.data();
    auto take = [&] { C* line = next; next += pitch; return line; };
    b.r = take(), b.term = take(), b.trunc = take(), b.boot = take(), b.acc = take(), b.out = take();
    b.zeros = take(), b.values_end = take();
    b.target = take(), b.behaviour = take();
    for (int i = 0; i < 2; ++i) b.v[i] = take(), b.term_keep[i] = take(), b.next_factor[i] = take();
    b.windows = next;
    for (int i = 0; i < 3; ++i) b.sums[i] = sums.data() + i * pitch;
    b.pitch = pitch;
    return b;
}

// Stores n results of a line. Large outputs of type C with adjacent elements are
// streamed past the caches (non-temporal stores): they would not stay cached for
// whoever reads them next, and a normal store first reads each line it writes.
template <typename C>
void store_line(const view& out, std::int64_t row, std::int64_t t, std::int64_t stride, int n, const C* in,
                bool streaming) {
#if defined(__SSE2__)
    if (streaming && stride == 1 && out.type == dtype_of<C>) {
        C* p = static_cast<C*>(out.at(row, t));
        int j = 0;
        for (; j < n && reinterpret_cast<std::uintptr_t>(p + j) % 16 != 0; ++j) p[j] = in[j];
        if constexpr (sizeof(C) == 4)
            for (; j + 4 <= n; j += 4) _mm_stream_ps(p + j, _mm_loadu_ps(in + j));
        else
            for (; j + 2 <= n; j += 2) _mm_stream_pd(p + j, _mm_loadu_pd(in + j));
        for (; j < n; ++j) p[j] = in[j];
        return;
    }
#endif
    store<C>(out.type, out.at(row, t), stride, n, in);
}

// Loads one step's line of n rows from `first` on, converted to C.
template <typename C>
const C* step_line(const view& v, std::int64_t first, std::int64_t t, int n, C* buffer, bool flag) {
    return line_of<C>(v, first, t, v.row_stride, n, buffer, flag);
}

// The value V'_t after the buffer's last step: last_value, bootstrap_values[T-1], or 0 (discounted_returns).
template <typename C>
C value_after_end(const family_args<C>& a, std::int64_t row) {
    if (a.last_value.present) return load_one<C>(a.last_value, row, 0);
    if (a.bootstrap.present) return load_one<C>(a.bootstrap, row, a.horizon - 1);
    return C(0);
}

template <typename C>
bool is_window(const family_args<C>& a) {
    return a.kind == estimator::n_step_returns;
}

// Rows per block. Where a step's line of rows is contiguous (time-major [T, B]),
// long lines stream from memory and short ones wait on it (simd_block_rows);
// elsewhere each row of a block holds a cache line per array through the steps
// that share it, so blocks stay small enough for those lines to stay cached.
// n_step_returns keeps min(n, T) lines of W per row besides.
template <typename C>
int block_rows_of(const family_args<C>& a) {
    const std::int64_t rows = a.row_adjacent ? simd_block_rows(a.rows) : kStridedRows;
    if (!is_window(a)) return static_cast<int>(rows);
    const std::int64_t levels = std::max<std::int64_t>(1, std::min<std::int64_t>(a.n, a.horizon));
    const std::int64_t fit = kWindowScratchBytes / (levels * std::int64_t(sizeof(C)));
    return static_cast<int>(std::clamp<std::int64_t>(fit, 1, rows));
}

// A flag as 0 or 1 (non-zero, NaN included, is set), as load() converts flags.
// Integer masks: a float compare-and-select would need -fno-trapping-math to vectorise.
template <typename C>
inline C as_flag(C x) {
    using U = std::conditional_t<sizeof(C) == 4, std::uint32_t, std::uint64_t>;
    U bits, one;
    const C unit = C(1);
    std::memcpy(&bits, &x, sizeof bits);
    std::memcpy(&one, &unit, sizeof one);
    bits = one & ((bits << 1) == 0 ? U(0) : ~U(0));  // the shift drops the sign: -0 is clear
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// Asks for step t's contiguous lines of rows [first, first + n) ahead of their
// use: the hardware prefetcher restarts at every page of every step's line
// (see next_step_lines in conventions_cpu_simd_blocks.cpp).
template <typename C>
void prefetch_step(const family_args<C>& a, std::int64_t first, std::int64_t t, int n) {
    for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.next_values, &a.target, &a.behaviour}) {
        if (!v->present) continue;
        const char* line = static_cast<const char*>(v->at(first, t));
        const std::int64_t bytes = std::int64_t(n) * v->size;
        for (std::int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(line + at);
    }
}

// Q(lambda) is scanned in its returns, G_t = b_t + k_t G_{t+1} with k_t = gamma lambda_t where the
// trace goes on (not done, not the row's last step) and 0 where it stops, and
//     b_t = r_t + gamma (1 - lambda_t) nv_t          where the trace goes on,
//         = r_t + gamma (1 - term_t) nv_t            where it stops (done: 1 there);
// the advantages G_t - q_t come after the scan. The target does not read q (rlax's q_lambda:
// lambda-returns over max_a Q(s_{t+1}, a)), so a NaN q_t reaches A_t alone; the delta form
// (A_t over q_{t+1}) carried it into every earlier step of the row. Peng's lambda = 1 drops nv_t
// exactly, so float32 returns near 0 keep their accuracy beside next values of 1e3. Flags are 0 or 1.
template <typename C>
inline C q_lambda_base(C r, C nv, C term, C done, C gamma, C lambda_t) {
    const C stop = zero_where_set(term, gamma * nv);
    const C go = gamma * ((C(1) - lambda_t) * nv);
    return r + zero_where_set(C(1) - done, stop) + zero_where_set(done, go);
}

template <typename C>
PUFF_SIMD_CLONES bad_step run_block(const family_args<C>& a, std::int64_t first, int n) {
    const std::int64_t levels =
        is_window(a) ? std::max<std::int64_t>(1, std::min<std::int64_t>(a.n, a.horizon)) : 0;
    const block_lines<C> s = scratch_for<C>(n, levels);
    const std::int64_t pitch = s.pitch;
    bad_step bad;
    const C gamma = a.gamma, lambda = a.lambda;
    const bool sum = a.abs_sums.present || a.sums.present || a.square_sums.present;
    const bool bootstraps = a.kind == estimator::discounted_returns || a.kind == estimator::n_step_returns;
    const bool action_values = a.kind == estimator::retrace || a.kind == estimator::q_lambda;
    // Q(lambda) scans the returns G; q only enters A = G - q (stored, or summed).
    const bool scans_returns = a.kind == estimator::q_lambda;
    const bool reads_values =
        a.values.present && (!scans_returns || a.advantages.present || sum);
    const std::int64_t T = a.horizon;
    const bool raw_flags = a.terminated.type == dtype_of<C> && a.terminated.row_stride == 1;

    std::fill(s.zeros, s.zeros + n, C(0));
    for (int i = 0; i < 3; ++i) std::fill(s.sums[i], s.sums[i] + n, 0.0);
    // The carry A_{t+1} past the last step: 0, or episodic_sum's seed C_{-1}.
    if (a.kind == estimator::episodic_sum && a.last_value.present)
        for (int i = 0; i < n; ++i) s.acc[i] = load_one<C>(a.last_value, first + i, 0);
    else
        std::fill(s.acc, s.acc + n, C(0));
    if (bootstraps && T > 0)
        for (int i = 0; i < n; ++i) s.values_end[i] = value_after_end(a, first + i);

    // n_step_returns: W_j of the later step at windows[(j - 1) * pitch], j = 1 .. min(n, T).
    C* const windows = s.windows;

    const C* later_v = s.zeros;       // values at t + 1 (V_{t+1}, Q(lambda)'s q_{t+1})
    const C* later_term = s.zeros;    // terminated (dones) at t + 1
    const C* later_factor = s.zeros;  // Retrace's c_{t+1}, Q(lambda)'s greedy_{t+1}
    for (std::int64_t t = T - 1; t >= 0; --t) {
        const int k = static_cast<int>(t & 1);  // the line of step t must outlive step t - 1
        const bool last = t == T - 1;
        if (a.row_adjacent && t > 0) prefetch_step(a, first, t - 1, n);
        const C* r = step_line(a.rewards, first, t, n, s.r, false);
        // Flags of type C in adjacent rows are read in place, tested as they are used.
        const C* term = raw_flags ? static_cast<const C*>(a.terminated.at(first, t))
                                  : step_line(a.terminated, first, t, n, s.term_keep[k], true);
        const C* v = reads_values ? step_line(a.values, first, t, n, s.v[k], false) : s.zeros;
        const C* trunc = s.zeros;
        bool truncations = false;
        if (a.truncated.present) {
            trunc = step_line(a.truncated, first, t, n, s.trunc, true);
            if ((truncations = any_set(trunc, n))) {
                C both = 0;
                for (int i = 0; i < n; ++i) both += as_flag(term[i]) * trunc[i];
                if (both != C(0))
                    for (int i = 0; i < n; ++i)
                        if (as_flag(term[i]) != C(0) && trunc[i] != C(0)) {
                            bad.keep_first(first + i, t);
                            break;
                        }
            }
        }

        // The bootstrap of step t: next_values, or V'_t (V_{t+1}, patched at the end and at truncations).
        const C* boot;
        if (action_values) {
            boot = step_line(a.next_values, first, t, n, s.boot, false);
        } else if (bootstraps) {
            const C* next = last ? s.values_end : later_v;
            if (truncations) {
                std::copy(next, next + n, s.boot);
                for (int i = 0; i < n; ++i)
                    if (trunc[i] != C(0)) s.boot[i] = load_one<C>(a.bootstrap, first + i, t);
                boot = s.boot;
            } else {
                boot = next;
            }
        } else {
            boot = s.zeros;
        }

        // Each kind's delta_t and decay k_t, and the scan A_t = delta_t + k_t A_{t+1}, in one pass.
        // done = terminated | truncated (flags are exactly 0 or 1).
        C* __restrict acc = s.acc;
        switch (a.kind) {
            case estimator::discounted_returns:
                for (int i = 0; i < n; ++i) {
                    const C done = as_flag(term[i]) + trunc[i] - as_flag(term[i]) * trunc[i];
                    acc[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]) +
                             gamma * (C(1) - done) * acc[i];
                }
                break;
            case estimator::retrace: {
                // c_t = lambda min(c_clip, pi_t / mu_t), read by step t - 1.
                C* c = s.next_factor[k];
                const C* tp = step_line(a.target, first, t, n, s.target, false);
                const C* bp = step_line(a.behaviour, first, t, n, s.behaviour, false);
                const C c_clip = a.c_clip;
                if (a.log_probs)
                    for (int i = 0; i < n; ++i) c[i] = lambda * clip(C(std::exp(tp[i] - bp[i])), c_clip);
                else
                    for (int i = 0; i < n; ++i) c[i] = lambda * clip(tp[i] / bp[i], c_clip);
                for (int i = 0; i < n; ++i) {
                    const C done = as_flag(term[i]) + trunc[i] - as_flag(term[i]) * trunc[i];
                    acc[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]) - v[i] +
                             zero_where_set(done, gamma * later_factor[i]) * acc[i];
                }
                later_factor = c;
                break;
            }
            case estimator::q_lambda: {
                // acc holds G (q_lambda_base); lambda_t = lambda greedy_{t+1} (Peng: lambda);
                // the trace past the row's end is cut.
                if (last) {
                    for (int i = 0; i < n; ++i)
                        acc[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]);
                } else {
                    for (int i = 0; i < n; ++i) {
                        const C done = as_flag(term[i]) + trunc[i] - as_flag(term[i]) * trunc[i];
                        const C lambda_t = lambda * later_factor[i];
                        acc[i] = q_lambda_base(r[i], boot[i], as_flag(term[i]), done, gamma, lambda_t) +
                                 zero_where_set(done, gamma * lambda_t) * acc[i];
                    }
                }
                if (a.greedy.present) {
                    later_factor = step_line(a.greedy, first, t, n, s.next_factor[k], true);
                } else {
                    std::fill(s.next_factor[k], s.next_factor[k] + n, C(1));
                    later_factor = s.next_factor[k];
                }
                break;
            }
            case estimator::episodic_sum: {
                // Time runs backwards here: the step after t is the caller's t - 1.
                const C kappa = gamma * lambda;
                const C* reset = a.reset_at_start ? term : later_term;
                for (int i = 0; i < n; ++i) acc[i] = r[i] + kappa * (C(1) - as_flag(reset[i])) * acc[i];
                break;
            }
            case estimator::n_step_returns: {
                // W1 = r + gamma (1 - term) V'; Wj = W1 + gamma lambda (1 - done) (W(j-1)_{t+1} - V'),
                // the window cut at episode ends and at the row's end.
                const C gl = gamma * lambda;
                for (int j = static_cast<int>(levels) - 1; j >= 1; --j) {
                    C* __restrict w = windows + std::int64_t(j) * pitch;
                    const C* __restrict w_later = windows + std::int64_t(j - 1) * pitch;
                    if (last)
                        for (int i = 0; i < n; ++i)
                            w[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]);
                    else
                        for (int i = 0; i < n; ++i) {
                            const C done = as_flag(term[i]) + trunc[i] - as_flag(term[i]) * trunc[i];
                            w[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]) +
                                   zero_where_set(done, gl * (w_later[i] - boot[i]));
                        }
                }
                for (int i = 0; i < n; ++i)
                    windows[i] = r[i] + zero_where_set(as_flag(term[i]), gamma * boot[i]);
                const C* g = windows + (levels - 1) * pitch;
                for (int i = 0; i < n; ++i) acc[i] = g[i] - v[i];
                break;
            }
            default: break;
        }

        // A_t and the returns: the scan is A (returns A + V), or Q(lambda)'s G (A = G - q).
        const C* adv = s.acc;
        const C* ret = s.acc;
        if (is_window(a)) {
            ret = windows + (levels - 1) * pitch;  // G^(n) itself, not (G - V) + V
        } else if (scans_returns) {
            if (reads_values) {
                for (int i = 0; i < n; ++i) s.out[i] = s.acc[i] - v[i];
                adv = s.out;
            }
        } else if (a.returns.present && a.values.present) {
            for (int i = 0; i < n; ++i) s.out[i] = s.acc[i] + v[i];
            ret = s.out;
        }
        if (a.advantages.present)
            store_line<C>(a.advantages, first, t, a.advantages.row_stride, n, adv, a.streaming);
        if (a.returns.present) store_line<C>(a.returns, first, t, a.returns.row_stride, n, ret, a.streaming);
        if (sum)
            for (int i = 0; i < n; ++i) {
                const double x = adv[i];
                s.sums[0][i] += std::fabs(x), s.sums[1][i] += x, s.sums[2][i] += x * x;
            }
        later_v = v;
        later_term = term;
    }
    if (sum)
        for (int i = 0; i < n; ++i) {
            const double triple[3] = {s.sums[0][i], s.sums[1][i], s.sums[2][i]};
            write_row_sums(a, first + i, triple);
        }
    return bad;
}

// ---- time-contiguous rows ([B, T]): tiles of rows, chunks of steps ----
//
// Each row's chunk of steps is produced along time (contiguous loads, the
// lookahead one index on), then the tile's rows run the recurrence interleaved
// so that their dependency chains overlap. n_step_returns keeps the block path.

constexpr int kTileRows = 8;
constexpr int kChunkSteps = 256;
constexpr std::int64_t kTilePitch = kChunkSteps + 16;  // padded against 4K aliasing
// n_step_returns takes the tiles for n up to this: a chunk's window then fits a scratch line.
constexpr int kTileWindow = 16;

template <typename C>
bool tile_serves(const family_args<C>& a) {
    if (a.horizon < 2 || (is_window(a) && a.n > kTileWindow)) return false;
    for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.next_values, &a.target,
                          &a.behaviour, &a.greedy, &a.advantages, &a.returns})
        if (v->present && v->col_stride != 1 && v->col_stride != -1) return false;
    return true;
}

// Steps [t, t + count) of one row into `buffer` (always a copy: the caller patches it).
template <typename C>
C* copy_along(const view& v, std::int64_t row, std::int64_t t, int count, C* buffer, bool flag) {
    load<C>(v.type, v.at(row, t), v.col_stride, count, buffer, flag);
    return buffer;
}

template <typename C>
const C* line_along(const view& v, std::int64_t row, std::int64_t t, int count, C* buffer, bool flag) {
    return line_of<C>(v, row, t, v.col_stride, count, buffer, flag);
}

// Backward (A_t from A_{t+1}) or, for episodic_sum, forward (C_t from C_{t-1}).
template <typename C, int R, bool kForward>
void recur_rows(int n, const C* delta, const C* decay, C* out, C* carry) {
    C acc[R];
    for (int q = 0; q < R; ++q) acc[q] = carry[q];
    for (int i = 0; i < n; ++i) {
        const int j = kForward ? i : n - 1 - i;
        for (int q = 0; q < R; ++q) {
            acc[q] = delta[q * kTilePitch + j] + decay[q * kTilePitch + j] * acc[q];
            out[q * kTilePitch + j] = acc[q];
        }
    }
    for (int q = 0; q < R; ++q) carry[q] = acc[q];
}

template <typename C, bool kForward>
void recur_any(int rows, int n, const C* delta, const C* decay, C* out, C* carry) {
    switch (rows) {
        case 8: return recur_rows<C, 8, kForward>(n, delta, decay, out, carry);
        case 7: return recur_rows<C, 7, kForward>(n, delta, decay, out, carry);
        case 6: return recur_rows<C, 6, kForward>(n, delta, decay, out, carry);
        case 5: return recur_rows<C, 5, kForward>(n, delta, decay, out, carry);
        case 4: return recur_rows<C, 4, kForward>(n, delta, decay, out, carry);
        case 3: return recur_rows<C, 3, kForward>(n, delta, decay, out, carry);
        case 2: return recur_rows<C, 2, kForward>(n, delta, decay, out, carry);
        default: return recur_rows<C, 1, kForward>(n, delta, decay, out, carry);
    }
}
static_assert(kTileRows == 8, "recur_any unrolls up to 8 rows");

// delta and decay of steps [lo, lo + n) of one row; `values` receives V_t for the returns.
template <typename C>
PUFF_SIMD_CLONES void produce_along_time(const family_args<C>& a, std::int64_t row, std::int64_t lo, int n,
                                         C* tmp, C* delta, C* decay, C* values, bad_step& bad) {
    const C gamma = a.gamma, lambda = a.lambda;
    const bool at_end = lo + n == a.horizon;
    const int ahead = at_end ? n : n + 1;  // the chunk's steps and, inside the buffer, the one after
    C* const r_buf = tmp;
    C* const term_buf = tmp + kTilePitch;
    C* const trunc_buf = tmp + 2 * kTilePitch;
    C* const done = tmp + 3 * kTilePitch;
    C* const boot = tmp + 4 * kTilePitch;
    C* const later = tmp + 5 * kTilePitch;   // the lookahead line: c, greedy or dones, at [0, n]
    C* const t_buf = tmp + 7 * kTilePitch;
    C* const b_buf = tmp + 8 * kTilePitch;
    C* const v_buf = tmp + 9 * kTilePitch;
    const C* r = line_along(a.rewards, row, lo, n, r_buf, false);
    if (a.kind == estimator::episodic_sum) {
        // Forward, in the caller's time order: reset_t = dones_{t-1} (none before step 0), or dones_t.
        const C kappa = gamma * lambda;
        const C* reset;
        if (a.reset_at_start) {
            reset = line_along(a.terminated, row, lo, n, term_buf, true);
        } else if (lo == 0) {
            term_buf[0] = C(0);
            copy_along(a.terminated, row, 0, n - 1, term_buf + 1, true);
            reset = term_buf;
        } else {
            reset = line_along(a.terminated, row, lo - 1, n, term_buf, true);
        }
        for (int j = 0; j < n; ++j) {
            delta[j] = r[j];
            decay[j] = kappa * (C(1) - reset[j]);
        }
        return;
    }
    C* term = copy_along(a.terminated, row, lo, n, term_buf, true);
    const C* trunc = nullptr;
    if (a.truncated.present) {
        trunc = line_along(a.truncated, row, lo, n, trunc_buf, true);
        if (any_set(trunc, n)) {
            C both = 0;
            for (int j = 0; j < n; ++j) both += term[j] * trunc[j];
            if (both != C(0))
                for (int j = 0; j < n; ++j)
                    if (term[j] != C(0) && trunc[j] != C(0)) {
                        bad.keep_first(row, lo + j);
                        break;
                    }
        } else {
            trunc = nullptr;
        }
    }
    if (trunc)
        for (int j = 0; j < n; ++j) done[j] = term[j] + trunc[j] - term[j] * trunc[j];
    else
        std::copy(term, term + n, done);
    if (at_end) done[n - 1] = C(1);  // nothing follows the last step

    // Q(lambda)'s scan (of G) does not read q: only `values`, for A = G - q, does.
    const bool reads_values = a.values.present && (a.kind != estimator::q_lambda || values);
    const C* v = reads_values ? line_along(a.values, row, lo, n, v_buf, false) : nullptr;
    if (values && v) std::copy(v, v + n, values);
    switch (a.kind) {
        case estimator::discounted_returns: {
            // B_t: 0 inside the buffer, the bootstrap at truncations and after the last step.
            std::fill(boot, boot + n, C(0));
            if (trunc)
                for (int j = 0; j < n; ++j)
                    if (trunc[j] != C(0)) boot[j] = load_one<C>(a.bootstrap, row, lo + j);
            if (at_end && !(trunc && trunc[n - 1] != C(0))) boot[n - 1] = value_after_end(a, row);
            for (int j = 0; j < n; ++j) {
                delta[j] = r[j] + zero_where_set(term[j], gamma * boot[j]);
                decay[j] = gamma * (C(1) - done[j]);
            }
            break;
        }
        case estimator::retrace: {
            const C* nv = line_along(a.next_values, row, lo, n, boot, false);
            const C* tp = line_along(a.target, row, lo, ahead, t_buf, false);
            const C* bp = line_along(a.behaviour, row, lo, ahead, b_buf, false);
            const C c_clip = a.c_clip;
            if (a.log_probs)
                for (int j = 0; j < ahead; ++j) later[j] = lambda * clip(C(std::exp(tp[j] - bp[j])), c_clip);
            else
                for (int j = 0; j < ahead; ++j) later[j] = lambda * clip(tp[j] / bp[j], c_clip);
            if (at_end) later[n] = C(0);
            for (int j = 0; j < n; ++j) {
                delta[j] = r[j] + zero_where_set(term[j], gamma * nv[j]) - v[j];
                decay[j] = zero_where_set(done[j], gamma * later[j + 1]);
            }
            break;
        }
        case estimator::q_lambda: {
            // The scan of G (q_lambda_base): delta = b_t, decay = k_t.
            const C* nv = line_along(a.next_values, row, lo, n, boot, false);
            if (a.greedy.present)
                copy_along(a.greedy, row, lo, ahead, later, true);
            else
                std::fill(later, later + ahead, C(1));
            if (at_end) later[n] = C(0);
            for (int j = 0; j < n; ++j) {
                const C lambda_t = lambda * later[j + 1];
                delta[j] = q_lambda_base(r[j], nv[j], term[j], done[j], gamma, lambda_t);
                decay[j] = zero_where_set(done[j], gamma * lambda_t);
            }
            break;
        }
        default: break;
    }
}

// n_step_returns for steps [lo, lo + n) of one row: the returns G^(n) into `g`, A = G - V into `adv`.
// Wj_s = W1_s + gamma lambda (1 - done_s) (W(j-1)_{s+1} - V'_s), updated in place level by level
// over the chunk and the n - 1 steps after it; a wrong W at the far edge moves one step per
// level towards the chunk and never reaches it.
template <typename C>
PUFF_SIMD_CLONES void window_along_time(const family_args<C>& a, std::int64_t row, std::int64_t lo, int n,
                                        C* tmp, C* g, C* adv, bad_step& bad) {
    const C gamma = a.gamma, gl = a.gamma * a.lambda;
    const int levels = static_cast<int>(std::min<std::int64_t>(a.n, a.horizon));
    const std::int64_t end = std::min<std::int64_t>(a.horizon, lo + n + levels - 1);  // steps read: [lo, end)
    const int m = static_cast<int>(end - lo);
    C* const term = tmp;
    C* const trunc = tmp + kTilePitch;
    C* const cut = tmp + 2 * kTilePitch;
    C* const boot = tmp + 3 * kTilePitch;
    C* const e = tmp + 4 * kTilePitch;
    C* const w = tmp + 5 * kTilePitch;
    C* const r_buf = tmp + 6 * kTilePitch;
    C* const v_buf = tmp + 7 * kTilePitch;
    const C* r = line_along(a.rewards, row, lo, m, r_buf, false);
    copy_along(a.terminated, row, lo, m, term, true);
    bool truncations = false;
    if (a.truncated.present) {
        copy_along(a.truncated, row, lo, m, trunc, true);
        truncations = any_set(trunc, m);
    }
    for (int j = 0; j < m; ++j) cut[j] = truncations ? term[j] + trunc[j] - term[j] * trunc[j] : term[j];
    if (truncations)
        for (int j = 0; j < n; ++j)
            if (term[j] != C(0) && trunc[j] != C(0)) {
                bad.keep_first(row, lo + j);
                break;
            }
    // V'_s: V_{s+1}, the bootstrap after the last step and at truncations.
    const bool at_end = end == a.horizon;
    copy_along(a.values, row, lo + 1, at_end ? m - 1 : m, boot, false);
    if (at_end) {
        boot[m - 1] = value_after_end(a, row);
        cut[m - 1] = C(1);
    }
    if (truncations)
        for (int j = 0; j < m; ++j)
            if (trunc[j] != C(0)) boot[j] = load_one<C>(a.bootstrap, row, lo + j);
    for (int j = 0; j < m; ++j) w[j] = e[j] = r[j] + zero_where_set(term[j], gamma * boot[j]);
    for (int level = 2; level <= levels; ++level)
        for (int j = 0; j + 1 < m; ++j) w[j] = e[j] + zero_where_set(cut[j], gl * (w[j + 1] - boot[j]));
    const C* v = line_along(a.values, row, lo, n, v_buf, false);
    for (int j = 0; j < n; ++j) {
        g[j] = w[j];
        adv[j] = w[j] - v[j];
    }
}

template <typename C>
PUFF_SIMD_CLONES bad_step run_tile(const family_args<C>& a, std::int64_t first, int count) {
    static thread_local std::vector<C> buffer;
    buffer.resize(static_cast<std::size_t>(kTilePitch * (4 * kTileRows + 10)));
    C* const delta = buffer.data();
    C* const decay = delta + kTileRows * kTilePitch;
    C* const out = decay + kTileRows * kTilePitch;
    C* const values = out + kTileRows * kTilePitch;
    C* const tmp = values + kTileRows * kTilePitch;
    C* const ret = tmp;  // the epilogue's returns line reuses the temporaries
    bad_step bad;
    const bool sum = a.abs_sums.present || a.sums.present || a.square_sums.present;
    // The scan is A (returns A + V), or Q(lambda)'s G (A = G - q, wanted for the advantages and sums).
    const bool scans_returns = a.kind == estimator::q_lambda;
    const bool keep_values = a.values.present && (scans_returns ? a.advantages.present || sum : a.returns.present);
    C carry[kTileRows] = {};
    if (a.kind == estimator::episodic_sum && a.last_value.present)
        for (int q = 0; q < count; ++q) carry[q] = load_one<C>(a.last_value, first + q, 0);
    double sums[kTileRows][3] = {};
    const bool forward = a.kind == estimator::episodic_sum;
    // Rows are stored in short pieces here, and streaming them past the caches cost
    // more than it saved (65536x128 f32 discounted returns, one thread: 16-17 ms
    // streamed, 8.7-9.8 unstreamed).
    const bool streaming = false;
    const std::int64_t chunks = (a.horizon + kChunkSteps - 1) / kChunkSteps;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
        // Backward scans take the chunks from the end; the forward one from the start.
        const std::int64_t lo = forward ? chunk * kChunkSteps
                                        : std::max<std::int64_t>(0, a.horizon - (chunk + 1) * kChunkSteps);
        const std::int64_t hi = forward ? std::min<std::int64_t>(a.horizon, lo + kChunkSteps)
                                        : a.horizon - chunk * kChunkSteps;
        const int n = static_cast<int>(hi - lo);
        if (is_window(a)) {  // G^(n) into `delta`'s lines, A into `out`
            for (int q = 0; q < count; ++q)
                window_along_time(a, first + q, lo, n, tmp, delta + q * kTilePitch, out + q * kTilePitch, bad);
        } else {
            for (int q = 0; q < count; ++q)
                produce_along_time(a, first + q, lo, n, tmp, delta + q * kTilePitch, decay + q * kTilePitch,
                                   keep_values ? values + q * kTilePitch : nullptr, bad);
            if (forward)
                recur_any<C, true>(count, n, delta, decay, out, carry);
            else
                recur_any<C, false>(count, n, delta, decay, out, carry);
        }
        for (int q = 0; q < count; ++q) {
            const std::int64_t row = first + q;
            const C* adv = out + q * kTilePitch;
            const C* g = adv;
            const C* v = values + q * kTilePitch;
            if (is_window(a)) {
                g = delta + q * kTilePitch;  // G^(n) itself, not (G - V) + V
            } else if (scans_returns) {
                if (keep_values) {
                    for (int j = 0; j < n; ++j) ret[j] = g[j] - v[j];
                    adv = ret;
                }
            } else if (keep_values) {
                for (int j = 0; j < n; ++j) ret[j] = adv[j] + v[j];
                g = ret;
            }
            if (a.advantages.present)
                store_line<C>(a.advantages, row, lo, a.advantages.col_stride, n, adv, streaming);
            if (a.returns.present) store_line<C>(a.returns, row, lo, a.returns.col_stride, n, g, streaming);
            if (sum) {
                double s_abs = 0, s = 0, s_sq = 0;
                for (int j = 0; j < n; ++j) {
                    const double x = adv[j];
                    s_abs += std::fabs(x), s += x, s_sq += x * x;
                }
                sums[q][0] += s_abs, sums[q][1] += s, sums[q][2] += s_sq;
            }
        }
    }
    if (sum)
        for (int q = 0; q < count; ++q) write_row_sums(a, first + q, sums[q]);
    return bad;
}

// ---- n_step_returns with 64 < n < T: O(T) per row ----
//
// The window code costs O(T min(n, T)) per row (n = 10^5 on rows of 131072 steps: minutes). For
// long windows each row is one backward pass instead, over the TD(lambda) return Lambda (the
// n >= T result) and D_t = Lambda_t - W1_t = gamma lambda (1 - done_t) (Lambda_{t+1} - V'_t)
// (0 at the row's last step). Lambda - Wj obeys the same decay as Lambda, so
//     G^(n)_t = Lambda_t - (gamma lambda)^(n - 1) D_{t+n-1}  where no step in [t, t+n-2] is done
//                                                            and t + n - 1 < T,
//             = Lambda_t                                     otherwise (the window is cut).
// In double: in float32 the subtraction cancels when gamma lambda is near 1. One difference from
// the window: a NaN or inf past the window but inside the episode reaches G_t (through Lambda_t
// and D_{t+n-1}); it stays in its row.
constexpr std::int64_t kLongWindow = kFamilySimdWindow;  // windows longer than this take the O(T) pass
constexpr int kLongChunk = 512;              // steps loaded, produced and stored at a time

template <typename C>
bool is_long_window(const family_args<C>& a) {
    return is_window(a) && a.n > kLongWindow && a.n < a.horizon;
}

// Rows [first, first + count), one at a time; scratch: D (T doubles) and a few chunk lines,
// released on return.
template <typename C>
bad_step run_long_windows(const family_args<C>& a, std::int64_t first, std::int64_t count) {
    const std::int64_t T = a.horizon;
    const double gamma = double(a.gamma), gl = double(a.gamma) * double(a.lambda);
    // (gamma lambda)^(n - 1); 0 when it underflows (a cut window then, as in double arithmetic).
    const double decay = std::pow(gl, double(a.n - 1));
    const bool sum = a.abs_sums.present || a.sums.present || a.square_sums.present;
    std::vector<double> d(static_cast<std::size_t>(T));
    std::vector<C> lines(static_cast<std::size_t>(6 * kLongChunk));
    C* const r_buf = lines.data();
    C* const v_buf = r_buf + kLongChunk;
    C* const term = v_buf + kLongChunk;
    C* const trunc = term + kLongChunk;
    C* const g = trunc + kLongChunk;
    C* const adv = g + kLongChunk;
    bad_step bad;
    for (std::int64_t row = first; row < first + count; ++row) {
        double lambda_later = 0;         // Lambda_{t+1}
        double v_later = 0;              // V_{t+1}
        std::int64_t next_done = T;      // the first done step at or after t (T: none)
        double sums[3] = {0, 0, 0};
        for (std::int64_t hi = T; hi > 0; hi -= kLongChunk) {
            const std::int64_t lo = std::max<std::int64_t>(0, hi - kLongChunk);
            const int m = static_cast<int>(hi - lo);
            const C* r = line_along(a.rewards, row, lo, m, r_buf, false);
            const C* v = line_along(a.values, row, lo, m, v_buf, false);
            copy_along(a.terminated, row, lo, m, term, true);
            if (a.truncated.present)
                copy_along(a.truncated, row, lo, m, trunc, true);
            else
                std::fill(trunc, trunc + m, C(0));
            for (int j = m - 1; j >= 0; --j) {
                const std::int64_t t = lo + j;
                const bool terminated = term[j] != C(0), truncated = trunc[j] != C(0);
                if (terminated && truncated) bad.keep_first(row, t);
                // V'_t: V_{t+1} inside the row, the bootstrap at truncations and after the last step.
                double boot;
                if (truncated)
                    boot = double(load_one<C>(a.bootstrap, row, t));
                else if (t == T - 1)
                    boot = double(value_after_end(a, row));
                else
                    boot = v_later;
                // A terminated step never reads V' (a NaN there stays out), nor a done one Lambda_{t+1}.
                const double w1 = double(r[j]) + (terminated ? 0.0 : gamma * boot);
                const double dt = (terminated || truncated || t == T - 1) ? 0.0 : gl * (lambda_later - boot);
                const double lambda_t = w1 + dt;
                d[static_cast<std::size_t>(t)] = dt;
                if (terminated || truncated) next_done = t;
                const std::int64_t far = t + a.n - 1;  // the window's last step
                double gt = lambda_t;
                if (far < T && next_done >= far && decay != 0.0) gt -= decay * d[static_cast<std::size_t>(far)];
                g[j] = C(gt);
                adv[j] = C(gt - double(v[j]));
                lambda_later = lambda_t;
                v_later = double(v[j]);
            }
            if (a.advantages.present) store_line<C>(a.advantages, row, lo, a.advantages.col_stride, m, adv, false);
            if (a.returns.present) store_line<C>(a.returns, row, lo, a.returns.col_stride, m, g, false);
            if (sum)
                for (int j = 0; j < m; ++j) {
                    const double x = adv[j];
                    sums[0] += std::fabs(x), sums[1] += x, sums[2] += x * x;
                }
        }
        if (sum) write_row_sums(a, row, sums);
    }
    return bad;
}

// The view of the same data with time reversed: step t reads the caller's T - 1 - t.
void reverse_time(view& v, std::int64_t horizon) {
    if (!v.present || horizon == 0) return;
    v.base += (horizon - 1) * v.col_stride * v.size;
    v.col_stride = -v.col_stride;
}

[[noreturn]] void throw_both_set(const bad_step& first) {
    throw value_error("terminated and truncated are both set at row " + std::to_string(first.row) + ", step " +
                      std::to_string(first.step) +
                      " (in [rows, horizon] order); a step ends its episode one way or the other");
}

template <typename C>
void run_family(const standard_arrays& a, const standard_params& p) {
    family_args<C> k{};
    k.kind = p.kind;
    k.rows = a.rewards.rows;
    k.horizon = a.rewards.cols;
    k.rewards = view_of(a.rewards);
    k.values = view_of(a.values);
    k.terminated = view_of(a.terminated);
    k.truncated = view_of(a.truncated);
    k.last_value = view_of(a.last_value);
    k.bootstrap = view_of(a.bootstrap_values);
    k.next_values = view_of(a.next_values);
    k.target = view_of(a.target_probs);
    k.behaviour = view_of(a.behaviour_probs);
    k.greedy = view_of(a.greedy);
    k.advantages = view_of(a.advantages);
    k.returns = view_of(a.fused.returns);
    k.abs_sums = view_of(a.fused.abs_sums);
    k.sums = view_of(a.fused.sums);
    k.square_sums = view_of(a.fused.square_sums);
    k.gamma = C(p.gamma);
    k.lambda = C(p.lambda);
    k.c_clip = C(p.c_clip);
    k.log_probs = p.log_probs;
    k.reset_at_start = p.reset_at_start;
    k.n = p.n;
    k.row_adjacent = true;
    for (const view* v : {&k.rewards, &k.values, &k.terminated, &k.truncated, &k.next_values, &k.target,
                          &k.behaviour, &k.greedy, &k.advantages, &k.returns})
        if (v->present && v->row_stride != 1) k.row_adjacent = false;
    const std::int64_t output_bytes = k.rows * k.horizon * dtype_size(a.rewards.type) *
                                      ((a.advantages ? 1 : 0) + (a.fused.returns ? 1 : 0));
    k.streaming = output_bytes >= kStreamingBytes;
    // The one-pass SIMD kernels serve the common calls: time-contiguous rows whole, row-adjacent
    // blocks in whole vectors of rows (the rest of a block takes the general kernel).
    const bool simd_rows = family_simd_serves(k, true);
    const bool simd_blocks = !simd_rows && family_simd_serves(k, false);
    k.simd_stream = (simd_rows || simd_blocks) && family_simd_streams(k, simd_rows);
    // The general kernels; the block path runs episodic_sum's forward scan backwards over
    // time-reversed views.
    const bool along_time = simd_rows || tile_serves(k);
    family_args<C> general = k;
    if (general.kind == estimator::episodic_sum && !along_time)
        for (view* v : {&general.rewards, &general.terminated, &general.advantages, &general.returns})
            reverse_time(*v, general.horizon);

    shared_bad_step bad;
    if (is_long_window(k)) {  // whole rows per thread, in O(T) each
        const std::int64_t by_work = std::max<std::int64_t>(1, k.rows * k.horizon / kElementsPerThread);
        const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), k.rows, by_work}));
        parallel_ranges(threads, k.rows, [&](std::int64_t begin, std::int64_t end) {
            bad.keep(run_long_windows(k, begin, end - begin));
        });
        if (bad.first.row >= 0) throw_both_set(bad.first);
        return;
    }
    const std::int64_t unit = simd_rows ? kSimdTileRows : along_time ? kTileRows : block_rows_of(k);
    const std::int64_t units = (k.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, k.rows * k.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    // Backward scans of time-contiguous rows take the mirror image of their units: a thread's rows
    // are then one descending stream (conventions_cpu_simd.cpp).
    const bool mirror = simd_rows && k.kind != estimator::episodic_sum;
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            const int count = static_cast<int>(std::min<std::int64_t>(unit, k.rows - first));
            if (simd_rows) {
                bad.keep(family_simd_rows(k, mirror ? k.rows - first - count : first, count));
            } else if (simd_blocks) {
                const int whole = count - count % family_simd_width<C>;
                bad.keep(family_simd_block(k, first, whole));
                if (whole < count) bad.keep(run_block(general, first + whole, count - whole));
            } else {
                bad.keep(along_time ? run_tile(general, first, count) : run_block(general, first, count));
            }
#if defined(__SSE2__)
            if (k.streaming) _mm_sfence();  // the streamed stores are seen before the call returns
#endif
        }
    });
    if (bad.first.row >= 0) throw_both_set(bad.first);
}

}  // namespace

bool is_family_kind(estimator kind) noexcept {
    return kind != estimator::gae && kind != estimator::td_lambda && kind != estimator::vtrace;
}

void family_estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    // n >= T: every window runs to its episode's or the row's end, where G^(n) is the TD(lambda)
    // return (FAMILY.md 4): one O(T) scan instead of the O(T min(n, T)) window (minutes on long rows).
    if (params.kind == estimator::n_step_returns && params.n >= arrays.rewards.cols) {
        standard_params td = params;
        td.kind = estimator::td_lambda;
        return standard_estimate_cpu(arrays, td);
    }
    if (arrays.rewards.type == dtype::float64)
        run_family<double>(arrays, params);
    else
        run_family<float>(arrays, params);
}

}  // namespace puffadv::detail
