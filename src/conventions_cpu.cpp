// CPU kernels of the standard conventions (GAE, TD(lambda), V-trace) and of the
// puff advantage with fused outputs, reduced-precision floats or byte dones.
//
// Every estimate is the first-order recurrence A_t = delta_t + k_t * A_{t+1};
// only the producer of (delta_t, k_t) differs. Work is done on small float
// (double for float64) scratch lines in cache, so each input is read from
// memory once whatever its dtype:
//   1. load + convert each input line, then produce delta, k (and V-trace's
//      pg terms q, p) with plain vectorisable arithmetic;
//   2. the recurrence, with several rows interleaved so their chains overlap;
//   3. the epilogue: convert + store the outputs and accumulate the row sums.
// Two traversals: time-contiguous rows take chunks of steps per row (the
// two-pass style of advantage_cpu.cpp); any other layout (time-major [T, B]
// data above all) takes blocks of rows per step, vectorised across rows.
// The standard estimates most code asks for (float32/float64 data, flags of
// that type or bool/uint8, [B, T] or [T, B]) skip the scratch lines: the
// one-pass SIMD kernels of conventions_cpu_simd*.cpp serve them (kernel_args::simd).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include <mutex>

#include "conventions_cpu_lines.hpp"
#include "cpu_threads.hpp"

