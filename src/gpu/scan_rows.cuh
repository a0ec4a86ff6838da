// Time-parallel backward recurrences over the rows of a [rows, horizon] problem.
//
// Every time step becomes an affine map (a Producer makes it from loaded data,
// see puff_steps.cuh); a block scans a span of steps backwards in rounds of
// policy::round steps: each thread composes `items` consecutive maps, a warp
// scan and a block combine give each thread the map of everything to its
// right, the carry (A after the round) is applied, and an Epilogue stores A.
//
// Layouts (chosen by the host in launch.cuh):
//   whole rows  - a block owns rows_per_block consecutive rows; row ends are
//                 maps with k = 0, so packed short rows need no segment logic.
//                 Flat (every array one packed, aligned run of rows * horizon
//                 elements, the horizon not a multiple of `items`): a thread's
//                 `items` steps are aligned in the run, not in the row, and
//                 load in one access per array even across a row end; the
//                 block's span starts at the aligned group holding its first
//                 step (`lead` steps of the row before, not scanned);
//   split rows  - few long rows: each row is cut into segments, one block each,
//                 in three launches: reduce_segments (each segment's composed
//                 map), carry_segments (a warp per row scans those maps), then
//                 scan_segments (each segment from its carry). The two small
//                 results live in the output itself (`scratch`): no workspace,
//                 no allocation, safe in CUDA graph capture;
//   strided     - views whose time steps are not adjacent (time-major data):
//                 one thread per row, which is the coalesced order there.
#pragma once

#include <type_traits>
#include <utility>

#include "gpu/affine_scan.cuh"
#include "gpu/storage.cuh"

#ifndef PUFF_MAX_GROUP_ROUNDS
#define PUFF_MAX_GROUP_ROUNDS 8
#endif

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Tuning knobs, kept apart from the kernel bodies. `Items` consecutive steps per thread: as many as one
/// 16-byte access of the widest input holds (4 for float32, 8 for the 16-bit floats): a thread's loads stay wide.
template <int Items, int MinBlocksFast, int MinBlocksGroups = 4, int Threads = 256,
          int GroupRounds = PUFF_MAX_GROUP_ROUNDS>
struct row_scan_policy {
    static constexpr int threads = Threads;  ///< per block; a multiple of every warp width
    static constexpr int items = Items;
    static constexpr int round = threads * items;
    /// Whole-row blocks scan at most this many rounds one after another, unless
    /// there are enough rows to fill the GPU anyway; longer rows are split.
    static constexpr int max_rounds_whole_row = 4;
    /// Rows of aligned vector arrays up to this many rounds of a warp
    /// (32 * items steps each) take the row-group kernels (scan_row_groups.cuh); 0: never.
    static constexpr int max_group_rounds = GroupRounds;
    /// Occupancy asked for the row-group kernels: each group keeps its row's
    /// array pointers across rounds, so they need more registers than the
    /// block kernels (ptxas, float32: 4 steps spilled 24-164 bytes at 6-8
    /// blocks, none at 4; 8 steps 8-16 bytes at 4, none at 3, but at 3 GAE
    /// took 44.3 us against 40.5 at 65536x128 on the H200, 2026-12-02).
    static constexpr int min_blocks_per_sm_groups = MinBlocksGroups;
    static constexpr int blocks_per_sm = 8;  ///< resident blocks assumed when splitting rows
    /// Occupancy asked of the compiler (__launch_bounds__) for the vectorised
    /// float32-arithmetic kernels: 8 blocks of 256 threads (32 registers) keep
    /// enough loads in flight and make the last wave of a whole-row grid small.
    /// Others: 4.
    static constexpr int min_blocks_per_sm_fast = MinBlocksFast;
    static constexpr int min_blocks_per_sm = 4;
    static constexpr int strided_threads = 128;
};
using scan_policy = row_scan_policy<4, 8>;

