// Per-step gamma / lambda calls that the CPU engine does not serve as they come
// (per_step_dense.hpp): dense copies for the engine, and n_step_returns' windows.
#include "cpu/per_step_dense.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/conventions_cpu_lines.hpp"
#include "cpu/cpu_threads.hpp"
#include "cpu/engine_run.hpp"

namespace puffadv::detail {
namespace {

template <typename C>
constexpr dtype own_type = sizeof(C) == 8 ? dtype::float64 : dtype::float32;

// A dense batch-major [rows, horizon] (or [rows]) matrix over `data`.
matrix dense_matrix(const matrix& like, void* data, dtype type, bool vector) {
    matrix m = like;
    m.data = data;
    m.type = type;
    m.col_stride = 1;
    m.row_stride = vector ? 1 : like.cols;
    m.writable = true;
    return m;
}

// The copies of one call, kept alive while `compute` runs.
template <typename C>
struct dense_call {
    std::vector<std::vector<C>> floats;
    std::vector<std::vector<std::uint8_t>> flags;
    standard_arrays arrays;
    std::int64_t rows = 0, horizon = 0;

    // Chunks of at most 2^30 steps: load() counts in int.
    template <typename T>
    void copy_rows(const matrix& m, T* out, bool flag) {
        constexpr std::int64_t kChunk = std::int64_t(1) << 30;
        std::vector<C> line;
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t t = 0; t < horizon; t += kChunk) {
                const int n = static_cast<int>(std::min(kChunk, horizon - t));
                const void* first = static_cast<const char*>(m.data) +
                                    (r * m.row_stride + t * m.col_stride) * std::int64_t(dtype_size(m.type));
                if constexpr (sizeof(T) == sizeof(C) && !std::is_same_v<T, std::uint8_t>) {
                    load<C>(m.type, first, m.col_stride, n, out + r * horizon + t, flag);
                } else {
                    line.resize(std::size_t(n));
                    load<C>(m.type, first, m.col_stride, n, line.data(), flag);
                    for (int i = 0; i < n; ++i) out[r * horizon + t + i] = static_cast<T>(line[std::size_t(i)]);
                }
            }
    }
    std::optional<matrix> float_copy(const std::optional<matrix>& m) {
        if (!m) return std::nullopt;
        std::vector<C>& buffer = floats.emplace_back(std::size_t(rows * horizon));
        copy_rows(*m, buffer.data(), false);
        return dense_matrix(*m, buffer.data(), own_type<C>, false);
    }
    std::optional<matrix> flag_copy(const std::optional<matrix>& m) {
        if (!m) return std::nullopt;
        std::vector<std::uint8_t>& buffer = flags.emplace_back(std::size_t(rows * horizon));
        copy_rows(*m, buffer.data(), true);
        return dense_matrix(*m, buffer.data(), dtype::uint8, false);
    }
    std::optional<matrix> output(const std::optional<matrix>& m) {
        if (!m) return std::nullopt;
        std::vector<C>& buffer = floats.emplace_back(std::size_t(rows * horizon));
        return dense_matrix(*m, buffer.data(), own_type<C>, false);
    }
    std::optional<matrix> vector_copy(const std::optional<matrix>& m) {
        if (!m) return std::nullopt;
        std::vector<C>& buffer = floats.emplace_back(std::size_t(rows));
        for (std::int64_t r = 0; r < rows; ++r)
            load<C>(m->type, static_cast<const char*>(m->data) + r * m->row_stride * std::int64_t(dtype_size(m->type)),
                    1, 1, &buffer[std::size_t(r)], false);
        return dense_matrix(*m, buffer.data(), own_type<C>, true);
    }
    static void store_back(const std::optional<matrix>& to, const std::optional<matrix>& from) {
        if (!to) return;
        const C* in = static_cast<const C*>(from->data);
        for (std::int64_t r = 0; r < to->rows; ++r)
            for (std::int64_t t = 0; t < to->cols; ++t)
                store<C>(to->type,
                         static_cast<char*>(to->data) +
                             (r * to->row_stride + t * to->col_stride) * std::int64_t(dtype_size(to->type)),
                         1, 1, in + r * to->cols + t);
    }
};

template <typename C>
void compute_dense(const standard_arrays& s, const standard_params& p,
                   void (*compute)(const standard_arrays&, const standard_params&)) {
    dense_call<C> d;
    d.rows = s.rewards.rows;
    d.horizon = s.rewards.cols;
    standard_arrays& a = d.arrays;
    a.rewards = *d.float_copy(s.rewards);
    a.terminated = *d.flag_copy(s.terminated);
    a.values = d.float_copy(s.values);
    a.truncated = d.flag_copy(s.truncated);
    a.last_value = d.vector_copy(s.last_value);
    a.bootstrap_values = d.float_copy(s.bootstrap_values);
    a.importance = d.float_copy(s.importance);
    a.next_values = d.float_copy(s.next_values);
    a.target_probs = d.float_copy(s.target_probs);
    a.behaviour_probs = d.float_copy(s.behaviour_probs);
    a.greedy = d.flag_copy(s.greedy);
    a.gamma = d.float_copy(s.gamma);
    a.lambda = d.float_copy(s.lambda);
    a.advantages = d.output(s.advantages);
    a.fused = s.fused;
    a.fused.returns = d.output(s.fused.returns);
    standard_params q = p;
    if (p.log_probs && a.target_probs && a.behaviour_probs) {  // the ratio exp(target - behaviour) over 1
        C* target = static_cast<C*>(a.target_probs->data);
        C* behaviour = static_cast<C*>(a.behaviour_probs->data);
        for (std::int64_t i = 0; i < d.rows * d.horizon; ++i) {
            target[i] = std::exp(target[i] - behaviour[i]);
            behaviour[i] = C(1);
        }
        q.log_probs = false;
    }
    compute(a, q);
    dense_call<C>::store_back(s.advantages, a.advantages);
    dense_call<C>::store_back(s.fused.returns, a.fused.returns);
}

// ---- n_step_returns with per-step gamma_t and lambda_t ----

template <typename C>
C element_at(const view& v, std::int64_t row, std::int64_t t) {
    return *static_cast<const C*>(v.at(row, t));
}
bool flag_at(const view& v, std::int64_t row, std::int64_t t) {
    return v.present && *static_cast<const std::uint8_t*>(v.at(row, t)) != 0;
}

template <typename C>
void n_step_rows(const engine::arrays& a, const standard_params& p, std::int64_t first, std::int64_t last,
                 engine::shared_bad_step& bad) {
    const std::int64_t T = a.horizon;
    std::vector<C> w1(static_cast<std::size_t>(T)), next(static_cast<std::size_t>(T)), k(static_cast<std::size_t>(T));
    std::vector<std::uint8_t> done(static_cast<std::size_t>(T));
    const C scalar_gamma = C(p.gamma), scalar_lambda = C(p.lambda);
    for (std::int64_t row = first; row < last; ++row) {
        bad_step found;
        const C end = a.last_value.present ? element_at<C>(a.last_value, row, 0)
                                           : element_at<C>(a.bootstrap, row, T - 1);
        for (std::int64_t s = 0; s < T; ++s) {
            const bool terminated = flag_at(a.terminated, row, s), truncated = flag_at(a.truncated, row, s);
            if (terminated && truncated) found.keep_first(row, s);
            C v_next = s + 1 < T ? element_at<C>(a.values, row, s + 1) : end;
            if (truncated) v_next = element_at<C>(a.bootstrap, row, s);
            const C g = a.gamma.present ? element_at<C>(a.gamma, row, s) : scalar_gamma;
            const C l = a.lambda.present ? element_at<C>(a.lambda, row, s) : scalar_lambda;
            w1[s] = element_at<C>(a.rewards, row, s) + (terminated ? C(0) : g * v_next);
            next[s] = v_next;
            k[s] = g * l;
            done[s] = terminated || truncated || s + 1 == T;
        }
        bad.keep(found);
        double totals[3] = {0, 0, 0};
        for (std::int64_t t = 0; t < T; ++t) {
            // The window t .. e, cut at the first done step (where Wj = W1).
            const std::int64_t e = p.n - 1 >= T - t ? T - 1 : t + p.n - 1;
            std::int64_t stop = t;
            while (stop < e && !done[stop]) ++stop;
            C x = w1[stop];
            for (std::int64_t s = stop - 1; s >= t; --s) x = w1[s] + k[s] * (x - next[s]);
            const C v = element_at<C>(a.values, row, t);
            const C adv = x - v;
            if (a.returns.present) *static_cast<C*>(a.returns.at(row, t)) = x;
            if (a.advantages.present) *static_cast<C*>(a.advantages.at(row, t)) = adv;
            totals[0] += std::fabs(double(adv));
            totals[1] += double(adv);
            totals[2] += double(adv) * double(adv);
        }
        write_row_sums(a, row, totals);
    }
}

template <typename C>
void n_step_typed(const engine::arrays& a, const standard_params& p) {
    const std::int64_t work = a.rows * std::min(a.horizon, p.n);  // steps times window length
    const std::int64_t by_work = std::max<std::int64_t>(1, work / engine::kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), a.rows, by_work}));
    engine::shared_bad_step bad;
    parallel_ranges(threads, a.rows,
                    [&](std::int64_t begin, std::int64_t end) { n_step_rows<C>(a, p, begin, end, bad); });
    if (bad.first.row >= 0) engine::throw_both_set(bad.first);
}

}  // namespace

void compute_on_dense_copies(const standard_arrays& arrays, const standard_params& params,
                             void (*compute)(const standard_arrays&, const standard_params&)) {
    if (arrays.rewards.type == dtype::float64) return compute_dense<double>(arrays, params, compute);
    compute_dense<float>(arrays, params, compute);
}

void n_step_returns_per_step(const engine::arrays& a, const standard_params& params) {
    if (a.rewards.type == dtype::float64) return n_step_typed<double>(a, params);
    n_step_typed<float>(a, params);
}

}  // namespace puffadv::detail
