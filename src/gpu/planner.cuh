// The one planner of the GPU engine: from a call's layout (call_layout.cuh)
// and its kind's tuning (kinds.cuh) it picks the traversal and the policy, and
// launches the kind's producer and epilogue there. Row scans: long rows
// (long_row_policy), the wide or the kind's own policy with aligned access
// (whole rows, row groups or split rows: plan_row_scan) or flat whole rows,
// and the generic kernels (scalar, any strides: whole rows, split rows or
// strided). Windows (n-step returns): the vector kernels of 4 or 8 outputs a
// thread, or one output a thread. No traversal here knows which estimator
// runs: the kinds only fill in a tuning.
//
// A tuning (see the kinds) says, for the storage type In of a fast call:
//   using policy;                the policy of aligned and flat access
//   using wide;                  a policy of 2 * policy::items steps, or void
//   bool wide_allowed(arrays, call)   whether this call may take it
//   static constexpr bool long_rows;  float32 rows of >= 1024 steps take long_row_policy
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "gpu/call_layout.cuh"
#include "gpu/n_step_window.cuh"
#include "gpu/row_sums.cuh"
#include "gpu/standard_steps.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// One planned scan: the call's layout (planned), where split rows keep their
/// carries, its shape, device and stream, and whether the scan runs over
/// reversed time (the episodic sums).
struct scan_call {
    const call_layout& layout;
    const matrix* scratch;
    std::int64_t rows, horizon;
    int device;
    cudaStream_t stream;
    bool reversed;
};

/// Scans `producer` into `epilogue` with the row-scan kernels of launch.cuh.
/// `reversed`: the scan runs over reversed time (episodic_producer; flat: over
/// the whole run backwards, its groups aligned in memory).
template <typename Policy, bool Vec, bool Flat = false, typename Producer, typename Epilogue>
void launch_scan(const scan_call& c, const Producer& producer, const Epilogue& epilogue, bool contiguous) {
    using T = typename Producer::value_type;
    // Split rows need `scratch`: a call has a [rows, horizon] output, and split
    // rows are planned only when every array, that output too, is contiguous.
    const row_scan_plan plan =
        plan_row_scan<Policy>(c.rows, c.horizon, contiguous, c.layout.sm_count, Flat, Vec && !Flat);
    const std::int64_t phase = Flat && c.reversed ? c.rows * c.horizon % Policy::items : 0;
    PUFF_GPU_CHECK((launch_row_scan<Policy, Vec, Flat>(plan, producer, epilogue,
                                                       carry_slots_of<T>(c.scratch, c.reversed), c.rows, c.horizon,
                                                       c.stream, phase)),
                   c.device);
}

/// Whether `X` (a producer or epilogue of reversed time) has with_flipped_rows.
template <typename X, typename = void>
struct flips_rows : std::false_type {};
template <typename X>
struct flips_rows<X, std::void_t<decltype(std::declval<const X&>().with_flipped_rows(0))>> : std::true_type {};

/// The fast kernels of `Policy` with `access` (aligned or flat). Flat scans
/// of reversed time run over the whole run backwards: their rows are flipped
/// (episodic_producer).
template <typename Policy, typename Producer, typename Epilogue>
void launch_vector_scan(const scan_call& c, vector_access access, const Producer& producer,
                        const Epilogue& epilogue) {
    if (access == vector_access::flat) {
        static_assert(reads_flat_groups<Producer, Policy::items>::value, "every fast producer reads flat groups");
        if constexpr (flips_rows<Producer>::value && flips_rows<Epilogue>::value) {  // reversed time
            if (!c.reversed) throw std::logic_error("puffadv: rows flipped for a scan of forward time");
            return launch_scan<Policy, true, true>(c, producer.with_flipped_rows(c.rows),
                                                   epilogue.with_flipped_rows(c.rows), true);
        } else {
            if (c.reversed) throw std::logic_error("puffadv: a flat scan of reversed time needs rows it can flip");
            return launch_scan<Policy, true, true>(c, producer, epilogue, true);
        }
    }
    launch_scan<Policy, true>(c, producer, epilogue, true);
}

