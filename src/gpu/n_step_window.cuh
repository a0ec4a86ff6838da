// n-step bootstrapped returns on the GPU (FAMILY.md 4, rlax's definition with
// a scalar lambda): not a scan but a window of at most n steps per output.
// Two kernels: the vector kernel for contiguous aligned rows and n <= 8 (the
// common case, at memory bandwidth), and the generic one (any layout, any n).
// The engine runs n >= horizon as the TD(lambda) scan (engine.cuh).
#pragma once

#include <type_traits>

#include "gpu/family_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Divides indices below 2^31 by a divisor fixed at launch with a multiply and
/// a shift (the round-up method, as CUTLASS's FastDivmod): the hardware's
/// 32-bit division is a sequence of some twenty instructions per thread.
struct fast_divider {
    std::uint32_t multiplier = 0, shift = 0;  ///< multiplier 0: the divisor is 1

    fast_divider() = default;
    explicit fast_divider(std::uint32_t divisor) {
        if (divisor <= 1) return;
        std::uint32_t log2 = 0;  // ceil(log2(divisor))
        while ((std::uint64_t(1) << log2) < divisor) ++log2;
        const std::uint32_t p = 31 + log2;
        multiplier = std::uint32_t(((std::uint64_t(1) << p) + divisor - 1) / divisor);
        shift = p - 32;
    }
    /// n / divisor, for n < 2^31.
    __device__ __forceinline__ std::uint32_t quotient(std::uint32_t n) const {
        return multiplier ? __umulhi(n, multiplier) >> shift : n;
    }
};

/// keep ? a : b, bit by bit (keep is all ones or all zeros): one instruction
/// (nvcc 13 emits SEL on the predicate the mask came from; else LOP3 / v_bfi),
/// and a NaN on the side not taken never reaches the result, as it would
/// through a multiplication by 0.
template <typename T>
using bit_mask = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;

template <typename T>
__device__ __forceinline__ T select_bits(bit_mask<T> keep, T a, T b) {
    bit_mask<T> x, y;
    __builtin_memcpy(&x, &a, sizeof(T));
    __builtin_memcpy(&y, &b, sizeof(T));
    const bit_mask<T> z = (x & keep) | (y & ~keep);
    T r;
    __builtin_memcpy(&r, &z, sizeof(T));
    return r;
}

/// Steps t .. t + N - 1 of a row of a time-contiguous array (col_stride 1,
/// checked by the host; read_items would multiply by it), in as few accesses
/// as the alignment allows.
template <typename T, int N, typename S>
__device__ __forceinline__ void read_run(const strided_view<S>& v, std::int64_t row, std::int64_t t, T (&x)[N]) {
    using stored = typename std::remove_const<S>::type;
    stored raw[N];
    load_run<N>(static_cast<const stored*>(v.data + row * v.row_stride + t), raw);
#pragma unroll
    for (int j = 0; j < N; ++j) x[j] = widen<T>(raw[j]);
}

/// One 16-byte store. In the vector kernel nvcc 13 split store_run's word (and
/// a plain uint4 assignment) into four 4-byte stores (PTX st.global.u32 x 4
/// for float32, N = 4): four times the store instructions and partial-sector
/// writes. The PTX store says what is meant; __stwb would make it a strong
/// (ordered) store (STG.E.128.STRONG.SM).
__device__ __forceinline__ void store_word(uint4* p, uint4 w) {
#if defined(PUFF_HIP)
    *p = w;
#else
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z), "r"(w.w));
#endif
}

/// The store counterpart of read_run (16-byte words where the run fills them).
template <typename S, typename T, int N>
__device__ __forceinline__ void write_run(const strided_view<S>& v, std::int64_t row, std::int64_t t,
                                          const T (&x)[N]) {
    S raw[N];
#pragma unroll
    for (int j = 0; j < N; ++j) raw[j] = narrowing<S>::to(x[j]);
    S* p = v.data + row * v.row_stride + t;
    constexpr int bytes = N * int(sizeof(S));
    if constexpr (bytes % 16 == 0) {
        std::uint32_t part[bytes / 4];
        __builtin_memcpy(part, raw, bytes);
#pragma unroll
        for (int i = 0; i < bytes / 16; ++i) {
            store_word(reinterpret_cast<uint4*>(p) + i,
                       make_uint4(part[4 * i], part[4 * i + 1], part[4 * i + 2], part[4 * i + 3]));
        }
    } else {
        store_run<N>(p, raw);
    }
}

/// n-step bootstrapped returns: G_t = W^n_t with
///   W^1_s = r_s + gamma (1 - term_s) V'_s,
///   W^j_s = r_s + gamma [(1 - lambda) V'_s + lambda W^{j-1}_{s+1}]  if not done_s and s + 1 < T,
///         = W^1_s otherwise,
/// V'_s the bootstrap as in standard_producer (a step both terminated and
/// truncated is terminated). Writes returns G and advantages G - V_t. The
/// arrays and parameters of both kernels; compute() is the generic kernel's
/// output: one thread walks its window forward (at most n steps, cut by the
/// episode's end or the row's), summing (gamma lambda)^i times each step's
/// term; the window's loads of a warp overlap and come from the L1.
/// Steps (issue 29's forms, the generic kernel only): gamma_s and lambda_s read at
/// each step s of the window in place of the scalars (an absent array: its
/// scalar), and next_values_s as V'_s at every step where given (truncated
/// then only cuts the window; bootstrap_values and last_value are refused).
template <typename T, typename Values = typed_view, typename Flags = Values, typename Out = typed_view,
          bool Steps = false>