namespace puffadv::detail {
namespace {

constexpr int kTileRows = 8;          // interleaved recurrence chains (time-contiguous path)
constexpr int kChunkSteps = 256;      // steps per chunk; a tile's scratch stays in L1/L2
// Scratch rows are padded: at a pitch of a power of two, the recurrence's loads
// and stores of different arrays share their low 12 address bits (4K aliasing),
// which stalled it to a third of its speed.
constexpr int kPitch = kChunkSteps + 16;
constexpr std::int64_t kElementsPerThread = 1 << 15;

// ---- data errors and line scratch ----

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

// ---- traversal 1: time-contiguous rows, chunks of steps ----

template <typename C>
struct tile_scratch {
    alignas(64) C delta[kTileRows][kPitch];
    alignas(64) C decay[kTileRows][kPitch];
    alignas(64) C q[kTileRows][kPitch];  // V-trace: q, then the pg advantages
    alignas(64) C p[kTileRows][kPitch];
    alignas(64) C acc[kTileRows][kPitch];
    alignas(64) C values[kTileRows][kPitch];
    const C* value_lines[kTileRows];  // V_t of each row's chunk, for the returns
    alignas(64) C out[kChunkSteps];
    line<C, kChunkSteps> in;
};

// Loads row `row`'s steps [lo, lo + n) and produces stage 1 into slot r.
template <typename C>
void produce_row_chunk(const kernel_args<C>& a, tile_scratch<C>& s, int r, std::int64_t row, std::int64_t lo,
                       int n, data_error& error) {
    auto& in = s.in;
    const bool at_end = lo + n == a.horizon;
    const int n_next = at_end ? n - 1 : n;  // steps whose t+1 is inside the buffer
    auto line_at = [&](const view& v, std::int64_t t, int count, C* buffer, bool flag) {
        return line_of<C>(v, row, t, v.col_stride, count, buffer, flag);
    };
    // Next values that must be patched (the end of the buffer, truncations) go through a copy.
    auto next_values_copy = [&]() {
        load<C>(a.values.type, a.values.at(row, lo + 1), a.values.col_stride, n_next, in.vn_buf, false);
        in.vn = in.vn_buf;
        return in.vn_buf;
    };
    in.v = line_at(a.values, lo, n, in.v_buf[0], false);
    if (a.importance.present) in.imp = line_at(a.importance, lo, n, in.imp_buf, false);
    if (a.kind == producer::puff) {
        if (at_end) {  // step H-1 has no step H: zeros there, and its map is forced to 0 below
            next_values_copy()[n - 1] = C(0);
            load<C>(a.rewards.type, a.rewards.at(row, lo + 1), a.rewards.col_stride, n_next, in.r_buf, false);
            load<C>(a.dones.type, a.dones.at(row, lo + 1), a.dones.col_stride, n_next, in.d_buf, false);
            in.r_buf[n - 1] = in.d_buf[n - 1] = C(0);
            in.r = in.r_buf, in.d = in.d_buf;
        } else {
            in.vn = line_at(a.values, lo + 1, n, in.vn_buf, false);
            in.r = line_at(a.rewards, lo + 1, n, in.r_buf, false);
            in.d = line_at(a.dones, lo + 1, n, in.d_buf, false);
        }
        produce_puff(a, in, n, s.delta[r], s.decay[r]);
        if (at_end) s.delta[r][n - 1] = s.decay[r][n - 1] = C(0);  // A_{H-1} = 0
    } else {
        in.r = line_at(a.rewards, lo, n, in.r_buf, false);
        in.d = line_at(a.dones, lo, n, in.d_buf, true);
        const bool truncations = a.truncated.present &&
                                 any_set(in.trunc = line_at(a.truncated, lo, n, in.trunc_buf, true), n);
        if (at_end || truncations) {
            C* vn = next_values_copy();
            if (at_end) vn[n - 1] = value_after_end(a, row);
            if (truncations)
                for (int j = 0; j < n; ++j)  // truncations are rare: a branch, not a stream
                    if (in.trunc[j] != C(0)) vn[j] = load_one<C>(a.bootstrap, row, lo + j);
        } else {
            in.vn = line_at(a.values, lo + 1, n, in.vn_buf, false);
        }
        if (produce_standard(a, in, n, s.delta[r], s.decay[r], s.q[r], s.p[r]))
            for (int j = 0; j < n; ++j)
                if (in.d[j] != C(0) && in.trunc[j] != C(0)) {
                    error.record(row, lo + j);
                    break;
                }
    }
    // The epilogue's V_t (returns = A + V) outlives this row's scratch only as a copy.
    if (a.returns.present) {
        if (in.v == in.v_buf[0]) {
            std::copy(in.v, in.v + n, s.values[r]);
            s.value_lines[r] = s.values[r];
        } else {
            s.value_lines[r] = in.v;
        }
    }
}

template <typename C, int R>
void recur_tile(tile_scratch<C>& s, int n, C* carry, bool pg) {
    C a[R];
    for (int r = 0; r < R; ++r) a[r] = carry[r];
    auto* __restrict delta = s.delta;
    auto* __restrict decay = s.decay;
    auto* __restrict acc = s.acc;
    if (pg) {
        auto* __restrict q = s.q;
        auto* __restrict p = s.p;
        for (int j = n - 1; j >= 0; --j)
            for (int r = 0; r < R; ++r) {
                q[r][j] += p[r][j] * a[r];  // pg_t = q_t + p_t A_{t+1}
                a[r] = delta[r][j] + decay[r][j] * a[r];
                acc[r][j] = a[r];
            }
    } else {
        for (int j = n - 1; j >= 0; --j)
            for (int r = 0; r < R; ++r) {
                a[r] = delta[r][j] + decay[r][j] * a[r];
                acc[r][j] = a[r];
            }
    }
    for (int r = 0; r < R; ++r) carry[r] = a[r];
}

template <typename C>
void recur_tile_any(int rows, tile_scratch<C>& s, int n, C* carry, bool pg) {
    switch (rows) {
        case 8: return recur_tile<C, 8>(s, n, carry, pg);
        case 7: return recur_tile<C, 7>(s, n, carry, pg);
        case 6: return recur_tile<C, 6>(s, n, carry, pg);
        case 5: return recur_tile<C, 5>(s, n, carry, pg);
        case 4: return recur_tile<C, 4>(s, n, carry, pg);
        case 3: return recur_tile<C, 3>(s, n, carry, pg);
        case 2: return recur_tile<C, 2>(s, n, carry, pg);
        default: return recur_tile<C, 1>(s, n, carry, pg);
    }
}
static_assert(kTileRows == 8, "recur_tile_any unrolls up to 8 rows");

template <typename C>
void tile_time_contiguous(const kernel_args<C>& a, std::int64_t first, int count, data_error& error) {
    if (a.simd) {
        // run() hands each thread an ascending range of tiles, and the SIMD kernel
        // walks rows downwards: it takes the mirror-image tile, so that each
        // thread's reads form one descending stream (ascending tiles of descending
        // rows ran 2.5x slower here: the prefetcher restarted at every tile).
        const bad_step bad = standard_simd_rows(a, a.rows - first - count, count);
        if (bad.row >= 0) error.record(bad.row, bad.step);
        return;
    }
    static thread_local tile_scratch<C> s;  // ~60 KB: too big for some thread stacks
    C carry[kTileRows] = {};
    double sums[kTileRows][3] = {};
    const bool sum = wants_sums(a);
    for (std::int64_t hi = a.horizon; hi > 0; hi -= kChunkSteps) {  // steps [lo, hi)
        const std::int64_t lo = std::max<std::int64_t>(0, hi - kChunkSteps);
        const int n = static_cast<int>(hi - lo);
        for (int r = 0; r < count; ++r) produce_row_chunk(a, s, r, first + r, lo, n, error);
        recur_tile_any<C>(count, s, n, carry, a.pg);
        for (int r = 0; r < count; ++r) {
            const C* adv = a.pg ? s.q[r] : s.acc[r];
            epilogue(a, first + r, lo, true, n, adv, s.acc[r], s.value_lines[r], s.out);
            if (sum) add_row_sums(adv, n, sums[r]);
        }
    }
    if (sum)
        for (int r = 0; r < count; ++r) write_row_sums(a, first + r, sums[r]);
}

// ---- traversal 2: any layout, blocks of rows stepping back through time ----

template <typename C>
struct block_scratch {
    // Padded as the tile scratch is (4K aliasing between the arrays).
    alignas(64) C delta[kBlockRows + 16], decay[kBlockRows + 16], q[kBlockRows + 16], p[kBlockRows + 16];
    alignas(64) C acc[kBlockRows + 16], out[kBlockRows + 16], end_values[kBlockRows + 16];
    alignas(64) double sums[3][kBlockRows + 8];
    line<C, kBlockRows> in;
};

template <typename C>
void block_rows(const kernel_args<C>& a, std::int64_t first, int n, data_error& error) {
    if (a.simd) {
        const bad_step bad = standard_simd_block(a, first, n);
        if (bad.row >= 0) error.record(bad.row, bad.step);
        return;
    }
    static thread_local block_scratch<C> s;
    auto& in = s.in;
    const bool sum = wants_sums(a);
    auto line_at = [&](const view& v, std::int64_t t, C* buffer, bool flag) {
        return line_of<C>(v, first, t, v.row_stride, n, buffer, flag);
    };
    std::fill(s.acc, s.acc + n, C(0));
    for (int i = 0; i < 3; ++i) std::fill(s.sums[i], s.sums[i] + n, 0.0);
    if (a.kind == producer::standard && a.horizon > 0)
        for (int i = 0; i < n; ++i) s.end_values[i] = value_after_end(a, first + i);
    const C* later_values = s.end_values;  // V_{t+1}: the previous (later) step's line
    for (std::int64_t t = a.horizon - 1; t >= 0; --t) {
        // Two buffers: the line of step t must survive while step t - 1 reads it as V_{t+1}.
        in.v = line_at(a.values, t, in.v_buf[t & 1], false);
        in.vn = later_values;
        if (a.importance.present) in.imp = line_at(a.importance, t, in.imp_buf, false);
        if (a.kind == producer::puff) {
            if (t == a.horizon - 1) {
                std::fill(s.delta, s.delta + n, C(0));  // A_{H-1} = 0
                std::fill(s.decay, s.decay + n, C(0));
            } else {
                in.r = line_at(a.rewards, t + 1, in.r_buf, false);
                in.d = line_at(a.dones, t + 1, in.d_buf, false);
                produce_puff(a, in, n, s.delta, s.decay);
            }
        } else {
            in.r = line_at(a.rewards, t, in.r_buf, false);
            in.d = line_at(a.dones, t, in.d_buf, true);
            if (a.truncated.present && any_set(in.trunc = line_at(a.truncated, t, in.trunc_buf, true), n)) {
                std::copy(in.vn, in.vn + n, in.vn_buf);
                for (int i = 0; i < n; ++i)
                    if (in.trunc[i] != C(0)) in.vn_buf[i] = load_one<C>(a.bootstrap, first + i, t);
                in.vn = in.vn_buf;
            }
            if (produce_standard(a, in, n, s.delta, s.decay, s.q, s.p))
                for (int i = 0; i < n; ++i)
                    if (in.d[i] != C(0) && in.trunc[i] != C(0)) {
                        error.record(first + i, t);
                        break;
                    }
        }
        if (a.pg)
            for (int i = 0; i < n; ++i) s.q[i] += s.p[i] * s.acc[i];
        for (int i = 0; i < n; ++i) s.acc[i] = s.delta[i] + s.decay[i] * s.acc[i];
        const C* adv = a.pg ? s.q : s.acc;
        epilogue(a, first, t, false, n, adv, s.acc, in.v, s.out);
        if (sum)
            for (int i = 0; i < n; ++i) {
                const double x = adv[i];
                s.sums[0][i] += std::fabs(x), s.sums[1][i] += x, s.sums[2][i] += x * x;
            }
        later_values = in.v;
    }
    if (sum)
        for (int i = 0; i < n; ++i) {
            const double triple[3] = {s.sums[0][i], s.sums[1][i], s.sums[2][i]};
            write_row_sums(a, first + i, triple);
        }
}

// ---- driver ----

template <typename C>
void run(const kernel_args<C>& a, bool time_contiguous) {
    data_error error;
    const std::int64_t unit = time_contiguous ? (a.simd ? kSimdTileRows : kTileRows)
                                              : (a.simd ? simd_block_rows(a.rows) : kBlockRows);
    const std::int64_t units = (a.rows + unit - 1) / unit;
    const std::int64_t by_work = std::max<std::int64_t>(1, a.rows * a.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), units, by_work}));
    auto do_unit = [&](std::int64_t u) {
        const std::int64_t first = u * unit;
        const int count = static_cast<int>(std::min<std::int64_t>(unit, a.rows - first));
        if (time_contiguous)
            tile_time_contiguous(a, first, count, error);
        else
            block_rows(a, first, count, error);
    };
    parallel_ranges(threads, units, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t u = begin; u < end; ++u) do_unit(u);
    });
    if (error.row >= 0)
        throw value_error("terminated and truncated are both set at row " + std::to_string(error.row) +
                          ", step " + std::to_string(error.step) +
                          " (in [rows, horizon] order); a step ends its episode one way or the other");
}

