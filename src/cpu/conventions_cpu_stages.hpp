// Stages 1 and 3 of the general CPU kernels of the standard conventions and of
// the puff advantage (see conventions_cpu.cpp): scratch lines, the producers of
// (delta, k), the epilogue, row sums, and the first bad step found in the data.
// Shared by the two traversals: conventions_cpu.cpp (time-contiguous rows, in
// chunks of steps; and the driver) and conventions_cpu_blocks.cpp (blocks of
// rows stepping back through time).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "cpu/conventions_cpu_lines.hpp"

namespace puffadv::detail::general_kernels {

// First (row, step) found with terminated and truncated both set.
struct data_error {
    std::int64_t row = -1, step = -1;
    std::mutex lock;  // threads may find errors at once
    void record(std::int64_t r, std::int64_t t) {
        std::lock_guard<std::mutex> guard(lock);
        if (row < 0 || r < row || (r == row && t < step)) row = r, step = t;
    }
};

// Scratch for n elements of one line (a row's chunk of steps, or a block's rows at one step).
template <typename C, int N>
struct line {
    // The step lines the producers read: straight from the caller's memory when
    // it already holds contiguous C, else from the converted copies below.
    const C *v, *vn, *r, *d, *trunc, *imp;
    alignas(64) C v_buf[2][N + 16], vn_buf[N + 16], r_buf[N + 16], d_buf[N + 16], trunc_buf[N + 16],
        imp_buf[N + 16];  // padded against 4K aliasing, as the scratch
};

// Stage 1 for one line, specialised on what the call has, so that the loop is
// branch-free straight-line arithmetic the compiler vectorises. `vn` holds the
// next values already (truncated steps overridden). Returns the count of steps
// both terminated and truncated.
template <typename C, bool kTrunc, bool kImp, bool kPg>
C produce_standard_kernel(const C* __restrict r, const C* __restrict v, const C* __restrict vn,
                          const C* __restrict term, const C* __restrict trunc, const C* __restrict imp,
                          int n, C gamma, C gamma_lambda, C rho_clip, C c_clip, C rho_pg_clip,
                          C* __restrict delta, C* __restrict decay, C* __restrict q, C* __restrict p) {
    C bad = 0;
    for (int j = 0; j < n; ++j) {
        const C t = term[j];
        const C u = kTrunc ? trunc[j] : C(0);
        if (kTrunc) bad += t * u;
        const C not_done = C(1) - (t + u - t * u);  // flags are exactly 0 or 1: 1 - (t | u)
        const C next = zero_where_set(t, vn[j]);
        const C td = r[j] + gamma * next - v[j];
        const C rho = kImp ? clip(imp[j], rho_clip) : C(1);
        const C c = kImp ? clip(imp[j], c_clip) : C(1);
        delta[j] = rho * td;
        decay[j] = gamma_lambda * c * not_done;
        if (kPg) {
            const C rho_pg = kImp ? clip(imp[j], rho_pg_clip) : C(1);
            q[j] = rho_pg * td;
            p[j] = gamma * rho_pg * not_done;
        }
    }
    return bad;
}

template <typename C, int N>
bool produce_standard(const kernel_args<C>& a, line<C, N>& in, int n, C* delta, C* decay, C* q, C* p) {
    using fn = C (*)(const C*, const C*, const C*, const C*, const C*, const C*, int, C, C, C, C, C, C*, C*,
                     C*, C*);
    static constexpr fn table[8] = {
        produce_standard_kernel<C, false, false, false>, produce_standard_kernel<C, false, false, true>,
        produce_standard_kernel<C, false, true, false>,  produce_standard_kernel<C, false, true, true>,
        produce_standard_kernel<C, true, false, false>,  produce_standard_kernel<C, true, false, true>,
        produce_standard_kernel<C, true, true, false>,   produce_standard_kernel<C, true, true, true>};
    const int which = (a.truncated.present ? 4 : 0) + (a.importance.present ? 2 : 0) + (a.pg ? 1 : 0);
    return table[which](in.r, in.v, in.vn, in.d, in.trunc, in.imp, n, a.gamma, a.gamma_lambda, a.rho_clip,
                        a.c_clip, a.rho_pg_clip, delta, decay, q, p) != C(0);
}

// Puff advantage (SPEC section 1): in.r, in.d and in.vn are the step-(t+1) lines.
template <typename C>
void produce_puff_kernel(const C* __restrict r_next, const C* __restrict v, const C* __restrict v_next,
                         const C* __restrict d_next, const C* __restrict imp, int n, C gamma,
                         C gamma_lambda, C rho_clip, C c_clip, C* __restrict delta, C* __restrict decay) {
    for (int j = 0; j < n; ++j) {
        const C not_done = C(1) - d_next[j];
        const C rho = clip(imp[j], rho_clip);
        const C c = clip(imp[j], c_clip);
        delta[j] = rho * (r_next[j] + gamma * v_next[j] * not_done - v[j]);
        decay[j] = gamma_lambda * c * not_done;
    }
}

template <typename C, int N>
void produce_puff(const kernel_args<C>& a, line<C, N>& in, int n, C* delta, C* decay) {
    produce_puff_kernel<C>(in.r, in.v, in.vn, in.d, in.imp, n, a.gamma, a.gamma_lambda, a.rho_clip, a.c_clip,
                           delta, decay);
}

// Stage 3 for n elements of a line (along time, or across rows at one step):
// convert and store the advantages and the returns A + V.
template <typename C>
void epilogue(const kernel_args<C>& a, std::int64_t row, std::int64_t t, bool along_time, int n,
              const C* adv, const C* acc, const C* values, C* scratch) {
    auto stride_of = [&](const view& v) { return along_time ? v.col_stride : v.row_stride; };
    if (a.advantages.present)
        store<C>(a.advantages.type, a.advantages.at(row, t), stride_of(a.advantages), n, adv);
    if (a.returns.present) {
        for (int j = 0; j < n; ++j) scratch[j] = acc[j] + values[j];
        store<C>(a.returns.type, a.returns.at(row, t), stride_of(a.returns), n, scratch);
    }
}

// Row sums of one row's chunk (time path).
template <typename C>
inline void add_row_sums(const C* adv, int n, double* sums) {
    double s_abs = 0, s = 0, s_sq = 0;
    for (int j = 0; j < n; ++j) {
        const double x = adv[j];
        s_abs += std::fabs(x);
        s += x;
        s_sq += x * x;
    }
    sums[0] += s_abs, sums[1] += s, sums[2] += s_sq;
}

template <typename C>
bool wants_sums(const kernel_args<C>& a) {
    return a.abs_sums.present || a.sums.present || a.square_sums.present;
}

// The value V'_t after the buffer's last step (standard conventions).
template <typename C>
C value_after_end(const kernel_args<C>& a, std::int64_t row) {
    if (a.last_value.present) return load_one<C>(a.last_value, row, 0);
    return load_one<C>(a.bootstrap, row, a.horizon - 1);
}

/// Traversal 2 (conventions_cpu_blocks.cpp, for float and double): rows
/// [first, first + n) of any layout, stepping back through time.
template <typename C>
void block_rows(const kernel_args<C>& a, std::int64_t first, int n, data_error& error);

}  // namespace puffadv::detail::general_kernels
