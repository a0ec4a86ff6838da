// One-pass SIMD kernel of the estimator family (discounted returns, Retrace,
// Q(lambda), episodic sums) for time-contiguous rows ([B, T] data), and which
// calls the family's SIMD kernels serve. As conventions_cpu_simd.cpp does for
// GAE: a block of W steps produces its maps (conventions_simd.hpp), scans them
// in registers (cpu_scan.hpp; episodic_sum forwards) and chains to the next
// block through one multiply-add; each input is loaded once, each output stored
// once. The lookahead (Retrace's c_{t+1}, Q(lambda)'s greedy_{t+1}) is the
// block's own vector shifted by one lane, the later block's first lane shifted
// in. Horizons that are no multiple of W keep the general kernel.
#include <cstdint>

#include "cpu/conventions_cpu_family.hpp"
#include "cpu/conventions_simd.hpp"

namespace puffadv::detail {
namespace simd_kernels {
namespace {

// Backward kinds walk the rows in descending order, each from its last step
// down; episodic_sum ascending, each from its first step up: either way each
// array is read as one stream (the prefetcher's best case; advantage_cpu.cpp).
template <typename C, typename F, family_kind K>
PUFF_SIMD_CLONES bad_step family_rows_along_time(const family_args<C>& a, std::int64_t first, int count) {
    constexpr bool kForward = K == family_kind::episodic;
    const family_coefficients<C> k = splat_family_coefficients<C>(a);
    const bool want_sums = wants_sums(a.abs_sums, a.sums, a.square_sums);
    const bool stream = a.simd_stream;
    const bool q_read = K == family_kind::retrace || (a.values.present && (a.advantages.present || want_sums));
    const std::int64_t T = a.horizon;  // a multiple of W, at least W (family_simd_serves)
    M<C> none{};
    const M<C> last_lane = simd::shift_down<1>(none, none == none, std::make_index_sequence<W<C>>{});
    bad_step bad;
    for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t row = kForward ? first + j : first + count - 1 - j;
        const C* r = at<C>(a.rewards, row, 0);
        const C* q = a.values.present ? at<C>(a.values, row, 0) : nullptr;
        const C* nv = a.next_values.present ? at<C>(a.next_values, row, 0) : nullptr;
        const F* term = static_cast<const F*>(a.terminated.at(row, 0));
        const F* trunc = a.truncated.present ? static_cast<const F*>(a.truncated.at(row, 0)) : nullptr;
        const C* tp = K == family_kind::retrace ? at<C>(a.target, row, 0) : nullptr;
        const C* bp = K == family_kind::retrace ? at<C>(a.behaviour, row, 0) : nullptr;
        const F* greedy = a.greedy.present ? static_cast<const F*>(a.greedy.at(row, 0)) : nullptr;
        C* adv = out_at<C>(a.advantages, row, 0);
        C* ret = out_at<C>(a.returns, row, 0);
        if (K == family_kind::discounted && trunc && j + 1 < count) {  // the next row's truncations
            const std::int64_t next = row - 1;
            const char* boot = static_cast<const char*>(a.bootstrap.at(next, 0));
            const std::int64_t stride = a.bootstrap.col_stride * a.bootstrap.size;
            prefetch_bootstraps<C, F>(static_cast<const F*>(a.truncated.at(next, 0)), T, boot, stride);
        }
        simd::double_sums sums;
        // The carry: S_{t+W} (backwards) or S_{t-1} (episodic_sum: the seed C_{-1}, or 0).
        V<C> chained = simd::splat<C>(K == family_kind::episodic && a.last_value.present
                                          ? *at<C>(a.last_value, row, 0)
                                          : C(0));
        V<C> later_block = simd::splat<C>(C(0));  // the later block's first c or greedy, in every lane (c_T = 0)
        M<C> earlier_dones{};                      // episodic_sum: the earlier block's dones (none at first)
        const C end = K == family_kind::discounted ? family_value_after_end<C>(a, row) : C(0);
        for (std::int64_t b = 0; b < T; b += W<C>) {
            const std::int64_t t = kForward ? b : T - W<C> - b;
            const bool top = !kForward && b == 0;  // holds the row's last step
            family_inputs<C> in{};
            in.r = simd::load<C>(r + t);
            in.terminated = simd::set_lanes<C>(term + t);
            if (K == family_kind::episodic) {
                in.done = a.reset_at_start ? in.terminated : simd::shift_in_earlier<C>(in.terminated, earlier_dones);
                earlier_dones = in.terminated;
            } else {
                in.done = in.terminated;
                if (K == family_kind::discounted)
                    in.boot = top ? simd::shift_in<C>(simd::splat<C>(C(0)), simd::splat<C>(end)) : simd::splat<C>(C(0));
                else
                    in.boot = simd::load<C>(nv + t);
                if (trunc) {
                    const M<C> truncated = simd::set_lanes<C>(trunc + t);
                    if (simd::any_lane<C>(truncated)) {
                        if (K == family_kind::discounted)
                            in.boot = bootstrap_truncated<C, F>(a, in.boot, trunc + t, term + t, row, 0, t, 1, bad);
                        else if (simd::any_lane<C>(truncated & in.terminated))
                            keep_both_set<C>(truncated & in.terminated, row, 0, t, 1, bad);
                        in.done |= truncated;
                    }
                }
            }
            if (K == family_kind::retrace || q_read) in.q = simd::load<C>(q + t);
            if (K == family_kind::retrace || K == family_kind::q_lambda) {
                const V<C> now = K == family_kind::retrace
                                     ? retrace_trace<C>(k, simd::load<C>(tp + t), simd::load<C>(bp + t))
                                 : greedy ? flag_values<C, F>(k, greedy + t)
                                          : k.one;
                in.later = simd::shift_in<C>(now, later_block);  // lane i: step t + i + 1
                later_block = simd::broadcast_first<C>(now);
                if (K == family_kind::q_lambda && top) in.done |= last_lane;  // the trace is cut past the row
            }
            maps<C> m = produce_family<C, K>(k, in);
            if (kForward)
                simd::forward_scan<C>(m.delta, m.decay);
            else
                simd::reverse_scan<C>(m.delta, m.decay);
            const V<C> s = m.delta + m.decay * chained;
            chained = kForward ? simd::broadcast_last<C>(s) : simd::broadcast_first<C>(s);
            const V<C> advantage = family_advantage<C, K>(s, in.q, q_read);
            store_output(stream, adv ? adv + t : nullptr, advantage);
            store_output(stream, ret ? ret + t : nullptr, family_return<C, K>(s, in.q));
            if (want_sums) sums.add(advantage);
        }
        if (want_sums) {
            double totals[3] = {0, 0, 0};
            sums.total_into(totals);
            write_row_sums(a, row, totals);
        }
    }
    if (stream) simd::fence();
    return bad;
}

template <typename C, typename F, family_kind K>
struct family_along_time {
    static bad_step run(const family_args<C>& a, std::int64_t first, int count) {
        // n_step_returns in [B, T] keeps the general tiles (family_simd_serves): never called.
        if constexpr (K == family_kind::n_step) return bad_step{};
        else return family_rows_along_time<C, F, K>(a, first, count);
    }
};

}  // namespace
}  // namespace simd_kernels

