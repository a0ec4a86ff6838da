// CPU kernels of the estimator family beyond GAE / TD(lambda) / V-trace:
// discounted returns, Retrace, Q(lambda), episodic sums (kinds that are one
// first-order scan A_t = delta_t + k_t A_{t+1}, like the standard ones) and
// n-step returns (a window of n steps per output). Definitions: conventions.hpp
// and docs/conventions.md.
//
// One traversal serves every layout and dtype: blocks of rows step back through
// time together, each step's line of a block converted into C scratch (or read
// in place when it already is contiguous C), so the arithmetic is plain loops
// across rows that the compiler vectorises. Time-major [T, B] lines are
// contiguous; batch-major [B, T] lines are strided, their cache lines reused
// over the next steps. Lookaheads (Retrace's c_{t+1}, Q(lambda)'s q_{t+1} and
// greedy_{t+1}, V_{t+1}) are the previous (later) step's lines.
// episodic_sum is a forward scan: it runs on time-reversed views.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "conventions_cpu_lines.hpp"
#include "cpu_threads.hpp"

namespace puffadv::detail {
namespace {

constexpr int kRows = 256;                       // rows per block (one unit of thread work)
constexpr std::int64_t kElementsPerThread = 1 << 15;
constexpr std::int64_t kWindowScratchBytes = 1 << 21;  // n_step_returns: the n lines of W per block

template <typename C>
struct family_args {
    estimator kind;
    std::int64_t rows, horizon;
    view rewards, values, terminated, truncated, last_value, bootstrap, next_values, target, behaviour, greedy;
    view advantages, returns, abs_sums, sums, square_sums;
    C gamma, lambda, c_clip;
    bool log_probs, reset_at_start;
    std::int64_t n;
};

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

template <typename C>
void write_row_sums(const family_args<C>& a, std::int64_t row, const double* sums) {
    const view* outs[3] = {&a.abs_sums, &a.sums, &a.square_sums};
    for (int i = 0; i < 3; ++i) {
        if (!outs[i]->present) continue;
        void* at = outs[i]->base + row * outs[i]->row_stride * outs[i]->size;
        if (outs[i]->type == dtype::float64)
            *static_cast<double*>(at) = sums[i];
        else
            *static_cast<float*>(at) = static_cast<float>(sums[i]);
    }
}

// Scratch lines of one block (kRows wide, padded against 4K aliasing).
template <typename C>
struct block_scratch {
    static constexpr int W = kRows + 16;
    alignas(64) C r[W], term[W], trunc[W], done[W], boot[W], delta[W], decay[W], acc[W], out[W];
    alignas(64) C v[2][W], term_keep[2][W], next_factor[2][W], zeros[W], values_end[W];
    alignas(64) C target[W], behaviour[W];
    alignas(64) double sums[3][W];
    std::vector<C> windows;  // n_step_returns: W_1 .. W_n of the later step
};

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

// Rows per block: n_step_returns keeps min(n, T) lines of W per row.
template <typename C>
int block_rows_of(const family_args<C>& a) {
    if (!is_window(a)) return kRows;
    const std::int64_t levels = std::max<std::int64_t>(1, std::min<std::int64_t>(a.n, a.horizon));
    const std::int64_t fit = kWindowScratchBytes / (levels * std::int64_t(sizeof(C)));
    return static_cast<int>(std::clamp<std::int64_t>(fit, 1, kRows));
}

template <typename C>
bad_step run_block(const family_args<C>& a, std::int64_t first, int n) {
    static thread_local block_scratch<C> s;
    bad_step bad;
    const C gamma = a.gamma, lambda = a.lambda;
    const bool sum = a.abs_sums.present || a.sums.present || a.square_sums.present;
    const bool bootstraps = a.kind == estimator::discounted_returns || a.kind == estimator::n_step_returns;
    const bool action_values = a.kind == estimator::retrace || a.kind == estimator::q_lambda;
    const std::int64_t T = a.horizon;

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
    const std::int64_t levels = std::max<std::int64_t>(1, std::min<std::int64_t>(a.n, T));
    const std::int64_t pitch = block_rows_of(a);
    C* windows = nullptr;
    if (is_window(a)) {
        s.windows.resize(static_cast<std::size_t>(levels * pitch));
        windows = s.windows.data();
    }

    const C* later_v = s.zeros;       // values at t + 1 (V_{t+1}, Q(lambda)'s q_{t+1})
    const C* later_term = s.zeros;    // terminated (dones) at t + 1
    const C* later_factor = s.zeros;  // Retrace's c_{t+1}, Q(lambda)'s greedy_{t+1}
    for (std::int64_t t = T - 1; t >= 0; --t) {
        const int k = static_cast<int>(t & 1);  // the line of step t must outlive step t - 1
        const bool last = t == T - 1;
        const C* r = step_line(a.rewards, first, t, n, s.r, false);
        const C* term = step_line(a.terminated, first, t, n, s.term_keep[k], true);
        const C* v = a.values.present ? step_line(a.values, first, t, n, s.v[k], false) : s.zeros;
        const C* trunc = s.zeros;
        bool truncations = false;
        if (a.truncated.present) {
            trunc = step_line(a.truncated, first, t, n, s.trunc, true);
            if ((truncations = any_set(trunc, n))) {
                C both = 0;
                for (int i = 0; i < n; ++i) both += term[i] * trunc[i];
                if (both != C(0))
                    for (int i = 0; i < n; ++i)
                        if (term[i] != C(0) && trunc[i] != C(0)) {
                            bad.keep_first(first + i, t);
                            break;
                        }
            }
        }
        for (int i = 0; i < n; ++i) s.done[i] = term[i] + trunc[i] - term[i] * trunc[i];

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

        C* __restrict delta = s.delta;
        C* __restrict decay = s.decay;
        const C* __restrict done = s.done;
        switch (a.kind) {
            case estimator::discounted_returns:
                for (int i = 0; i < n; ++i) {
                    delta[i] = r[i] + zero_where_set(term[i], gamma * boot[i]);
                    decay[i] = gamma * (C(1) - done[i]);
                }
                break;
            case estimator::retrace: {
                // c_t = lambda min(c_clip, pi_t / mu_t), read by step t - 1.
                C* c = s.next_factor[k];
                const C* tp = step_line(a.target, first, t, n, s.target, false);
                const C* bp = step_line(a.behaviour, first, t, n, s.behaviour, false);
                if (a.log_probs)
                    for (int i = 0; i < n; ++i) c[i] = lambda * clip(C(std::exp(tp[i] - bp[i])), a.c_clip);
                else
                    for (int i = 0; i < n; ++i) c[i] = lambda * clip(tp[i] / bp[i], a.c_clip);
                for (int i = 0; i < n; ++i) {
                    delta[i] = r[i] + zero_where_set(term[i], gamma * boot[i]) - v[i];
                    decay[i] = zero_where_set(done[i], gamma * later_factor[i]);
                }
                later_factor = c;
                break;
            }
            case estimator::q_lambda: {
                // lambda_t = lambda greedy_{t+1} (Peng: lambda); the trace past the row's end is cut.
                if (last) {
                    for (int i = 0; i < n; ++i) {
                        delta[i] = r[i] + zero_where_set(term[i], gamma * boot[i]) - v[i];
                        decay[i] = C(0);
                    }
                } else {
                    for (int i = 0; i < n; ++i) {
                        const C k_t = gamma * lambda * later_factor[i];
                        delta[i] = r[i] + zero_where_set(term[i], gamma * boot[i]) - v[i] +
                                   zero_where_set(done[i], k_t * (later_v[i] - boot[i]));
                        decay[i] = zero_where_set(done[i], k_t);
                    }
                }
                if (a.greedy.present)
                    later_factor = step_line(a.greedy, first, t, n, s.next_factor[k], true);
                else {
                    std::fill(s.next_factor[k], s.next_factor[k] + n, C(1));
                    later_factor = s.next_factor[k];
                }
                break;
            }
            case estimator::episodic_sum: {
                // Time runs backwards here: the step after t is the caller's t - 1.
                const C kappa = gamma * lambda;
                const C* reset = a.reset_at_start ? term : later_term;
                for (int i = 0; i < n; ++i) {
                    delta[i] = r[i];
                    decay[i] = kappa * (C(1) - reset[i]);
                }
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
                        for (int i = 0; i < n; ++i) w[i] = r[i] + zero_where_set(term[i], gamma * boot[i]);
                    else
                        for (int i = 0; i < n; ++i)
                            w[i] = r[i] + zero_where_set(term[i], gamma * boot[i]) +
                                   zero_where_set(done[i], gl * (w_later[i] - boot[i]));
                }
                for (int i = 0; i < n; ++i) windows[i] = r[i] + zero_where_set(term[i], gamma * boot[i]);
                const C* g = windows + (levels - 1) * pitch;
                for (int i = 0; i < n; ++i) s.acc[i] = g[i] - v[i];
                break;
            }
            default: break;
        }
        if (!is_window(a))
            for (int i = 0; i < n; ++i) s.acc[i] = delta[i] + decay[i] * s.acc[i];

        if (a.advantages.present) store<C>(a.advantages.type, a.advantages.at(first, t), a.advantages.row_stride, n,
                                           s.acc);
        if (a.returns.present) {
            const C* ret = s.acc;
            if (is_window(a)) {
                ret = windows + (levels - 1) * pitch;  // G^(n) itself, not (G - V) + V
            } else if (a.values.present) {
                for (int i = 0; i < n; ++i) s.out[i] = s.acc[i] + v[i];
                ret = s.out;
            }
            store<C>(a.returns.type, a.returns.at(first, t), a.returns.row_stride, n, ret);
        }
        if (sum)
            for (int i = 0; i < n; ++i) {
                const double x = s.acc[i];
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
    if (k.kind == estimator::episodic_sum)
        for (view* v : {&k.rewards, &k.terminated, &k.advantages, &k.returns}) reverse_time(*v, k.horizon);

    shared_bad_step bad;
    const std::int64_t unit = block_rows_of(k);
    const std::int64_t units = (k.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, k.rows * k.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) {
            const std::int64_t first = u * unit;
            bad.keep(run_block(k, first, static_cast<int>(std::min<std::int64_t>(unit, k.rows - first))));
        }
    });
    if (bad.first.row >= 0)
        throw value_error("terminated and truncated are both set at row " + std::to_string(bad.first.row) +
                          ", step " + std::to_string(bad.first.step) +
                          " (in [rows, horizon] order); a step ends its episode one way or the other");
}

}  // namespace

bool is_family_kind(estimator kind) noexcept {
    return kind != estimator::gae && kind != estimator::td_lambda && kind != estimator::vtrace;
}

void family_estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    if (arrays.rewards.type == dtype::float64)
        run_family<double>(arrays, params);
    else
        run_family<float>(arrays, params);
}

}  // namespace puffadv::detail
