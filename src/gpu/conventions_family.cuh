// Host half of the estimator family on the GPU: discounted returns, Retrace,
// Q(lambda) and the episodic sums (the scans of family_steps.cuh), n-step
// returns (the window kernels of n_step_window.cuh). For each call it picks the
// kernel and policy (call_layout, conventions_layout.cuh) and launches it.
// Included by conventions_backend.cuh, whose run_estimate dispatches the kinds
// and whose run_standard is the TD(lambda) scan that n-step returns of
// n >= horizon take.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>

#include <puffadv/conventions.hpp>

#include "gpu/conventions_layout.cuh"
#include "gpu/family_steps.cuh"
#include "gpu/n_step_window.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {

/// GAE / TD(lambda) / V-trace: defined in conventions_backend.cuh.
template <typename T, bool PolicyGradient>
void run_standard(const standard_arrays& a, const standard_params& p, cudaStream_t stream);

/// The layout of a call of the family's kinds: every array it reads or writes.
inline call_layout family_layout(const standard_arrays& a) {
    call_layout layout(a.rewards.type);
    for (const auto* m : {&a.values, &a.next_values, &a.target_probs, &a.behaviour_probs, &a.bootstrap_values})
        layout.input(*m);
    layout.input(a.rewards);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    layout.flag(a.greedy);
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    return layout;
}

/// Runs one scan kind of the family. `producer_of(values, flags)` and
/// `epilogue_of(outputs)` build the producer and epilogue from column makers
/// (matrix or optional -> column). float32 and float64 calls whose arrays all
/// vectorise take compile-time columns and wide loads (`FastPolicy`; 16-bit
/// floats too would multiply the instantiations); any other call typed
/// columns (scalar, any strides).
template <typename T, typename FastPolicy, typename MakeProducer, typename MakeEpilogue>
void scan_kind(const call_layout& layout, const matrix* scratch, std::int64_t rows, std::int64_t horizon,
               bool reversed, int device, cudaStream_t stream, MakeProducer&& producer_of,
               MakeEpilogue&& epilogue_of) {
    if (horizon <= 0) return;
    const vector_access access = layout.access(FastPolicy::items != layout.items);
    if (layout.fast() && access != vector_access::none && dtype_size(layout.float_type) != 2) {  // T: the input dtype
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        const auto run = [&](auto flag_tag) {
            using Flag = typename decltype(flag_tag)::type;
            const auto flags = [](const auto& m) { return view_of<const Flag>(m); };
            launch_vector_scan<FastPolicy>(access, producer_of(values, flags), epilogue_of(outputs), scratch, rows,
                                           horizon, device, stream, reversed);
        };
        if (layout.byte_flags)
            run(type_tag<flag_byte>{});
        else
            run(type_tag<T>{});
    } else {
        const auto any = [](const auto& m) { return typed(m); };
        launch_scan<scan_policy, false>(producer_of(any, any), epilogue_of(any), scratch, rows, horizon,
                                        layout.contiguous, device, stream, reversed);
    }
}

/// scan_kind with the wide policy for float32 calls whose arrays all allow it, else `Policy`.
template <typename T, typename Policy, typename MakeProducer, typename MakeEpilogue>
void scan_kind_widest(const call_layout& layout, const matrix* scratch, std::int64_t rows, std::int64_t horizon,
                      bool reversed, int device, cudaStream_t stream, MakeProducer&& producer_of,
                      MakeEpilogue&& epilogue_of) {
    if constexpr (std::is_same_v<T, float>) {
        if (layout.access(true) != vector_access::none)
            return scan_kind<T, wide_standard_policy>(layout, scratch, rows, horizon, reversed, device, stream,
                                                      producer_of, epilogue_of);
    }
    scan_kind<T, Policy>(layout, scratch, rows, horizon, reversed, device, stream, producer_of, epilogue_of);
}

/// Discounted returns, Retrace, Q(lambda) and the episodic sums.
template <typename T>
void run_family_scan(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    const matrix* summed = summed_output(a);
    if (sums && !summed) unsupported("row sums without the advantages output");
    call_layout layout = family_layout(a);
    layout.plan(rows, horizon, device);
    const matrix* scratch = scratch_output({&a.advantages, &a.fused.returns});
    const auto estimate = [&](const auto& out) {  // A and the returns A + q
        return store_estimate<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages), out(a.fused.returns)};
    };

    const auto same = [&](const auto& out) {  // no values: both outputs hold A
        return store_same<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages), out(a.fused.returns),
                                                                         horizon};
    };

    switch (p.kind) {
        case estimator::discounted_returns:
            scan_kind_widest<T, standard_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    return returns_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(a.rewards), f(a.terminated), f(a.truncated), v(a.bootstrap_values), v(a.last_value),
                        horizon, T(p.gamma)};
                }, same);
            break;
        case estimator::retrace:
            scan_kind<T, vtrace_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    return retrace_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(a.values),       v(a.rewards),         v(a.next_values), f(a.terminated),
                        f(a.truncated),    v(a.target_probs),    v(a.behaviour_probs),
                        T(p.gamma),        T(p.lambda),          T(p.c_clip),      p.log_probs};
                }, estimate);
            break;
        case estimator::q_lambda:
            scan_kind_widest<T, vtrace_scan_policy>(layout, scratch, rows, horizon, false, device, stream,
                [&](const auto& v, const auto& f) {
                    // q only for the advantages G - q: the scan runs in G.
                    const std::optional<matrix> q = a.advantages ? a.values : std::nullopt;
                    return q_lambda_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                        v(q),           v(a.rewards), v(a.next_values), f(a.terminated), f(a.truncated),
                        f(a.greedy),    T(p.gamma),   T(p.lambda)};
                }, [&](const auto& out) {
                    return store_target<T, std::decay_t<decltype(out(a.advantages))>>{out(a.advantages),
                                                                                       out(a.fused.returns)};
                });
            break;
        default: {  // episodic_sum: over reversed time
            const auto producer_of = [&](const auto& v, const auto& f) {
                return episodic_producer<T, decltype(v(a.rewards)), decltype(f(a.terminated))>{
                    v(a.rewards), f(a.terminated), v(a.last_value), horizon, T(p.gamma) * T(p.lambda),
                    p.reset_at_start};
            };
            const auto epilogue_of = [&](const auto& out) {
                return store_same<T, std::decay_t<decltype(out(a.advantages))>, true>{out(a.advantages),
                                                                                     out(a.fused.returns), horizon};
            };
            scan_kind_widest<T, standard_scan_policy>(layout, scratch, rows, horizon, true, device, stream,
                                                      producer_of, epilogue_of);
        }
    }
    if (sums) launch_row_sums(*summed, a.fused, rows, horizon, device, stream);
}