template <typename C>
bool family_simd_serves(const family_args<C>& a, bool time_contiguous) {
    using simd_kernels::byte_flags;
    constexpr dtype own = sizeof(C) == 8 ? dtype::float64 : dtype::float32;
    constexpr int width = family_simd_width<C>;
    // n_step_returns: [T, B] windows of at most kFamilySimdWindow steps (shorter than the row: longer
    // ones take other paths before this, conventions_cpu_family.cpp); [B, T] keeps the tiles.
    const bool windows = a.kind == estimator::n_step_returns && !time_contiguous && a.n <= kFamilySimdWindow;
    const bool kind = a.kind == estimator::discounted_returns || a.kind == estimator::q_lambda ||
                      a.kind == estimator::episodic_sum || (a.kind == estimator::retrace && !a.log_probs) ||
                      windows;
    if (!kind || a.rewards.type != own) return false;
    if (time_contiguous ? a.horizon < width || a.horizon % width != 0 : a.rows < width) return false;
    for (const view* v : {&a.values, &a.last_value, &a.bootstrap, &a.next_values, &a.target, &a.behaviour,
                          &a.advantages, &a.returns})
        if (v->present && v->type != own) return false;
    const bool bytes = byte_flags(a.terminated.type);
    if (!bytes && a.terminated.type != own) return false;
    for (const view* v : {&a.truncated, &a.greedy})
        if (v->present && (byte_flags(v->type) != bytes || (!bytes && v->type != own))) return false;
    // The layout the traversal loads vectors along; bootstrap and last_value are read per element.
    for (const view* v : {&a.rewards, &a.values, &a.terminated, &a.truncated, &a.next_values, &a.target,
                          &a.behaviour, &a.greedy, &a.advantages, &a.returns}) {
        if (!v->present) continue;
        if (time_contiguous ? v->col_stride != 1 : v->row_stride != 1 && a.rows > 1) return false;
    }
    return true;
}

template <typename C>
bool family_simd_streams(const family_args<C>& a, bool time_contiguous) {
    return a.streaming && simd_kernels::outputs_stream_aligned(a.advantages, a.returns, time_contiguous);
}

template <typename C>
bad_step family_simd_rows(const family_args<C>& a, std::int64_t first, int count) {
    return simd_kernels::family_dispatch<C, simd_kernels::family_along_time>(a, first, count);
}

template bool family_simd_serves(const family_args<float>&, bool);
template bool family_simd_serves(const family_args<double>&, bool);
template bool family_simd_streams(const family_args<float>&, bool);
template bool family_simd_streams(const family_args<double>&, bool);
template bad_step family_simd_rows(const family_args<float>&, std::int64_t, int);
template bad_step family_simd_rows(const family_args<double>&, std::int64_t, int);

}  // namespace puffadv::detail
