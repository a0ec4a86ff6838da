// CPU backend of the puff advantage (SPEC section 1).
//
// The naive loop is latency-bound: one dependent multiply-add chain per row and
// step. Here, for rows whose time steps are adjacent in memory, each block of W
// steps (a vector register) computes delta_t and k_t from shifted loads, scans
// its W affine maps in registers, and chains to the next block through one
// multiply-add: one dependent operation per W steps, and a few rows stepped
// together so even those chains overlap. Groups of rows go to the CPU threads
// (cpu_threads.hpp).
// Views whose time steps are not adjacent (time-major data, transposes) take a
// generic strided path, where adjacent rows share cache lines instead.
#include <algorithm>
#include <cstdint>

#include "cpu/cpu_scan.hpp"
#include "cpu/cpu_threads.hpp"
#include "core/gpu_backend.hpp"

namespace puffadv::detail {
namespace {

constexpr int kTileRows = 16;         // rows per unit of thread work
constexpr int kTimeMajorRows = 1024;  // the same for time-major data: 4 KiB of float32 per step
constexpr std::int64_t kElementsPerThread = 1 << 15;  // below this, extra threads cost more than they give

template <typename T>
struct strided {
    const T* data;
    std::int64_t row_stride, col_stride;
    const T* row(std::int64_t r) const { return data + r * row_stride; }
};

template <typename T>
struct scalars {
    T gamma, gamma_lambda, rho_clip, c_clip;
};

// Explicit select, not fmin: it vectorises without -fno-trapping-math and gives
// fmin's answer for a NaN importance (the clip).
template <typename T>
inline T clip(T x, T limit) {
    return x < limit ? x : limit;
}

template <typename T>
struct puff_views {
    strided<T> values, rewards, dones, importance;
    T* out;
    std::int64_t out_row_stride, out_col_stride;
    std::int64_t rows, horizon;
    scalars<T> s;
};

// One step of SPEC section 1 for one row, given A_{t+1}; returns A_t.
template <typename T>
inline T step(const T* v, const T* rw, const T* d, const T* imp, std::int64_t t, T next,
              const scalars<T>& s) {
    const T not_done = T(1) - d[t + 1];
    const T delta = clip(imp[t], s.rho_clip) * (rw[t + 1] + s.gamma * v[t + 1] * not_done - v[t]);
    return delta + s.gamma_lambda * clip(imp[t], s.c_clip) * not_done * next;
}

// One row whose inputs are time-contiguous. The top (H - 1) % W steps go one at
// a time; the rest in W-step vector blocks, each scanned in registers
// (cpu_scan.hpp) and chained to the next through a broadcast carry. Rows are
// walked one at a time and in descending order, so that each array is read as
// one descending stream: measured here, interleaving even two rows halved the
// bandwidth the hardware prefetcher sustained.
template <typename T>
PUFF_SIMD_CLONES void row_time_contiguous(const puff_views<T>& p, std::int64_t row) {
    using V = simd::vec<T>;
    constexpr int W = simd::lanes<T>::width;
    const T* v = p.values.row(row);
    const T* rw = p.rewards.row(row);
    const T* d = p.dones.row(row);
    const T* imp = p.importance.row(row);
    T* out = p.out + row * p.out_row_stride;
    const std::int64_t steps = p.horizon - 1;  // t = 0 .. H-2
    const std::int64_t vector_steps = steps - steps % W;

    out[steps * p.out_col_stride] = T(0);
    T carry = T(0);
    for (std::int64_t t = steps - 1; t >= vector_steps; --t) {
        carry = step(v, rw, d, imp, t, carry, p.s);
        out[t * p.out_col_stride] = carry;
    }
    const V gamma = simd::splat<T>(p.s.gamma), gamma_lambda = simd::splat<T>(p.s.gamma_lambda);
    const V rho_clip = simd::splat<T>(p.s.rho_clip), c_clip = simd::splat<T>(p.s.c_clip);
    const V one = simd::splat<T>(T(1));
    V chained = simd::splat<T>(carry);
    for (std::int64_t t = vector_steps - W; t >= 0; t -= W) {
        const V importance = simd::load<T>(imp + t);
        const V not_done = one - simd::load<T>(d + t + 1);
        V delta = simd::clip<T>(importance, rho_clip) *
                  (simd::load<T>(rw + t + 1) + gamma * simd::load<T>(v + t + 1) * not_done - simd::load<T>(v + t));
        V decay = gamma_lambda * simd::clip<T>(importance, c_clip) * not_done;
        simd::reverse_scan<T>(delta, decay);
        const V a = delta + decay * chained;
        if (p.out_col_stride == 1) {
            simd::store<T>(out + t, a);
        } else {
            for (int i = 0; i < W; ++i) out[(t + i) * p.out_col_stride] = a[i];
        }
        chained = simd::broadcast_first<T>(a);
    }
}

// Time-major data ([H, rows] memory viewed as [rows, H], as CleanRL and SB3
// store rollouts): at each step the tile's rows are adjacent in memory, so W
// rows fill a vector and the recurrence runs across rows with no scan at all.
// Tiles are wide (kTimeMajorRows) because every step lands on another page:
// 16-row tiles spent their time in TLB misses here (1.4 GB/s).
template <typename T>
PUFF_SIMD_CLONES void tile_time_major(const puff_views<T>& p, std::int64_t first, int count) {
    using V = simd::vec<T>;
    constexpr int W = simd::lanes<T>::width;
    const T gamma = p.s.gamma, gamma_lambda = p.s.gamma_lambda, rho_clip = p.s.rho_clip, c_clip = p.s.c_clip;
    const int vector_rows = count - count % W;
    auto at = [first](const strided<T>& m, std::int64_t t) { return m.data + first + t * m.col_stride; };
    auto out_at = [&](std::int64_t t, int row) {
        return p.out + (first + row) * p.out_row_stride + t * p.out_col_stride;
    };
    alignas(64) T carry[kTimeMajorRows] = {};
    for (int row = 0; row < count; ++row) *out_at(p.horizon - 1, row) = T(0);
    for (std::int64_t t = p.horizon - 2; t >= 0; --t) {
        const T *v = at(p.values, t), *v_next = at(p.values, t + 1), *rw_next = at(p.rewards, t + 1);
        const T *d_next = at(p.dones, t + 1), *imp = at(p.importance, t);
        for (int row = 0; row < vector_rows; row += W) {
            const V importance = simd::load<T>(imp + row);
            const V not_done = simd::splat<T>(T(1)) - simd::load<T>(d_next + row);
            const V delta = simd::clip<T>(importance, simd::splat<T>(rho_clip)) *
                            (simd::load<T>(rw_next + row) + gamma * simd::load<T>(v_next + row) * not_done -
                             simd::load<T>(v + row));
            const V a = delta + gamma_lambda * simd::clip<T>(importance, simd::splat<T>(c_clip)) * not_done *
                                    simd::load<T>(carry + row);
            simd::store<T>(carry + row, a);
            if (p.out_row_stride == 1) {
                simd::store<T>(out_at(t, row), a);
            } else {
                for (int i = 0; i < W; ++i) *out_at(t, row + i) = a[i];
            }
        }
        for (int row = vector_rows; row < count; ++row) {
            const T not_done = T(1) - d_next[row];
            const T delta = clip(imp[row], rho_clip) * (rw_next[row] + gamma * v_next[row] * not_done - v[row]);
            carry[row] = delta + gamma_lambda * clip(imp[row], c_clip) * not_done * carry[row];
            *out_at(t, row) = carry[row];
        }
    }
}

// Any strides: the rows of a tile step backwards together, each element loaded
// through its own strides. Time-major data has adjacent rows here.
template <typename T>
void tile_strided(const puff_views<T>& p, std::int64_t first, int count) {
    constexpr int kRows = 16;
    for (std::int64_t base = first; base < first + count; base += kRows) {
        const int n = static_cast<int>(std::min<std::int64_t>(kRows, first + count - base));
        T a[kRows] = {};
        for (int r = 0; r < n; ++r) p.out[(base + r) * p.out_row_stride + (p.horizon - 1) * p.out_col_stride] = T(0);
        for (std::int64_t t = p.horizon - 2; t >= 0; --t) {
            for (int r = 0; r < n; ++r) {
                const std::int64_t row = base + r;
                auto at = [&](const strided<T>& m, std::int64_t step) {
                    return m.data[row * m.row_stride + step * m.col_stride];
                };
                const T not_done = T(1) - at(p.dones, t + 1);
                const T imp = at(p.importance, t);
                const T delta = clip(imp, p.s.rho_clip) *
                                (at(p.rewards, t + 1) + p.s.gamma * at(p.values, t + 1) * not_done - at(p.values, t));
                a[r] = delta + p.s.gamma_lambda * clip(imp, p.s.c_clip) * not_done * a[r];
                p.out[row * p.out_row_stride + t * p.out_col_stride] = a[r];
            }
        }
    }
}

template <typename T>
strided<T> view_of(const matrix& m) {
    return {static_cast<const T*>(m.data), m.row_stride, m.col_stride};
}

template <typename T>
void run(const puff_arrays& a, const puff_params& params) {
    puff_views<T> p{view_of<T>(a.values), view_of<T>(a.rewards), view_of<T>(a.dones), view_of<T>(a.importance),
                    static_cast<T*>(a.advantages.data), a.advantages.row_stride, a.advantages.col_stride,
                    a.values.rows, a.values.cols,
                    scalars<T>{T(params.gamma), T(params.gamma) * T(params.gae_lambda), T(params.rho_clip),
                               T(params.c_clip)}};
    const bool contiguous = a.values.time_contiguous() && a.rewards.time_contiguous() &&
                            a.dones.time_contiguous() && a.importance.time_contiguous();
    auto rows_adjacent = [](const matrix& m) { return m.row_stride == 1 || m.rows <= 1; };
    const bool time_major = rows_adjacent(a.values) && rows_adjacent(a.rewards) &&
                            rows_adjacent(a.dones) && rows_adjacent(a.importance);
    const std::int64_t tile_rows = !contiguous && time_major ? kTimeMajorRows : kTileRows;
    const std::int64_t tiles = (p.rows + tile_rows - 1) / tile_rows;
    const std::int64_t by_work = std::max<std::int64_t>(1, p.rows * p.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), tiles, by_work}));

    auto do_tile = [&](std::int64_t tile) {
        const std::int64_t first = tile * tile_rows;
        const int count = static_cast<int>(std::min<std::int64_t>(tile_rows, p.rows - first));
        if (contiguous) {
            for (std::int64_t row = first + count - 1; row >= first; --row) row_time_contiguous(p, row);
        } else if (time_major) {
            tile_time_major(p, first, count);
        } else {
            tile_strided(p, first, count);
        }
    };
    parallel_ranges(threads, tiles, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t tile = begin; tile < end; ++tile) do_tile(tiles - 1 - tile);
    });
}

}  // namespace

void puff_advantage_cpu(const puff_arrays& arrays, const puff_params& params) {
    if (arrays.values.type == dtype::float64)
        run<double>(arrays, params);
    else
        run<float>(arrays, params);
}

}  // namespace puffadv::detail
