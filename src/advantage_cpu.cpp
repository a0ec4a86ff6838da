// CPU backend of the puff advantage (SPEC section 1).
//
// The naive loop is latency-bound: one dependent multiply-add chain per row.
// Here each tile of rows is done in two passes over a chunk of time steps:
//   1. delta_t and k_t = gamma*lambda*c_t*(1 - done_{t+1}) for every row of the
//      tile, vectorised along time (plain arithmetic on shifted loads);
//   2. the recurrence A_t = delta_t + k_t * A_{t+1}, with the tile's rows
//      interleaved so their chains overlap in the pipeline.
// Tiles are spread over OpenMP threads. Views whose time steps are not adjacent
// (time-major data, transposes) take a generic strided path instead.
#include <algorithm>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "gpu_backend.hpp"

// Runtime dispatch: an AVX2 clone of the vectorised pass, picked by the loader
// on CPUs that have it, with the portable baseline everywhere else.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(PUFF_NO_CLONES)
#define PUFF_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PUFF_SIMD_CLONES
#endif

namespace puffadv::detail {
namespace {

constexpr int kTileRows = 8;        // interleaved recurrence chains in pass 2
constexpr int kChunkSteps = 512;    // time steps per pass; the tile's scratch stays in L1/L2
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

// Pass 1 for one row, steps [lo, lo + n): time-contiguous inputs.
template <typename T>
inline void deltas_and_decays(const T* v, const T* rw, const T* d, const T* imp, std::int64_t lo,
                              int n, scalars<T> s, T* __restrict delta, T* __restrict decay) {
    for (int j = 0; j < n; ++j) {
        const std::int64_t t = lo + j;
        const T not_done = T(1) - d[t + 1];
        const T rho = clip(imp[t], s.rho_clip);
        const T c = clip(imp[t], s.c_clip);
        delta[j] = rho * (rw[t + 1] + s.gamma * v[t + 1] * not_done - v[t]);
        decay[j] = s.gamma_lambda * c * not_done;
    }
}

PUFF_SIMD_CLONES void deltas_and_decays_f32(const float* v, const float* rw, const float* d,
                                            const float* imp, std::int64_t lo, int n,
                                            scalars<float> s, float* delta, float* decay) {
    deltas_and_decays(v, rw, d, imp, lo, n, s, delta, decay);
}
PUFF_SIMD_CLONES void deltas_and_decays_f64(const double* v, const double* rw, const double* d,
                                            const double* imp, std::int64_t lo, int n,
                                            scalars<double> s, double* delta, double* decay) {
    deltas_and_decays(v, rw, d, imp, lo, n, s, delta, decay);
}
inline void row_pass(const float* v, const float* rw, const float* d, const float* imp,
                     std::int64_t lo, int n, scalars<float> s, float* delta, float* decay) {
    deltas_and_decays_f32(v, rw, d, imp, lo, n, s, delta, decay);
}
inline void row_pass(const double* v, const double* rw, const double* d, const double* imp,
                     std::int64_t lo, int n, scalars<double> s, double* delta, double* decay) {
    deltas_and_decays_f64(v, rw, d, imp, lo, n, s, delta, decay);
}

// Pass 2: R independent chains, backwards over one chunk.
template <typename T, int R>
inline void recur_chunk(const T (*delta)[kChunkSteps], const T (*decay)[kChunkSteps], int n,
                        T* carry, T* const* out, std::int64_t out_col_stride, std::int64_t lo) {
    T a[R];
    for (int r = 0; r < R; ++r) a[r] = carry[r];
    for (int j = n - 1; j >= 0; --j) {
        const std::int64_t offset = (lo + j) * out_col_stride;
        for (int r = 0; r < R; ++r) {
            a[r] = delta[r][j] + decay[r][j] * a[r];
            out[r][offset] = a[r];
        }
    }
    for (int r = 0; r < R; ++r) carry[r] = a[r];
}

template <typename T>
void recur_chunk_any(int rows, const T (*delta)[kChunkSteps], const T (*decay)[kChunkSteps], int n,
                     T* carry, T* const* out, std::int64_t out_col_stride, std::int64_t lo) {
    switch (rows) {
        case 8: return recur_chunk<T, 8>(delta, decay, n, carry, out, out_col_stride, lo);
        case 7: return recur_chunk<T, 7>(delta, decay, n, carry, out, out_col_stride, lo);
        case 6: return recur_chunk<T, 6>(delta, decay, n, carry, out, out_col_stride, lo);
        case 5: return recur_chunk<T, 5>(delta, decay, n, carry, out, out_col_stride, lo);
        case 4: return recur_chunk<T, 4>(delta, decay, n, carry, out, out_col_stride, lo);
        case 3: return recur_chunk<T, 3>(delta, decay, n, carry, out, out_col_stride, lo);
        case 2: return recur_chunk<T, 2>(delta, decay, n, carry, out, out_col_stride, lo);
        default: return recur_chunk<T, 1>(delta, decay, n, carry, out, out_col_stride, lo);
    }
}
static_assert(kTileRows == 8, "recur_chunk_any unrolls up to 8 rows");

template <typename T>
struct puff_views {
    strided<T> values, rewards, dones, importance;
    T* out;
    std::int64_t out_row_stride, out_col_stride;
    std::int64_t rows, horizon;
    scalars<T> s;
};

// Rows [first, first + count) of a problem whose inputs are time-contiguous.
template <typename T>
void tile_time_contiguous(const puff_views<T>& p, std::int64_t first, int count) {
    alignas(64) T delta[kTileRows][kChunkSteps];
    alignas(64) T decay[kTileRows][kChunkSteps];
    T carry[kTileRows] = {};
    T* out[kTileRows];
    for (int r = 0; r < count; ++r) {
        out[r] = p.out + (first + r) * p.out_row_stride;
        out[r][(p.horizon - 1) * p.out_col_stride] = T(0);
    }
    for (std::int64_t hi = p.horizon - 1; hi > 0; hi -= kChunkSteps) {  // steps [lo, hi)
        const std::int64_t lo = std::max<std::int64_t>(0, hi - kChunkSteps);
        const int n = static_cast<int>(hi - lo);
        for (int r = 0; r < count; ++r) {
            const std::int64_t row = first + r;
            row_pass(p.values.row(row), p.rewards.row(row), p.dones.row(row), p.importance.row(row), lo,
                     n, p.s, delta[r], decay[r]);
        }
        recur_chunk_any<T>(count, delta, decay, n, carry, out, p.out_col_stride, lo);
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
    const std::int64_t tiles = (p.rows + kTileRows - 1) / kTileRows;
    const std::int64_t by_work = std::max<std::int64_t>(1, p.rows * p.horizon / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), tiles, by_work}));

    auto do_tile = [&](std::int64_t tile) {
        const std::int64_t first = tile * kTileRows;
        const int count = static_cast<int>(std::min<std::int64_t>(kTileRows, p.rows - first));
        if (contiguous)
            tile_time_contiguous(p, first, count);
        else
            tile_strided(p, first, count);
    };
#if defined(_OPENMP)
    if (threads > 1) {
#pragma omp parallel for schedule(static) num_threads(threads)
        for (std::int64_t tile = 0; tile < tiles; ++tile) do_tile(tile);
        return;
    }
#endif
    for (std::int64_t tile = 0; tile < tiles; ++tile) do_tile(tile);
}

}  // namespace

void puff_advantage_cpu(const puff_arrays& arrays, const puff_params& params) {
    if (arrays.values.type == dtype::float64)
        run<double>(arrays, params);
    else
        run<float>(arrays, params);
}

}  // namespace puffadv::detail