/// Launch bounds of a scan kernel over `Producer` (see row_scan_policy).
/// Flat whole rows keep a few more values per thread (where the block's rows
/// begin and end in its span): at most 6 blocks (40 registers), as the 32 of
/// 8 blocks spilled 48-64 bytes (ptxas, puff advantage).
template <typename Policy, bool Vec, typename Producer, bool Flat = false>
constexpr int min_blocks_for() {
    constexpr int fast = Flat && Policy::min_blocks_per_sm_fast > 6 ? 6 : Policy::min_blocks_per_sm_fast;
    return Vec && sizeof(typename Producer::value_type) == 4 ? fast : Policy::min_blocks_per_sm;
}

/// The steps one block scans: local step e < length is at row `row + e / wrap`,
/// time `t + e % wrap` (wrap = horizon for whole rows, > length for a segment).
/// Flat whole rows: at row `row + (t + e) / wrap`, time `(t + e) % wrap`, and
/// only steps lead <= e < length are the block's; steps before <= e <
/// in_buffer lie in the arrays (a group not wholly there loads step by step).
struct block_span {
    std::int64_t row, t;
    std::uint32_t length, wrap;
    std::uint32_t lead = 0, before = 0;
    std::int64_t in_buffer = 0;
};

/// Whether `Producer` reads flat groups (load_items of item_places<N, true>);
/// a scan over reversed time does not (episodic_producer).
template <typename Producer, int N, typename = void>
struct reads_flat_groups : std::false_type {};
template <typename Producer, int N>
struct reads_flat_groups<Producer, N,
                         std::void_t<decltype(std::declval<const Producer&>().load_items(
                             std::declval<const item_places<N, true>&>(),
                             std::declval<typename Producer::step (&)[N]>()))>> : std::true_type {};

template <typename T, int warps>
struct scan_shared {
    affine<T> warp_total[2][warps];  // double-buffered: one barrier per round
};

