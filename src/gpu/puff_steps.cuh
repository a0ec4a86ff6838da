// The puff advantage as a plug-in of the row-scan kernels (scan_rows.cuh):
// a producer that turns loaded steps into affine maps (delta_t, k_t), and an
// epilogue that stores A_t.
//
// Producer concept (what scan_rows.cuh calls):
//   using value_type;                 arithmetic type of the scan (float/double)
//   struct step;                      what one time step loads; trivially copyable,
//                                     a whole number of 32-bit words (it is shuffled)
//   step load(row, t) const;          one step, any strides
//   template <int N, bool Flat> void load_items(const item_places<N, Flat>& at,
//                                               step (&s)[N]) const;
//                                     the N steps at `at` (views.cuh), called only when
//                                     the host said every array allows one access there:
//                                     time-contiguous rows aligned to N elements (Flat
//                                     false), or packed rows, aligned, whose groups may
//                                     run over row ends (Flat: per-row work, such as a
//                                     bootstrap, is done where at.row_end(j) says)
//   struct lookahead;                 what the map of step t needs of step t+1 (a whole
//                                     number of 32-bit words: a thread gets it from
//                                     the next lane by shuffles, one per word; an
//                                     empty struct: nothing, no shuffle)
//   static lookahead ahead(const step& s);          that part of a loaded step
//   lookahead load_ahead(row, t) const;             or loaded alone (a warp's top lane)
//   affine<value_type> map(const step& cur, const lookahead& next, bool last) const;
//                                     the map of step t; `next` is of step t+1, not
//                                     loaded (default) when t is the row's last step
// Epilogue concept:
//   void store(row, t, value_type a, const step& cur, value_type a_next,
//              const lookahead& next) const;
//   template <int N, bool Flat> void store_items(const item_places<N, Flat>& at,
//                                     const value_type (&a)[N], const step (&s)[N],
//                                     value_type a_after, const lookahead& after) const;
// Both get the producer's steps, so fused outputs (returns = A + V) need no reload,
// and A and the lookahead of the step after (t + 1, or t + N: unspecified past a
// row's last step), so outputs that need A_{t+1} (V-trace's pg advantages) too.
#pragma once

#include "gpu/affine_scan.cuh"
#include "gpu/storage.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// SPEC section 1: delta_t = min(imp_t, rho_clip) * (r_{t+1} + gamma v_{t+1} (1 - d_{t+1}) - v_t),
/// k_t = gamma lambda min(imp_t, c_clip) (1 - d_{t+1}); the last step is the map 0.
/// `Values` / `Flags` are the column types of the float inputs and of the dones
/// (storage.cuh): strided_view<const S> for the fast kernels (the float32 and
/// float64 path of PufferLib's schema is puff_producer<T>), typed_view for any
/// dtype mix.
template <typename T, typename Values = strided_view<const T>, typename Flags = Values>
struct puff_producer {
    using value_type = T;
    struct step {
        T value, reward, done, importance;
    };
    struct lookahead {
        T value, reward, done;
    };

    Values values, rewards;
    Flags dones;
    Values importance;
    T gamma, gamma_lambda, rho_clip, c_clip;

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return {read<T>(values, row, t), read<T>(rewards, row, t), read<T>(dones, row, t),
                read<T>(importance, row, t)};
    }

    static __device__ __forceinline__ lookahead ahead(const step& s) { return {s.value, s.reward, s.done}; }

    __device__ __forceinline__ lookahead load_ahead(std::int64_t row, std::int64_t t) const {
        return {read<T>(values, row, t), read<T>(rewards, row, t), read<T>(dones, row, t)};
    }

    template <int N, bool Flat>
    __device__ __forceinline__ void load_items(const item_places<N, Flat>& at, step (&s)[N]) const {
        T v[N], r[N], d[N], imp[N];
        read_items(values, at.row, at.t, v);
        read_items(rewards, at.row, at.t, r);
        read_items(dones, at.row, at.t, d);
        read_items(importance, at.row, at.t, imp);
#pragma unroll
        for (int j = 0; j < N; ++j) s[j] = step{v[j], r[j], d[j], imp[j]};
    }

    // An explicit select, as the CPU backend: a NaN importance gives the clip (C fmin).
    static __device__ __forceinline__ T clip(T x, T limit) { return x < limit ? x : limit; }

    __device__ __forceinline__ affine<T> map(const step& cur, const lookahead& next, bool last) const {
        if (last) return {T(0), T(0), true};
        const T not_done = T(1) - next.done;
        const T delta = clip(cur.importance, rho_clip) *
                        (next.reward + gamma * next.value * not_done - cur.value);
        return {gamma_lambda * clip(cur.importance, c_clip) * not_done, delta};
    }
};

/// Writes A_t to a strided output.
template <typename T>
struct store_advantage {
    strided_view<T> out;

    template <typename Step, typename Next>
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, T a, const Step&, T, const Next&) const {
        *out.at(row, t) = a;
    }
    template <int N, bool Flat, typename Step, typename Next>
    __device__ __forceinline__ void store_items(const item_places<N, Flat>& at, const T (&a)[N],
                                                const Step (&)[N], T, const Next&) const {
        write_items(out, at.row, at.t, a);
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
