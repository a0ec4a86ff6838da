// Traversal 2 of the general CPU kernels (conventions_cpu.cpp): blocks of rows
// of any layout stepping back through time, one line of rows per step, which
// for time-major [T, B] data is contiguous memory, vectorised across rows.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cpu/conventions_cpu_stages.hpp"

namespace puffadv::detail::general_kernels {

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

template void block_rows<float>(const kernel_args<float>&, std::int64_t, int, data_error&);
template void block_rows<double>(const kernel_args<double>&, std::int64_t, int, data_error&);

}  // namespace puffadv::detail::general_kernels