struct n_step_window {
    Values values, rewards;
    Flags terminated, truncated;
    Values bootstrap_values, last_value;
    Out advantages, returns;
    std::int64_t rows, horizon, n;
    T gamma, lambda;
    bool time_major;  ///< consecutive threads take consecutive rows (their elements are adjacent)
    Values gamma_steps{}, lambda_steps{};  ///< Steps: per-step arrays (absent: the scalars)
    Values next_values{};                  ///< Steps: V'_s at every step (absent: as without)

    __device__ __forceinline__ T flag(const Flags& f, std::int64_t row, std::int64_t s) const {
        return present(f) ? read<T>(f, row, s) : T(0);
    }
    /// V'_s: values[s+1] inside the buffer, bootstrap_values at a truncated
    /// step and at the last, else last_value.
    __device__ __forceinline__ T bootstrap(std::int64_t row, std::int64_t s, bool truncated_here) const {
        if (s + 1 < horizon && !truncated_here) return read<T>(values, row, s + 1);
        return end_bootstrap(row, s);
    }
    /// V'_s where the buffer does not hold it.
    __device__ __forceinline__ T end_bootstrap(std::int64_t row, std::int64_t s) const {
        if (present(bootstrap_values)) return read<T>(bootstrap_values, row, s);
        return read<T>(last_value, row, 0);
    }

    __device__ __forceinline__ void compute(std::int64_t row, std::int64_t t) const {
        T gamma_s = gamma, gamma_rest = gamma * (T(1) - lambda), gamma_lambda = gamma * lambda;
        T g = T(0), weight = T(1);
        for (std::int64_t s = t;; ++s) {
            const T r = read<T>(rewards, row, s);
            const std::uint32_t f = episode_flags(read<T>(terminated, row, s), flag(truncated, row, s));
            if constexpr (Steps) {
                gamma_s = present(gamma_steps) ? read<T>(gamma_steps, row, s) : gamma;
                const T lambda_s = present(lambda_steps) ? read<T>(lambda_steps, row, s) : lambda;
                gamma_rest = gamma_s * (T(1) - lambda_s), gamma_lambda = gamma_s * lambda_s;
            }
            T v_next = T(0);  // V'_s where given at every step
            bool own_next = false;
            if constexpr (Steps) own_next = present(next_values);
            if (own_next) v_next = read<T>(next_values, row, s);
            if (f == 0u && s + 1 < horizon && s - t + 1 < n) {  // the window goes on
                g += weight * (r + gamma_rest * (own_next ? v_next : read<T>(values, row, s + 1)));
                weight *= gamma_lambda;
                continue;
            }
            // terminated first: a step flagged both reads no bootstrap
            const T last_term = f & 1u ? r : r + gamma_s * (own_next ? v_next : bootstrap(row, s, f & 2u));
            g += weight * last_term;
            break;
        }
        if (present(returns)) write(returns, row, t, g);
        if (present(advantages)) write(advantages, row, t, g - read<T>(values, row, t));
    }
};

/// Outputs per block of the vector kernel as the host sizes its grid: a warp
/// of 32 lanes writes 31 chunks (its top lane only feeds the lane below); a
/// wave of 64 writes 63, so on such a target the grid has blocks to spare.
constexpr unsigned n_step_threads = 256;
constexpr unsigned n_step_chunks_per_block = n_step_threads / 32 * 31;