/// A fast call (layout.fast(): every array vectorises, compile-time storage
/// types): long rows where the tuning takes them and the layout has them (the
/// one long-row choice: call_layout::plan), else the wide policy where the
/// tuning has one and the call allows it, else the tuning's policy.
template <typename Tuning, typename Producer, typename Epilogue>
void launch_fast(const scan_call& c, const standard_arrays& a, const Producer& producer, const Epilogue& epilogue) {
    const call_layout& layout = c.layout;
    if constexpr (Tuning::long_rows) {
        // Aligned only (call_layout::plan): no flat kernels are compiled for long rows.
        if (layout.long_rows) return launch_scan<long_row_policy, true>(c, producer, epilogue, true);
    }
    if constexpr (!std::is_void_v<typename Tuning::wide>) {
        if (Tuning::wide_allowed(a, c) && layout.access(true) != vector_access::none)
            return launch_vector_scan<typename Tuning::wide>(c, layout.access(true), producer, epilogue);
    }
    (void)a;
    launch_vector_scan<typename Tuning::policy>(c, layout.access(), producer, epilogue);
}

/// Any other call: scalar accesses, whole rows, split rows or strided.
template <typename Producer, typename Epilogue>
void launch_generic(const scan_call& c, const Producer& producer, const Epilogue& epilogue) {
    launch_scan<scan_policy, false>(c, producer, epilogue, c.layout.contiguous);
}

/// Windows of at most n steps per output (n_step_window.cuh). `Vector`: the
/// call is fast (every array vectorises, one flag and one output type), so
/// windows of n <= 4 (8) steps of aligned rows take the vector kernel, 4 (8)
/// outputs a thread; else one output a thread.
template <bool Vector, typename Window>
void launch_windows(const call_layout& layout, const Window& window, std::int64_t n, bool truncated, int device,
                    cudaStream_t stream) {
    const std::int64_t rows = window.rows, horizon = window.horizon;
    if constexpr (Vector) {
        const auto launch_vector = [&](auto n_tag) {
            constexpr int N = decltype(n_tag)::value;
            const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / N);
            const auto blocks = static_cast<unsigned>((chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block);
            // The divider serves chunk indices below 2^31; the kernel divides by 64 bits past them.
            const fast_divider per_row(chunks < (std::uint64_t(1) << 31) ? std::uint32_t(horizon / N) : 1u);
            if (truncated)
                n_step_vector_kernel<N, true><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
            else
                n_step_vector_kernel<N, false><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
            PUFF_GPU_CHECK(cudaGetLastError(), device);
        };
        const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / 4);
        const bool fits = (chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block <= 0x7fffffffu;
        if (layout.vectorized && n <= 4 && fits) return launch_vector(std::integral_constant<int, 4>{});
        if (layout.vectorized_wide && n <= 8 && fits) return launch_vector(std::integral_constant<int, 8>{});
    }
    constexpr unsigned threads = 256;
    const std::uint64_t total = std::uint64_t(rows) * std::uint64_t(horizon);
    const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>((total + threads - 1) / threads, 1u << 30));
    n_step_kernel<<<blocks, threads, 0, stream>>>(window);
    PUFF_GPU_CHECK(cudaGetLastError(), device);
}

/// Row sums of |A|, A and A^2 of `a` (a second small kernel), where asked for.
inline void launch_row_sums(const matrix& a, const fused_outputs& f, std::int64_t rows, std::int64_t horizon,
                            int device, cudaStream_t stream) {
    if (!(f.abs_sums || f.sums || f.square_sums)) return;
    constexpr int threads = 256;
    const auto blocks = static_cast<unsigned>((rows * widest_warp_size + threads - 1) / threads);
    row_sums_kernel<<<blocks, threads, 0, stream>>>(typed(a), rows, horizon, typed(f.abs_sums), typed(f.sums),
                                                    typed(f.square_sums));
    PUFF_GPU_CHECK(cudaGetLastError(), device);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