/// Scans `span` backwards. Store: writes every A through `epilogue`, starting
/// from A = carry.d after the span, and returns A at the span's first step in
/// .d. !Store: returns the composed map of the whole span (carry = identity).
/// Vec: one access per array for a thread's steps; Flat (with Vec): flat
/// whole rows (see the top of this file).
template <typename Policy, bool Vec, bool Store, bool Flat = false, typename Producer, typename Epilogue>
__device__ __forceinline__ affine<typename Producer::value_type> scan_span(
    const Producer& producer, const Epilogue& epilogue, const block_span span,
    const std::int64_t horizon, affine<typename Producer::value_type> carry,
    scan_shared<typename Producer::value_type, Policy::threads / physical_warp_size>& shared) {
    using T = typename Producer::value_type;
    using step = typename Producer::step;
    using ahead = typename Producer::lookahead;
    constexpr int warp = physical_warp_size;
    constexpr int warps = Policy::threads / warp;
    constexpr int items = Policy::items;
    static_assert(Policy::threads % warp == 0, "whole warps per block");

    const int lane = threadIdx.x % warp;
    const int warp_id = threadIdx.x / warp;
    const int rounds = static_cast<int>((span.length + Policy::round - 1) / Policy::round);
    int buffer = 0;

    for (int r = rounds - 1; r >= 0; --r) {
        const std::uint32_t first = static_cast<std::uint32_t>(r) * Policy::round + threadIdx.x * items;
        // Where the items lie. Flat: item 0's place and the row ends among the
        // items (views.cuh), the rest computed where used: arrays of 64-bit
        // places kept live across the scan spilled (ptxas).
        item_places<items, Flat> at{};
        std::int64_t row[items], t[items];  // !Flat
        bool valid[items];                  // !Flat
        if constexpr (Flat) {
            const std::uint32_t e = static_cast<std::uint32_t>(span.t) + first;  // span.t < horizon
            at.row = span.row + e / span.wrap;
            at.t = e % span.wrap;
            std::uint32_t time = static_cast<std::uint32_t>(at.t);
#pragma unroll
            for (int j = 0; j < items; ++j) {
                if (time == span.wrap - 1) at.ends |= 1u << j;
                time = time == span.wrap - 1 ? 0u : time + 1u;
            }
        } else {
            row[0] = span.row + first / span.wrap;
            t[0] = span.t + first % span.wrap;
#pragma unroll
            for (int j = 1; j < items; ++j) {
                row[j] = row[j - 1];
                t[j] = t[j - 1] + 1;
                // Only scalar groups can wrap to the next row (whole-row spans).
                if constexpr (!Vec) {
                    if (t[j] == horizon) t[j] = 0, ++row[j];
                }
            }
            // Aligned groups never straddle a row or the span's end (the host
            // checked that horizons are multiples of `items`): one check per thread.
#pragma unroll
            for (int j = 0; j < items; ++j) valid[j] = Vec && j > 0 ? valid[0] : first + j < span.length;
        }
        // Flat: whether item j is this block's (its place is computed where used).
        const auto flat_valid = [&](int j) { return first + j >= span.lead && first + j < span.length; };

        step s[items] = {};
        if constexpr (Flat) {
            // Steps of other blocks' rows in the group are loaded too (in the
            // arrays, read-only to this block) and scanned as identities; only
            // a group past the arrays' end (or start) loads step by step.
            const bool any_valid = first + items > span.lead && first < span.length;
            if (any_valid && first >= span.before && first + items <= span.in_buffer) {
                producer.load_items(at, s);
            } else {
#pragma unroll
                for (int j = 0; j < items; ++j)
                    if (flat_valid(j)) s[j] = producer.load(at.row_of(j), at.t_of(j));
            }
        } else if constexpr (Vec) {  // host checked: a thread's steps never straddle rows, and are aligned
            if (valid[0]) producer.load_items(item_places<items, false>{row[0], t[0]}, s);
        } else {
#pragma unroll
            for (int j = 0; j < items; ++j)
                if (valid[j]) s[j] = producer.load(row[j], t[j]);
        }
        // What the last item's map needs of step t+1: from the next lane's first
        // item, or loaded at a warp's top (only that part of the step).
        // A producer whose maps need nothing of the next step has an empty lookahead.
        bool last_step;
        if constexpr (Flat)
            last_step = at.row_end(items - 1, horizon);
        else
            last_step = t[items - 1] == horizon - 1;
        ahead after{};
        if constexpr (!std::is_empty_v<ahead>) {
            after = shfl_down_struct<warp>(Producer::ahead(s[0]), 1);
            if constexpr (Flat) {
                if (lane == warp - 1 && flat_valid(items - 1) && !last_step)
                    after = producer.load_ahead(at.row_of(items - 1), at.t_of(items - 1) + 1);
            } else {
                if (lane == warp - 1 && valid[items - 1] && !last_step)
                    after = producer.load_ahead(row[items - 1], t[items - 1] + 1);
            }
        }

        affine<T> m[items];
#pragma unroll
        for (int j = 0; j < items; ++j) {
            const ahead next = j + 1 < items ? Producer::ahead(s[j + 1]) : after;
            bool row_end;
            if constexpr (Flat)
                row_end = at.row_end(j, horizon);
            else
                row_end = Vec ? j == items - 1 && last_step : t[j] == horizon - 1;
            m[j] = (Flat ? flat_valid(j) : valid[j]) ? producer.map(s[j], next, row_end) : identity_map<T>();
        }
        affine<T> mine = m[items - 1];
#pragma unroll
        for (int j = items - 2; j >= 0; --j) mine = compose(m[j], mine);

        const affine<T> inclusive = warp_reverse_scan<warp>(mine, lane);
        const affine<T> exclusive = warp_exclusive_from_inclusive<warp>(inclusive, lane);
        if (lane == 0) shared.warp_total[buffer][warp_id] = inclusive;
        __syncthreads();

        if constexpr (Store) {
            T a = carry.d, entering_warp = T(0);
#pragma unroll
            for (int w = warps - 1; w >= 0; --w) {
                if (w == warp_id) entering_warp = a;
                a = apply(shared.warp_total[buffer][w], a);
            }
            carry.d = a;  // A at the round's first step: the next round's carry
            // A at the step after this thread's last (the next lane's, warp's or
            // round's first, or the segment's carry): V-trace's pg advantage needs it.
            const T a_after = apply(exclusive, entering_warp);
            T out[items];
            T x = a_after;
#pragma unroll
            for (int j = items - 1; j >= 0; --j) out[j] = x = apply(m[j], x);
            if constexpr (Flat) {
                // A group shared with another block's rows stores step by step.
                if (first >= span.lead && first + items <= span.length) {
                    epilogue.store_items(at, out, s, a_after, after);
                } else {
#pragma unroll
                    for (int j = 0; j < items; ++j)
                        if (flat_valid(j))
                            epilogue.store(at.row_of(j), at.t_of(j), out[j], s[j],
                                           j + 1 < items ? out[j + 1] : a_after,
                                           j + 1 < items ? Producer::ahead(s[j + 1]) : after);
                }
            } else if constexpr (Vec) {
                if (valid[0]) epilogue.store_items(item_places<items, false>{row[0], t[0]}, out, s, a_after, after);
            } else {
#pragma unroll
                for (int j = 0; j < items; ++j)
                    if (valid[j])
                        epilogue.store(row[j], t[j], out[j], s[j], j + 1 < items ? out[j + 1] : a_after,
                                       j + 1 < items ? Producer::ahead(s[j + 1]) : after);
            }
        } else {
#pragma unroll
            for (int w = warps - 1; w >= 0; --w) carry = compose(shared.warp_total[buffer][w], carry);
        }
        buffer ^= 1;
    }
    return carry;
}