/// n-step returns: the window kernel; n >= horizon is TD(lambda) (every window
/// reaches the row's end), the scan.
template <typename T>
void run_n_step(const standard_arrays& a, const standard_params& p, cudaStream_t stream) {
    const std::int64_t rows = a.rewards.rows, horizon = a.rewards.cols;
    if (p.n >= horizon) {
        standard_params td = p;
        td.kind = estimator::td_lambda;
        return run_standard<T, false>(a, td, stream);
    }
    const int device = a.rewards.device.index;
    device_guard guard(device);
    const bool sums = a.fused.abs_sums || a.fused.sums || a.fused.square_sums;
    if (sums && !a.advantages) unsupported("row sums without the advantages output");
    call_layout layout(a.rewards.type);
    layout.input(a.rewards);
    layout.input(a.values);
    layout.input(a.bootstrap_values);
    layout.flag(a.terminated);
    layout.flag(a.truncated);
    layout.output(a.advantages);
    layout.output(a.fused.returns);
    // Threads follow the rewards' adjacent elements: along time for [B, T], along rows for time-major data.
    const bool time_major = a.rewards.col_stride != 1 && a.rewards.row_stride == 1;
    const auto launch = [&](const auto& window) {
        constexpr unsigned threads = 256;
        const std::uint64_t total = std::uint64_t(rows) * std::uint64_t(horizon);
        const auto blocks = static_cast<unsigned>(std::min<std::uint64_t>((total + threads - 1) / threads, 1u << 30));
        n_step_kernel<<<blocks, threads, 0, stream>>>(window);
        PUFF_GPU_CHECK(cudaGetLastError(), device);
    };
    const auto window_of = [&](const auto& v, const auto& f, const auto& out) {
        return n_step_window<T, decltype(v(a.rewards)), decltype(f(a.terminated)), decltype(out(a.rewards))>{
            v(a.values),     v(a.rewards),       f(a.terminated), f(a.truncated), v(a.bootstrap_values),
            v(a.last_value), out(a.advantages),  out(a.fused.returns), rows, horizon, p.n,
            T(p.gamma),      T(p.lambda),        time_major};
    };
    // Windows of n <= 4 (8) steps of contiguous rows: the vector kernel, 4 (8) outputs a thread.
    const auto launch_vector = [&](auto n_tag, const auto& window) {
        constexpr int N = decltype(n_tag)::value;
        const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / N);
        const auto blocks = static_cast<unsigned>((chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block);
        // The divider serves chunk indices below 2^31; the kernel divides by 64 bits past them.
        const fast_divider per_row(chunks < (std::uint64_t(1) << 31) ? std::uint32_t(horizon / N) : 1u);
        if (a.truncated)
            n_step_vector_kernel<N, true><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
        else
            n_step_vector_kernel<N, false><<<blocks, n_step_threads, 0, stream>>>(window, per_row, chunks);
        PUFF_GPU_CHECK(cudaGetLastError(), device);
    };
    const auto run = [&](const auto& window) {
        const std::uint64_t chunks = std::uint64_t(rows) * std::uint64_t(horizon / 4);
        const bool fits = (chunks + n_step_chunks_per_block - 1) / n_step_chunks_per_block <= 0x7fffffffu;
        if (layout.vectorized && p.n <= 4 && fits)
            launch_vector(std::integral_constant<int, 4>{}, window);
        else if (layout.vectorized_wide && p.n <= 8 && fits)
            launch_vector(std::integral_constant<int, 8>{}, window);
        else
            launch(window);
    };
    if (layout.fast() && dtype_size(layout.float_type) != 2) {  // vectorisable, one flag and one output type
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        if (layout.byte_flags)
            run(window_of(values, [](const auto& m) { return view_of<const flag_byte>(m); }, outputs));
        else
            run(window_of(values, values, outputs));
    } else if (!layout.flags_mixed && !layout.outputs_mixed && dtype_size(layout.float_type) != 2) {
        const auto values = [](const auto& m) { return view_of<const T>(m); };
        const auto outputs = [](const auto& m) { return view_of<T>(m); };
        if (layout.byte_flags)
            launch(window_of(values, [](const auto& m) { return view_of<const flag_byte>(m); }, outputs));
        else
            launch(window_of(values, values, outputs));
    } else {
        const auto any = [](const auto& m) { return typed(m); };
        launch(window_of(any, any, any));
    }
    if (sums) launch_row_sums(*a.advantages, a.fused, rows, horizon, device, stream);
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
