// One-pass SIMD kernel of the standard conventions (GAE, TD(lambda), V-trace)
// for time-contiguous rows ([B, T] data), for the calls most code makes:
// float32 or float64 arrays, flags of that type or bool/uint8 (the rest takes the
// general kernel of conventions_cpu.cpp, which converts lines into scratch
// first). Each input is loaded once into vector registers and each output
// stored once, as in the puff kernel (advantage_cpu.cpp): a block of W steps
// produces its maps (conventions_simd.hpp), scans them in registers
// (cpu_scan.hpp) and chains to the next block through one multiply-add.
#include <algorithm>
#include <cstdint>

#include "cpu/conventions_simd.hpp"

namespace puffadv::detail {
namespace simd_kernels {
namespace {

// The W steps from t of one row; pointers are at step t (the caller's memory or
// a padded copy of the top block). `chained` is A_{t+W} on entry, A_t on exit.
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_INLINE void steps_block(const kernel_args<C>& a, const coefficients<C>& k, std::int64_t row,
                                  std::int64_t t, const C* r, const C* v, V<C> v_next, const F* term,
                                  const F* trunc, const C* imp, V<C>& chained, C* adv, C* ret, bool stream,
                                  simd::double_sums* sums, bad_step& bad) {
    const V<C> values = simd::load<C>(v);
    const M<C> terminated = simd::set_lanes<C>(term);
    M<C> done = terminated;
    if (trunc) {
        const M<C> truncated = simd::set_lanes<C>(trunc);
        if (simd::any_lane<C>(truncated)) {
            v_next = bootstrap_truncated<C, F>(a, v_next, trunc, term, row, 0, t, 1, bad);
            done |= truncated;
        }
    }
    maps<C> m = produce<C, kImp, kPg>(k, simd::load<C>(r), values, v_next, terminated, done,
                                      kImp ? simd::load<C>(imp) : k.one);
    simd::reverse_scan<C>(m.delta, m.decay);
    const V<C> advantage = m.delta + m.decay * chained;  // A_t .. A_{t+W-1}
    V<C> out = advantage;
    if (kPg) out = m.q + m.p * simd::shift_in<C>(advantage, chained);  // needs A_{t+1} .. A_{t+W}
    chained = simd::broadcast_first<C>(advantage);
    store_output(stream, adv, out);
    store_output(stream, ret, advantage + values);
    if (sums) sums->add(out);
}

// The top block of a row when it has n < W steps [t, horizon): through copies
// padded with terminated steps of zeros, whose maps are exactly 0 and leave
// A_{horizon} = 0. Out of line (once a row, and only for horizons that are no
// multiple of W), so compiled once for the baseline: the vectors cross by
// reference only, which both clones lay out alike.
template <typename C, typename F, bool kImp, bool kPg>
__attribute__((noinline)) void partial_top_block(const kernel_args<C>& a, const coefficients<C>& k,
                                                 std::int64_t row, std::int64_t t, int n, const C* r,
                                                 const C* v, const F* term, const F* trunc, const C* imp, C end,
                                                 V<C>& chained, C* adv, C* ret, simd::double_sums* sums,
                                                 bad_step& bad) {
    alignas(32) C r_pad[W<C>] = {}, v_pad[W<C>] = {}, vn_pad[W<C>] = {}, imp_pad[W<C>] = {};
    alignas(32) C adv_pad[W<C>], ret_pad[W<C>];
    F term_pad[W<C>], trunc_pad[W<C>] = {};
    std::fill(term_pad, term_pad + W<C>, F(1));
    std::copy(r, r + n, r_pad);
    std::copy(v, v + n, v_pad);
    for (int i = 0; i + 1 < n; ++i) vn_pad[i] = v[i + 1];  // n >= 1
    vn_pad[n - 1] = end;
    std::copy(term, term + n, term_pad);
    if (trunc) std::copy(trunc, trunc + n, trunc_pad);
    if (kImp) std::copy(imp, imp + n, imp_pad);
    // The padding's lanes come out +0 and add nothing to the sums.
    steps_block<C, F, kImp, kPg>(a, k, row, t, r_pad, v_pad, simd::load<C>(vn_pad), term_pad,
                                 trunc ? trunc_pad : nullptr, imp_pad, chained, adv ? adv_pad : nullptr,
                                 ret ? ret_pad : nullptr, false, sums, bad);
    if (adv) std::copy(adv_pad, adv_pad + n, adv);
    if (ret) std::copy(ret_pad, ret_pad + n, ret);
}

// Rows are walked in descending order, each from its last step down, so each
// array is read as one descending stream (the prefetcher's best case; see
// advantage_cpu.cpp).
template <typename C, typename F, bool kImp, bool kPg>
PUFF_SIMD_CLONES bad_step rows_along_time(const kernel_args<C>& a, std::int64_t first, int count) {
    const coefficients<C> k = splat_coefficients(a);
    const bool want_sums = wants_sums(a.abs_sums, a.sums, a.square_sums);
    const std::int64_t horizon = a.horizon;
    const int top = static_cast<int>((horizon - 1) % W<C>) + 1;  // steps in the top block: 1 .. W
    const bool stream = a.stream;
    bad_step bad;
    if (horizon == 0) {  // nothing to estimate, but the row sums are written: zeros
        const double zeros[3] = {0, 0, 0};
        if (want_sums)
            for (std::int64_t row = first; row < first + count; ++row) write_row_sums(a, row, zeros);
        return bad;
    }
    for (std::int64_t row = first + count - 1; row >= first; --row) {
        const C* r = at<C>(a.rewards, row, 0);
        const C* v = at<C>(a.values, row, 0);
        const F* term = static_cast<const F*>(a.dones.at(row, 0));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(row, 0)) : nullptr;
        const C* imp = kImp ? at<C>(a.importance, row, 0) : nullptr;
        C* adv = out_at<C>(a.advantages, row, 0);
        C* ret = out_at<C>(a.returns, row, 0);
        if (trunc && row > 0) {  // the next row's truncations
            const char* boot = static_cast<const char*>(a.bootstrap.at(row - 1, 0));
            const std::int64_t stride = a.bootstrap.col_stride * a.bootstrap.size;
            prefetch_bootstraps<C, F>(static_cast<const F*>(a.truncated.at(row - 1, 0)), horizon, boot, stride);
        }
        simd::double_sums sums;
        simd::double_sums* sums_or_null = want_sums ? &sums : nullptr;
        V<C> chained = simd::splat<C>(C(0));  // A_horizon
        const C end = value_after_end(a, row);
        std::int64_t t = horizon - top;
        if (top == W<C>)  // the last V' is the end value
            steps_block<C, F, kImp, kPg>(a, k, row, t, r + t, v + t,
                                         simd::shift_in<C>(simd::load<C>(v + t), simd::splat<C>(end)), term + t,
                                         trunc ? trunc + t : nullptr, imp + (kImp ? t : 0), chained,
                                         adv ? adv + t : nullptr, ret ? ret + t : nullptr, stream, sums_or_null,
                                         bad);
        else
            partial_top_block<C, F, kImp, kPg>(a, k, row, t, top, r + t, v + t, term + t,
                                               trunc ? trunc + t : nullptr, imp + (kImp ? t : 0), end, chained,
                                               adv ? adv + t : nullptr, ret ? ret + t : nullptr, sums_or_null,
                                               bad);
        for (t -= W<C>; t >= 0; t -= W<C>)
            steps_block<C, F, kImp, kPg>(a, k, row, t, r + t, v + t, simd::load<C>(v + t + 1), term + t,
                                         trunc ? trunc + t : nullptr, imp + (kImp ? t : 0), chained,
                                         adv ? adv + t : nullptr, ret ? ret + t : nullptr, stream, sums_or_null,
                                         bad);
        if (want_sums) {
            double totals[3] = {0, 0, 0};
            sums.total_into(totals);
            write_row_sums(a, row, totals);
        }
    }
    if (stream) simd::fence();
    return bad;
}

template <typename C, typename F, bool kImp, bool kPg>
struct along_time {
    static bad_step run(const kernel_args<C>& a, std::int64_t first, int count) {
        return rows_along_time<C, F, kImp, kPg>(a, first, count);
    }
};

}  // namespace
}  // namespace simd_kernels

