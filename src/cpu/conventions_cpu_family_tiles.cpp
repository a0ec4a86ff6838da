// General CPU kernels of the estimator family for time-contiguous rows ([B, T]),
// beside the row-block traversal of conventions_cpu_family.cpp (which holds the
// overview): tiles of 8 rows with chunks of steps, and n_step_returns' long
// windows in one O(T) pass per row. Float32/float64 calls that the CPU engine
// serves (advantage_cpu.cpp) do not come here.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/conventions_cpu_family_lines.hpp"
#include "cpu/cpu_scan.hpp"  // PUFF_SIMD_CLONES

namespace puffadv::detail {
namespace {

// ---- time-contiguous rows ([B, T]): tiles of rows, chunks of steps ----
//
// Each row's chunk of steps is produced along time (contiguous loads, the
// lookahead one index on), then the tile's rows run the recurrence interleaved
// so that their dependency chains overlap. n_step_returns keeps the block path.

constexpr int kTileRows = kFamilyTileRows;
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
    // V'_s: next_values; or V_{s+1}, the bootstrap after the last step and at truncations.
    const bool at_end = end == a.horizon;
    if (a.next_values.present)
        copy_along(a.next_values, row, lo, m, boot, false);
    else
        copy_along(a.values, row, lo + 1, at_end ? m - 1 : m, boot, false);
    if (at_end) {
        if (!a.next_values.present) boot[m - 1] = value_after_end(a, row);
        cut[m - 1] = C(1);
    }
    if (truncations && !a.next_values.present)
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
constexpr int kLongChunk = 512;  // steps loaded, produced and stored at a time

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
                // V'_t: next_values; or V_{t+1} inside the row, the bootstrap at truncations and
                // after the last step.
                double boot;
                if (a.next_values.present)
                    boot = double(load_one<C>(a.next_values, row, t));
                else if (truncated)
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

}  // namespace

template <typename C>
bool family_tiles_serve(const family_args<C>& a) {
    return tile_serves(a);
}

template <typename C>
bad_step family_tiles(const family_args<C>& a, std::int64_t first, int count) {
    return run_tile(a, first, count);
}

template <typename C>
bad_step family_long_windows(const family_args<C>& a, std::int64_t first, std::int64_t count) {
    return run_long_windows(a, first, count);
}

template bool family_tiles_serve(const family_args<float>&);
template bool family_tiles_serve(const family_args<double>&);
template bad_step family_tiles(const family_args<float>&, std::int64_t, int);
template bad_step family_tiles(const family_args<double>&, std::int64_t, int);
template bad_step family_long_windows(const family_args<float>&, std::int64_t, std::int64_t);
template bad_step family_long_windows(const family_args<double>&, std::int64_t, std::int64_t);

}  // namespace puffadv::detail