bool all_time_contiguous(std::initializer_list<const view*> views) {
    for (const view* v : views)
        if (v->present && v->col_stride != 1) return false;
    return true;
}

template <typename C>
void fill_fused(kernel_args<C>& k, const fused_outputs& f) {
    k.returns = view_of(f.returns);
    k.abs_sums = view_of(f.abs_sums);
    k.sums = view_of(f.sums);
    k.square_sums = view_of(f.square_sums);
}

template <typename C>
void run_puff(const puff_arrays& a, const puff_params& p) {
    kernel_args<C> k{};
    k.kind = producer::puff;
    k.pg = false;
    k.rows = a.values.rows;
    k.horizon = a.values.cols;
    k.values = view_of(a.values);
    k.rewards = view_of(a.rewards);
    k.dones = view_of(a.dones);
    k.importance = view_of(a.importance);
    k.advantages = view_of(a.advantages);
    fill_fused(k, a.fused);
    k.gamma = C(p.gamma);
    k.gamma_lambda = C(p.gamma) * C(p.gae_lambda);
    k.rho_clip = C(p.rho_clip);
    k.c_clip = C(p.c_clip);
    k.rho_pg_clip = C(1);
    const bool contiguous = a.values.cols <= 1 ||
        all_time_contiguous({&k.values, &k.rewards, &k.dones, &k.importance, &k.advantages, &k.returns});
    run(k, contiguous);
}