/// Whole rows: block b owns rows [b * rows_per_block, ...). Flat: groups
/// start at flat steps = `phase` modulo items (a scan over the run backwards,
/// episodic_producer's, has its groups aligned in memory at rows * horizon mod items).
template <typename Policy, bool Vec, bool Flat = false, typename Producer, typename Epilogue>
__global__ void __launch_bounds__(Policy::threads, (min_blocks_for<Policy, Vec, Producer, Flat>()))
scan_whole_rows_kernel(Producer producer, Epilogue epilogue, std::int64_t rows, std::int64_t horizon,
                       std::int64_t rows_per_block, std::int64_t phase) {
    using T = typename Producer::value_type;
    __shared__ scan_shared<T, Policy::threads / physical_warp_size> shared;
    const std::int64_t first_row = static_cast<std::int64_t>(blockIdx.x) * rows_per_block;
    const std::int64_t count = rows - first_row < rows_per_block ? rows - first_row : rows_per_block;
    const auto length = static_cast<std::uint32_t>(count * horizon);
    if constexpr (Flat) {  // from the aligned group holding the block's first step
        constexpr std::int64_t items = Policy::items;
        const std::int64_t start = first_row * horizon;
        const auto lead = static_cast<std::uint32_t>(((start - phase) % items + items) % items);
        const std::int64_t aligned = start - lead;  // < 0: block 0 with a phase (horizon >= items)
        const std::int64_t row = aligned < 0 ? -1 : aligned / horizon;  // one 64-bit division per block
        const block_span span{row,
                              aligned - row * horizon,
                              length + lead,
                              static_cast<std::uint32_t>(horizon),
                              lead,
                              static_cast<std::uint32_t>(aligned < 0 ? -aligned : 0),
                              rows * horizon - aligned};
        scan_span<Policy, Vec, true, Flat>(producer, epilogue, span, horizon, affine<T>{T(0), T(0)}, shared);
    } else {
        const block_span span{first_row, 0, length, static_cast<std::uint32_t>(horizon)};
        scan_span<Policy, Vec, true>(producer, epilogue, span, horizon, affine<T>{T(0), T(0)}, shared);
    }
}

/// The span of segment `blockIdx.x % segments` of row `blockIdx.x / segments`.
__device__ __forceinline__ block_span segment_span(std::int64_t horizon, std::int64_t segment_length,
                                                   std::int64_t segments, std::int64_t& segment) {
    const std::int64_t row = blockIdx.x / segments;
    segment = blockIdx.x % segments;
    const std::int64_t t = segment * segment_length;
    const std::int64_t length = horizon - t < segment_length ? horizon - t : segment_length;
    return {row, t, static_cast<std::uint32_t>(length), 0xffffffffu};
}