/// Rows of contiguous arrays, windows of n <= N steps: a thread computes the
/// N outputs t0 .. t0 + N - 1 of a row (a "chunk") from its own N steps, one
/// vector access per array. The host checked that every [rows, horizon] array
/// is time-contiguous and aligned to N elements and that the horizon is a
/// multiple of N, so a row ends only at a chunk's last step.
///
/// Per step s the thread prepares once the window's last term W^1_s, the term
/// of a step the window passes, p_s = r_s + gamma (1 - lambda) V_{s+1}, and
/// whether the window goes on past s (a bit mask: not done, not the row's
/// end); then n - 1 rounds of
///   W^j_s = goes_on_s ? p_s + gamma lambda W^{j-1}_{s+1} : W^1_s
/// over its N steps, one fused multiply-add and one bit select a step. W at
/// s + 1 = t0 + N is the next lane's W^{j-1} at its first step (one shuffle a
/// round), and V_{t0+N} its first value; n is uniform, so every lane takes the
/// same rounds. The top lane of a warp has no next lane: its chunk is also the
/// next warp's first (loaded twice: 1/31 more reads) and it writes nothing.
/// Its own values go wrong only from its last step down, one step a round,
/// and the lane below reads its W^{j-1} at step 0 for j <= n <= N: correct.
/// Truncations (with bootstrap_values) are a template parameter: without them
/// two arrays and their flag logic leave the hot path.
template <int N, bool Truncations, typename T, typename Values, typename Flags, typename Out>
__global__ void __launch_bounds__(n_step_threads)
    n_step_vector_kernel(n_step_window<T, Values, Flags, Out> w, fast_divider chunks_per_row_divider,
                         std::uint64_t chunks) {
    constexpr int warp = physical_warp_size;
    const unsigned lane = threadIdx.x % warp;
    const std::uint64_t chunk =
        (static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / warp * (warp - 1) + lane;
    const bool loads = chunk < chunks;  // every lane still takes part in the shuffles
    const bool writes = loads && lane != warp - 1;
    const std::uint64_t per_row = static_cast<std::uint64_t>(w.horizon / N);
    const std::uint64_t row_u =
        chunks < (std::uint64_t(1) << 31) ? chunks_per_row_divider.quotient(std::uint32_t(chunk)) : chunk / per_row;
    const std::int64_t row = std::int64_t(row_u), t0 = std::int64_t(chunk - row_u * per_row) * N;
    const bool row_ends = t0 + N == w.horizon;  // at this chunk's last step

    T r[N], v[N], d[N], u[N], b[N];
#pragma unroll
    for (int j = 0; j < N; ++j) r[j] = v[j] = d[j] = u[j] = b[j] = T(0);
    T end_value = T(0);  // V' at the row's last step without truncations
    if (loads) {
        read_run(w.rewards, row, t0, r);
        read_run(w.values, row, t0, v);
        read_run(w.terminated, row, t0, d);
        if constexpr (Truncations) {
            read_run(w.truncated, row, t0, u);
            read_run(w.bootstrap_values, row, t0, b);
        } else if (row_ends) {
            end_value = w.end_bootstrap(row, w.horizon - 1);
        }
    }
    const T next_value = shfl_down<warp>(v[0], 1);  // V_{t0+N}, from the next lane

    const T gamma_rest = w.gamma * (T(1) - w.lambda), gamma_lambda = w.gamma * w.lambda;
    T last_term[N], passing[N];
    bit_mask<T> goes_on[N];
#pragma unroll
    for (int s = 0; s < N; ++s) {
        const T later_value = s + 1 < N ? v[s + 1] : next_value;
        const bool terminated = d[s] != T(0), truncated = Truncations && u[s] != T(0);
        const bool end = s == N - 1 && row_ends;
        T bootstrap = later_value;
        if constexpr (Truncations) {
            if (truncated || end) bootstrap = b[s];
        } else if (end) {
            bootstrap = end_value;
        }
        last_term[s] = terminated ? r[s] : r[s] + w.gamma * bootstrap;  // terminated first (issue 33)
        passing[s] = r[s] + gamma_rest * later_value;
        goes_on[s] = terminated || truncated || end ? bit_mask<T>(0) : ~bit_mask<T>(0);
    }
    T g[N];
#pragma unroll
    for (int s = 0; s < N; ++s) g[s] = last_term[s];
#pragma unroll
    for (int j = 2; j <= N; ++j) {
        if (j > w.n) break;  // uniform: every lane of the warp takes the same rounds
        const T next_g = shfl_down<warp>(g[0], 1);  // W^{j-1}_{t0+N}
#pragma unroll
        for (int s = 0; s < N; ++s)  // ascending: g[s + 1] is still W^{j-1}
            g[s] = select_bits<T>(goes_on[s], passing[s] + gamma_lambda * (s + 1 < N ? g[s + 1] : next_g),
                                  last_term[s]);
    }
    if (!writes) return;
    if (present(w.returns)) write_run(w.returns, row, t0, g);
    if (present(w.advantages)) {
        T a[N];
#pragma unroll
        for (int s = 0; s < N; ++s) a[s] = g[s] - v[s];
        write_run(w.advantages, row, t0, a);
    }
}

/// Any layout and any n < horizon: one thread per output (n_step_window::compute).
template <typename Window>
__global__ void __launch_bounds__(256) n_step_kernel(Window w) {
    const std::uint64_t total = static_cast<std::uint64_t>(w.rows) * static_cast<std::uint64_t>(w.horizon);
    const std::uint64_t inner = static_cast<std::uint64_t>(w.time_major ? w.rows : w.horizon);
    for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
         i += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
        // 32-bit division where the problem allows it (the common case): a
        // 64-bit one is a long instruction sequence per output.
        std::uint64_t outer, within;
        if (total <= 0xffffffffu) {
            outer = std::uint32_t(i) / std::uint32_t(inner);
            within = std::uint32_t(i) - std::uint32_t(outer) * std::uint32_t(inner);
        } else {
            outer = i / inner;
            within = i - outer * inner;
        }
        const std::int64_t row = std::int64_t(w.time_major ? within : outer);
        const std::int64_t t = std::int64_t(w.time_major ? outer : within);
        w.compute(row, t);
    }
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