template <typename C>
bool standard_simd_serves(const kernel_args<C>& a, bool time_contiguous) {
    using simd_kernels::byte_flags;
    constexpr dtype own = sizeof(C) == 8 ? dtype::float64 : dtype::float32;
    if (a.kind != producer::standard || a.values.type != own) return false;
    for (const view* v : {&a.rewards, &a.last_value, &a.bootstrap, &a.importance, &a.advantages, &a.returns})
        if (v->present && v->type != own) return false;
    const bool bytes = byte_flags(a.dones.type);
    if (!bytes && a.dones.type != own) return false;
    if (a.truncated.present && byte_flags(a.truncated.type) != bytes) return false;
    if (a.truncated.present && !bytes && a.truncated.type != own) return false;
    // The layout each traversal loads vectors along; bootstrap and last_value are read per element.
    for (const view* v : {&a.values, &a.rewards, &a.dones, &a.truncated, &a.importance, &a.advantages,
                          &a.returns}) {
        if (!v->present) continue;
        if (time_contiguous ? v->col_stride != 1 && a.horizon > 1 : v->row_stride != 1 && a.rows > 1)
            return false;
    }
    return true;
}

template <typename C>
bool standard_simd_streams(const kernel_args<C>& a, bool time_contiguous) {
    if (!simd_kernels::outputs_stream_aligned(a.advantages, a.returns, time_contiguous)) return false;
    if (outputs_share_page_lines({&a.advantages, &a.returns}, {&a.rewards, &a.values, &a.dones, &a.truncated,
                                                               &a.importance, &a.bootstrap}))
        return false;
    std::int64_t bytes = 0;
    for (const view* v : {&a.advantages, &a.returns})
        if (v->present) bytes += a.rows * a.horizon * v->size;
    return bytes >= kStreamingBytes;
}

template <typename C>
bad_step standard_simd_rows(const kernel_args<C>& a, std::int64_t first, int count) {
    return simd_kernels::dispatch<C, simd_kernels::along_time>(a, first, count);
}

template bool standard_simd_serves(const kernel_args<float>&, bool);
template bool standard_simd_serves(const kernel_args<double>&, bool);
template bool standard_simd_streams(const kernel_args<float>&, bool);
template bool standard_simd_streams(const kernel_args<double>&, bool);
template bad_step standard_simd_rows(const kernel_args<float>&, std::int64_t, int);
template bad_step standard_simd_rows(const kernel_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
