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
// Stages 1 and 3 are in conventions_cpu_stages.hpp. Two traversals:
// time-contiguous rows take chunks of steps per row (this file); any other layout (time-major [T, B] data above
// all) takes blocks of rows per step, vectorised across rows
// (conventions_cpu_blocks.cpp). The driver, run(), is at the end of this file.
// The estimates most code asks for (float32/float64 data, flags of that type or
// bool/uint8, [B, T] or [T, B]) skip the scratch lines: the engine serves them
// (advantage_cpu.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include <mutex>

#include "cpu/conventions_cpu_stages.hpp"
#include "cpu/cpu_threads.hpp"

namespace puffadv::detail {
namespace {

using namespace general_kernels;

constexpr int kTileRows = 8;          // interleaved recurrence chains (time-contiguous path)
constexpr int kChunkSteps = 256;      // steps per chunk; a tile's scratch stays in L1/L2
// Scratch rows are padded: at a pitch of a power of two, the recurrence's loads
// and stores of different arrays share their low 12 address bits (4K aliasing),
// which stalled it to a third of its speed.
constexpr int kPitch = kChunkSteps + 16;
constexpr std::int64_t kElementsPerThread = 1 << 15;

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

// ---- driver ----

template <typename C>
void run(const kernel_args<C>& a, bool time_contiguous) {
    data_error error;
    const std::int64_t unit = time_contiguous ? kTileRows : kBlockRows;
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
    // A step flagged both terminated and truncated is terminated (issue 33): `error` finds
    // them still, and the arithmetic (next = 0 where terminated) gives their meaning.
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
    run(k, contiguous);
}

}  // namespace

void puff_advantage_general_cpu(const puff_arrays& arrays, const puff_params& params) {
    if (arrays.values.type == dtype::float64)
        run_puff<double>(arrays, params);
    else
        run_puff<float>(arrays, params);
}

void standard_general_cpu(const standard_arrays& arrays, const standard_params& params) {
    if (arrays.rewards.type == dtype::float64)
        run_standard<double>(arrays, params);
    else
        run_standard<float>(arrays, params);
}

}  // namespace puffadv::detail