/// Split rows, pass 1: the composed map of each segment but the first, into
/// its carry slots: d in slot 0, k in slot 1 (the last segment's k is 0).
template <typename Policy, bool Vec, typename Producer>
__global__ void __launch_bounds__(Policy::threads, (min_blocks_for<Policy, Vec, Producer>()))
reduce_segments_kernel(Producer producer, carry_slots<typename Producer::value_type> scratch,
                       std::int64_t horizon, std::int64_t segment_length, std::int64_t segments) {
    using T = typename Producer::value_type;
    __shared__ scan_shared<T, Policy::threads / physical_warp_size> shared;
    std::int64_t segment;
    const block_span span = segment_span(horizon, segment_length, segments, segment);
    if (segment == 0) return;  // nothing reads the first segment's map
    struct no_store {} none;
    const affine<T> total = scan_span<Policy, Vec, false>(producer, none, span, horizon,
                                                          identity_map<T>(), shared);
    if (threadIdx.x == 0) {
        scratch.store(span.row, span.t, 0, total.d);
        if (segment + 1 < segments) scratch.store(span.row, span.t, 1, total.k);
    }
}

/// Split rows, pass 2: a logical warp per row scans the segment maps from the
/// right and leaves in slot 0 of segment s the A entering it from its right
/// (for every segment but the last, whose carry is 0).
template <typename Policy, typename T>
__global__ void __launch_bounds__(Policy::threads)
carry_segments_kernel(carry_slots<T> scratch, std::int64_t rows, std::int64_t segment_length,
                      std::int64_t segments) {
    constexpr int warp = physical_warp_size;
    const int lane = threadIdx.x % warp;
    const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (Policy::threads / warp) + threadIdx.x / warp;
    if (row >= rows) return;  // whole warps leave together
    T carry = T(0);  // A entering the current chunk from its right
    for (std::int64_t first = (segments - 1) / warp * warp; first >= 0; first -= warp) {
        const std::int64_t s = first + lane;
        affine<T> m = identity_map<T>();
        if (s > 0 && s < segments)
            m = {s + 1 < segments ? scratch.load(row, s * segment_length, 1) : T(0),
                 scratch.load(row, s * segment_length, 0)};
        const affine<T> inclusive = warp_reverse_scan<warp>(m, lane);
        const T entering = apply(inclusive, carry);          // A at segment s's first step
        T from_right = shfl_down<warp>(entering, 1);         // A at segment s+1's first step
        if (lane == warp - 1) from_right = carry;
        if (s + 1 < segments) scratch.store(row, s * segment_length, 0, from_right);
        carry = shfl<warp>(entering, 0);  // A entering the chunk to the left
    }
}

/// Split rows, pass 3: each segment scanned from its carry (0 for a row's last).
template <typename Policy, bool Vec, typename Producer, typename Epilogue>
__global__ void __launch_bounds__(Policy::threads, (min_blocks_for<Policy, Vec, Producer>()))
scan_segments_kernel(Producer producer, Epilogue epilogue,
                     carry_slots<typename Producer::value_type> scratch, std::int64_t horizon,
                     std::int64_t segment_length, std::int64_t segments) {
    using T = typename Producer::value_type;
    __shared__ scan_shared<T, Policy::threads / physical_warp_size> shared;
    std::int64_t segment;
    const block_span span = segment_span(horizon, segment_length, segments, segment);
    // Read before the first barrier; this block's own store to the slot comes after it.
    const T carry = segment + 1 < segments ? scratch.load(span.row, span.t, 0) : T(0);
    scan_span<Policy, Vec, true>(producer, epilogue, span, horizon, affine<T>{T(0), carry}, shared);
}

/// Any strides: one thread per row walks back in time. Time-major data viewed
/// as [rows, horizon] has adjacent rows, so a warp's loads are coalesced.
template <typename Policy, typename Producer, typename Epilogue>
__global__ void __launch_bounds__(Policy::strided_threads)
scan_strided_rows_kernel(Producer producer, Epilogue epilogue, std::int64_t rows, std::int64_t horizon) {
    using T = typename Producer::value_type;
    using step = typename Producer::step;
    const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * Policy::strided_threads + threadIdx.x;
    if (row >= rows) return;
    typename Producer::lookahead next{};
    T a = T(0);
    for (std::int64_t t = horizon - 1; t >= 0; --t) {
        const step cur = producer.load(row, t);
        const T a_next = a;
        a = apply(producer.map(cur, next, t == horizon - 1), a);
        epilogue.store(row, t, a, cur, a_next, next);
        next = Producer::ahead(cur);
    }
}

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
