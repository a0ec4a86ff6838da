// Private to the general (scratch-line) kernels of the estimator family: helpers
// the row-block traversal (conventions_cpu_family.cpp) and the tile and long-window
// traversals (conventions_cpu_family_tiles.cpp) share, and the latter's entries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "cpu/conventions_cpu_family.hpp"
#include "cpu/conventions_cpu_lines.hpp"

namespace puffadv::detail {

// Stores n results of a line. Large outputs of type C with adjacent elements are
// streamed past the caches (non-temporal stores): they would not stay cached for
// whoever reads them next, and a normal store first reads each line it writes.
template <typename C>
void store_line(const view& out, std::int64_t row, std::int64_t t, std::int64_t stride, int n, const C* in,
                bool streaming) {
#if defined(__SSE2__)
    if (streaming && stride == 1 && out.type == dtype_of<C>) {
        C* p = static_cast<C*>(out.at(row, t));
        int j = 0;
        for (; j < n && reinterpret_cast<std::uintptr_t>(p + j) % 16 != 0; ++j) p[j] = in[j];
        if constexpr (sizeof(C) == 4)
            for (; j + 4 <= n; j += 4) _mm_stream_ps(p + j, _mm_loadu_ps(in + j));
        else
            for (; j + 2 <= n; j += 2) _mm_stream_pd(p + j, _mm_loadu_pd(in + j));
        for (; j < n; ++j) p[j] = in[j];
        return;
    }
#endif
    store<C>(out.type, out.at(row, t), stride, n, in);
}

// The value V'_t after the buffer's last step: last_value, bootstrap_values[T-1], or 0 (discounted_returns).
template <typename C>
C value_after_end(const family_args<C>& a, std::int64_t row) {
    if (a.last_value.present) return load_one<C>(a.last_value, row, 0);
    if (a.bootstrap.present) return load_one<C>(a.bootstrap, row, a.horizon - 1);
    return C(0);
}

template <typename C>
bool is_window(const family_args<C>& a) {
    return a.kind == estimator::n_step_returns;
}

// A flag as 0 or 1 (non-zero, NaN included, is set), as load() converts flags.
// Integer masks: a float compare-and-select would need -fno-trapping-math to vectorise.
template <typename C>
inline C as_flag(C x) {
    using U = std::conditional_t<sizeof(C) == 4, std::uint32_t, std::uint64_t>;
    U bits, one;
    const C unit = C(1);
    std::memcpy(&bits, &x, sizeof bits);
    std::memcpy(&one, &unit, sizeof one);
    bits = one & ((bits << 1) == 0 ? U(0) : ~U(0));  // the shift drops the sign: -0 is clear
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// Q(lambda) is scanned in its returns, G_t = b_t + k_t G_{t+1} with k_t = gamma lambda_t where the
// trace goes on (not done, not the row's last step) and 0 where it stops, and
//     b_t = r_t + gamma (1 - lambda_t) nv_t          where the trace goes on,
//         = r_t + gamma (1 - term_t) nv_t            where it stops (done: 1 there);
// the advantages G_t - q_t come after the scan. The target does not read q (rlax's q_lambda:
// lambda-returns over max_a Q(s_{t+1}, a)), so a NaN q_t reaches A_t alone; the delta form
// (A_t over q_{t+1}) carried it into every earlier step of the row. Peng's lambda = 1 drops nv_t
// exactly, so float32 returns near 0 keep their accuracy beside next values of 1e3. Flags are 0 or 1.
template <typename C>
inline C q_lambda_base(C r, C nv, C term, C done, C gamma, C lambda_t) {
    const C stop = zero_where_set(term, gamma * nv);
    const C go = gamma * ((C(1) - lambda_t) * nv);
    return r + zero_where_set(C(1) - done, stop) + zero_where_set(done, go);
}

// ---- conventions_cpu_family_tiles.cpp ----

/// Rows per unit of thread work of the tile traversal (interleaved recurrence chains).
constexpr int kFamilyTileRows = 8;

/// Whether the tiles serve a call: time-contiguous rows ([B, T]) of at least 2 steps, and
/// n_step_returns windows of at most 16 steps.
template <typename C>
bool family_tiles_serve(const family_args<C>& a);

/// Rows [first, first + count) (at most kFamilyTileRows) of time-contiguous data, chunks of
/// steps produced along time, the rows' recurrences interleaved.
template <typename C>
bad_step family_tiles(const family_args<C>& a, std::int64_t first, int count);

/// n_step_returns windows longer than kFamilySimdWindow and shorter than the row take one
/// O(T) pass per row (family_long_windows) instead of the O(T n) window.
template <typename C>
bool is_long_window(const family_args<C>& a) {
    return is_window(a) && a.n > kFamilySimdWindow && a.n < a.horizon;
}

/// Rows [first, first + count), one at a time, in O(T) each.
template <typename C>
bad_step family_long_windows(const family_args<C>& a, std::int64_t first, std::int64_t count);

}  // namespace puffadv::detail
