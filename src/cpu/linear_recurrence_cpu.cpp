// linear_recurrence on the calls the CPU engine does not serve (bfloat16 and
// float16 inputs, mixed dtypes between inputs and output, strides that are
// neither time- nor row-contiguous): each row in chunks of steps, loaded and
// converted into scratch of the arithmetic type (float for 16-bit inputs),
// scanned in order, and stored converted. The engine serves the rest
// (advantage_cpu.cpp, estimators_recurrence.hpp); the results are the same
// recurrence term by term: y_t = x_t + a_t y_{t-/+1}, y outside the row the seed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/conventions_detail.hpp"
#include "cpu/conventions_cpu_lines.hpp"
#include "cpu/cpu_threads.hpp"

namespace puffadv::detail {
namespace {

constexpr int kChunk = 1024;                       // steps converted at once
constexpr std::int64_t kElementsPerThread = 1 << 15;

template <typename C>
void run_rows(const standard_arrays& s, bool reverse, std::int64_t first, std::int64_t end) {
    const view x = view_of(s.rewards), a = view_of(s.decay), seed = view_of(s.last_value);
    const view out = view_of(s.advantages), returns = view_of(s.fused.returns);
    const struct {
        view abs_sums, sums, square_sums;
    } row_sums{view_of(s.fused.abs_sums), view_of(s.fused.sums), view_of(s.fused.square_sums)};
    const bool want_sums = s.fused.abs_sums || s.fused.sums || s.fused.square_sums;
    const std::int64_t T = s.rewards.cols;
    C xs[kChunk], as[kChunk];
    for (std::int64_t row = first; row < end; ++row) {
        C y = seed.present ? load_one<C>(seed, row, 0) : C(0);
        double totals[3] = {0, 0, 0};  // sum |y|, sum y, sum y^2
        for (std::int64_t done = 0; done < T; done += kChunk) {
            const int n = static_cast<int>(std::min<std::int64_t>(kChunk, T - done));
            const std::int64_t t0 = reverse ? T - done - n : done;  // the chunk's first step in memory
            load<C>(x.type, x.at(row, t0), x.col_stride, n, xs, false);
            load<C>(a.type, a.at(row, t0), a.col_stride, n, as, false);
            if (reverse) {
                for (int i = n - 1; i >= 0; --i) xs[i] = y = xs[i] + as[i] * y;
            } else {
                for (int i = 0; i < n; ++i) xs[i] = y = xs[i] + as[i] * y;
            }
            for (const view* o : {&out, &returns})
                if (o->present) store<C>(o->type, o->at(row, t0), o->col_stride, n, xs);
            if (want_sums)
                for (int i = 0; i < n; ++i) {
                    const double v = xs[i];
                    totals[0] += v < 0 ? -v : v, totals[1] += v, totals[2] += v * v;
                }
        }
        if (want_sums) write_row_sums(row_sums, row, totals);
    }
}

}  // namespace

void linear_recurrence_general_cpu(const standard_arrays& arrays, const standard_params& params) {
    const std::int64_t rows = arrays.rewards.rows;
    const std::int64_t by_work = std::max<std::int64_t>(1, rows * arrays.rewards.cols / kElementsPerThread);
    const int threads = static_cast<int>(std::min<std::int64_t>({cpu_thread_count(), rows, by_work}));
    const bool wide = arrays.rewards.type == dtype::float64;
    parallel_ranges(threads, rows, [&](std::int64_t begin, std::int64_t end) {
        if (wide)
            run_rows<double>(arrays, params.reverse, begin, end);
        else
            run_rows<float>(arrays, params.reverse, begin, end);
    });
}

}  // namespace puffadv::detail
