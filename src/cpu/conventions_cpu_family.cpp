// CPU kernels of the estimator family beyond GAE / TD(lambda) / V-trace:
// discounted returns, Retrace, Q(lambda), episodic sums (kinds that are one
// first-order scan A_t = delta_t + k_t A_{t+1}, like the standard ones) and
// n-step returns (a window of n steps per output; windows longer than 64 steps
// and shorter than the row: one O(T) pass per row, family_long_windows).
// Definitions: conventions.hpp and docs/conventions.md.
//
// The calls most code makes (float32/float64 data, flags of that type or
// bool/uint8, [B, T] or [T, B]) take the CPU engine (advantage_cpu.cpp), and
// n_step_returns' [T, B] windows n_step_windows_simd.cpp. The rest take two
// general traversals over every dtype (lines converted into C scratch, or read
// in place when they already are contiguous C), so that the arithmetic is plain
// loops the compiler vectorises:
//   - blocks (here): a block of rows steps back through time together, one line
//     of rows per step. Serves every layout and n_step_returns; on time-major
//     [T, B] data the lines are contiguous. Lookaheads (Retrace's c_{t+1},
//     Q(lambda)'s greedy_{t+1}, V_{t+1}) are the later step's lines;
//     episodic_sum's forward scan runs on time-reversed views;
//   - tiles (conventions_cpu_family_tiles.cpp): rows whose steps are adjacent
//     ([B, T]) are produced along time in chunks, then 8 rows run the recurrence
//     interleaved (their dependency chains overlap); the lookahead is the next
//     element. episodic_sum scans forward.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <mutex>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>  // _mm_sfence
#endif

#include "core/backends.hpp"  // estimate_cpu: n >= T runs as TD(lambda)
#include "cpu/conventions_cpu_family_lines.hpp"
#include "cpu/cpu_scan.hpp"  // PUFF_SIMD_CLONES
#include "cpu/cpu_threads.hpp"

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

// Loads one step's line of n rows from `first` on, converted to C.
template <typename C>
const C* step_line(const view& v, std::int64_t first, std::int64_t t, int n, C* buffer, bool flag) {
    return line_of<C>(v, first, t, v.row_stride, n, buffer, flag);
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

// Asks for step t's contiguous lines of rows [first, first + n) ahead of their
// use: the hardware prefetcher restarts at every page of every step's line
// (see next_step_lines in engine_traversals.hpp).
template <typename C>
void prefetch_step(const family_args<C>& a, std::int64_t first, std::int64_t t, int n) {
    for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.next_values, &a.target, &a.behaviour}) {
        if (!v->present) continue;
        const char* line = static_cast<const char*>(v->at(first, t));
        const std::int64_t bytes = std::int64_t(n) * v->size;
        for (std::int64_t at = 0; at < bytes; at += 64) __builtin_prefetch(line + at);
    }
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

// The view of the same data with time reversed: step t reads the caller's T - 1 - t.
void reverse_time(view& v, std::int64_t horizon) {
    if (!v.present || horizon == 0) return;
    v.base += (horizon - 1) * v.col_stride * v.size;
    v.col_stride = -v.col_stride;
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
    k.streaming = output_bytes >= kStreamingBytes &&
                  !outputs_share_page_lines({&k.advantages, &k.returns},
                                            {&k.rewards, &k.values, &k.terminated, &k.truncated, &k.next_values,
                                             &k.target, &k.behaviour, &k.greedy});
    // n_step_returns' SIMD windows serve row-adjacent float32/float64 blocks in whole vectors of
    // rows (the rest of a block takes the general kernel). The other kinds reach this file only
    // where the engine (advantage_cpu.cpp) does not serve them.
    const bool simd_blocks = family_simd_serves(k, false);
    k.simd_stream = simd_blocks && family_simd_streams(k, false);
    // The general kernels; the block path runs episodic_sum's forward scan backwards over
    // time-reversed views.
    const bool along_time = family_tiles_serve(k);
    family_args<C> general = k;
    if (general.kind == estimator::episodic_sum && !along_time)
        for (view* v : {&general.rewards, &general.terminated, &general.advantages, &general.returns})
            reverse_time(*v, general.horizon);

    shared_bad_step bad;
    if (is_long_window(k)) {  // whole rows per thread, in O(T) each
        const std::int64_t by_work = std::max<std::int64_t>(1, k.rows * k.horizon / kElementsPerThread);
        const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), k.rows, by_work}));
        parallel_ranges(threads, k.rows, [&](std::int64_t begin, std::int64_t end) {
            bad.keep(family_long_windows(k, begin, end - begin));
        });
        return;  // a step flagged both is terminated (issue 33): `bad` is not an error
    }
    const std::int64_t unit = along_time ? kFamilyTileRows : block_rows_of(k);
    const std::int64_t units = (k.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, k.rows * k.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            const int count = static_cast<int>(std::min<std::int64_t>(unit, k.rows - first));
            if (simd_blocks) {
                const int whole = count - count % family_simd_width<C>;
                bad.keep(family_simd_block(k, first, whole));
                if (whole < count) bad.keep(run_block(general, first + whole, count - whole));
            } else {
                bad.keep(along_time ? family_tiles(general, first, count) : run_block(general, first, count));
            }
#if defined(__SSE2__)
            if (k.streaming) _mm_sfence();  // the streamed stores are seen before the call returns
#endif
        }
    });  // a step flagged both terminated and truncated is terminated (issue 33): `bad` is not an error
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
        return estimate_cpu(arrays, td);
    }
    if (arrays.rewards.type == dtype::float64)
        run_family<double>(arrays, params);
    else
        run_family<float>(arrays, params);
}

}  // namespace puffadv::detail