template <typename C>
void run_standard(const standard_arrays& a, const standard_params& p) {
    kernel_args<C> k{};
    k.kind = producer::standard;
    k.pg = p.kind == estimator::vtrace;
    k.rows = a.rewards.rows;
    k.horizon = a.rewards.cols;
    k.values = view_of(a.values);
    k.rewards = view_of(a.rewards);
    k.dones = view_of(a.terminated);
    k.truncated = view_of(a.truncated);
    k.last_value = view_of(a.last_value);
    k.bootstrap = view_of(a.bootstrap_values);
    k.importance = view_of(a.importance);
    k.advantages = view_of(a.advantages);
    fill_fused(k, a.fused);
    k.gamma = C(p.gamma);
    k.gamma_lambda = C(p.gamma) * C(p.lambda);
    k.rho_clip = C(p.rho_clip);
    k.c_clip = C(p.c_clip);
    k.rho_pg_clip = C(p.rho_pg_clip);
    // bootstrap_values is read element by element, so its strides do not matter.
    const bool contiguous = a.rewards.cols <= 1 ||
        all_time_contiguous({&k.values, &k.rewards, &k.dones, &k.truncated, &k.importance, &k.advantages,
                             &k.returns});
    k.simd = standard_simd_serves(k, contiguous);
    k.stream = k.simd && standard_simd_streams(k, contiguous);
    run(k, contiguous);
}

}  // namespace

void puff_advantage_general_cpu(const puff_arrays& arrays, const puff_params& params) {
    if (arrays.values.type == dtype::float64)
        run_puff<double>(arrays, params);
    else
        run_puff<float>(arrays, params);
}

void standard_estimate_cpu(const standard_arrays& arrays, const standard_params& params) {
    if (is_family_kind(params.kind)) return family_estimate_cpu(arrays, params);
    if (arrays.rewards.type == dtype::float64)
        run_standard<double>(arrays, params);
    else
        run_standard<float>(arrays, params);
}

}  // namespace puffadv::detail
