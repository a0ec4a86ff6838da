// Private to the CPU engine (engine*.hpp, n_step_returns.cpp): the typed
// strided views it reads through, the sizes of its units of work, row sums.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

#include "core/conventions_detail.hpp"

namespace puffadv::detail {

/// Rows per unit of thread work for the engine on time-contiguous rows:
/// each unit ends with a store fence when the
/// outputs are streamed, and units of 8 rows made 2 threads slower than one.
constexpr int kSimdTileRows = 64;

/// Outputs of at least this many bytes are streamed past the caches (see
/// engine::streams): they would not stay cached beside the inputs.
constexpr std::int64_t kStreamingBytes = std::int64_t(1) << 24;

/// Rows per unit of thread work across rows (time-major [T, B] data above all):
/// the smallest block of simd_block_rows.
constexpr int kBlockRows = 256;

/// Rows of a block across rows, which reads each step's line of a block as one
/// run: long runs stream, short ones wait on memory (65536x128 f32 time-major
/// GAE, one thread: 13 ms in 256-row blocks, 10 ms in 4096, 7 ms in 16384).
/// So a block is an eighth of the rows (parallel work for 8 threads), at least
/// kBlockRows and at most 16384 rows (64 KB float32 lines).
inline std::int64_t simd_block_rows(std::int64_t rows) {
    const std::int64_t eighth = (rows + 8 * kBlockRows - 1) / (8 * kBlockRows) * kBlockRows;
    return eighth < kBlockRows ? kBlockRows : eighth > 16384 ? 16384 : eighth;
}

/// A [rows, horizon] (or [rows]) array of any dtype, addressed in elements.
struct view {
    char* base = nullptr;
    dtype type = dtype::float32;
    std::int64_t row_stride = 0, col_stride = 0;  // elements
    int size = 4;
    bool present = false;

    void* at(std::int64_t row, std::int64_t t) const {
        return base + (row * row_stride + t * col_stride) * size;
    }
};

/// Whether every present output starts at the same cache line of a 4 KiB page
/// as some present input. NumPy maps large arrays at one offset from a page, so
/// a call's arrays usually do; the outputs then must not be streamed: on a Zen 4
/// EPYC (2026-12-02, benchmarks/bench_cpu_alignment.py) GAE at 65536x128 on one
/// thread took 27 ms with streaming stores there, 9-16 ms with plain stores and
/// 7-14 ms with streaming stores once any output sat one line further.
inline bool outputs_share_page_lines(std::initializer_list<const view*> outputs,
                                     std::initializer_list<const view*> inputs) {
    auto line = [](const view* v) { return reinterpret_cast<std::uintptr_t>(v->base) % 4096 / 64; };
    bool any = false;
    for (const view* out : outputs) {
        if (!out->present) continue;
        bool shared = false;
        for (const view* in : inputs) shared = shared || (in->present && line(in) == line(out));
        if (!shared) return false;
        any = true;
    }
    return any;
}

inline view view_of(const matrix& m) {
    return {static_cast<char*>(m.data), m.type, m.row_stride, m.col_stride,
            static_cast<int>(dtype_size(m.type)), true};
}
inline view view_of(const std::optional<matrix>& m) { return m ? view_of(*m) : view{}; }

/// Stores one row's sums of |A|, A and A^2 (accumulated in double) into the
/// present [rows] outputs, float32 or float64.
inline void write_row_sums(const view& abs_sums, const view& sums, const view& square_sums, std::int64_t row,
                           const double* totals) {
    const view* outs[3] = {&abs_sums, &sums, &square_sums};
    for (int i = 0; i < 3; ++i) {
        if (!outs[i]->present) continue;
        void* p = outs[i]->at(row, 0);
        if (outs[i]->type == dtype::float64)
            *static_cast<double*>(p) = totals[i];
        else
            *static_cast<float*>(p) = static_cast<float>(totals[i]);
    }
}

/// The first (row, step) a kernel found with terminated and truncated both set; row < 0: none.
struct bad_step {
    std::int64_t row = -1, step = -1;
    void keep_first(std::int64_t r, std::int64_t t) {
        if (row < 0 || r < row || (r == row && t < step)) row = r, step = t;
    }
};

}  // namespace puffadv::detail
