// The puff advantage as a plug-in of the row-scan kernels (scan_rows.cuh):
// a producer that turns loaded steps into affine maps (delta_t, k_t), and an
// epilogue that stores A_t.
//
// Producer concept (what scan_rows.cuh calls):
//   using value_type;                 arithmetic type of the scan (float/double)
//   struct step;                      what one time step loads; trivially copyable,
//                                     a whole number of 32-bit words (it is shuffled)
//   step load(row, t) const;          one step, any strides
//   void load4(row, t, step (&s)[4]) const;
//                                     steps t..t+3 of one row, called only when the
//                                     host's vectorizable() said every array is
//                                     time-contiguous and 16-byte aligned there
//   affine<value_type> map(const step& cur, const step& next, bool last) const;
//                                     the map of step t; `next` is step t+1, not
//                                     loaded (default) when t is the row's last step
// Epilogue concept:
//   void store(row, t, value_type a, const step& cur) const;
//   void store4(row, t, const value_type (&a)[4], const step (&s)[4]) const;
// Both get the producer's steps, so fused outputs (returns = A + V) need no reload.
#pragma once

#include "affine_scan.cuh"
#include "views.cuh"

namespace puffadv::gpu {
inline namespace PUFF_GPU_ABI {  // CUDA and HIP builds may share one library

/// Four consecutive elements through one or two 16-byte accesses.
__device__ __forceinline__ void load_vec4(const float* p, float (&x)[4]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ __forceinline__ void load_vec4(const double* p, double (&x)[4]) {
    const double2 a = reinterpret_cast<const double2*>(p)[0];
    const double2 b = reinterpret_cast<const double2*>(p)[1];
    x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}
__device__ __forceinline__ void store_vec4(float* p, const float (&x)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
}
__device__ __forceinline__ void store_vec4(double* p, const double (&x)[4]) {
    reinterpret_cast<double2*>(p)[0] = make_double2(x[0], x[1]);
    reinterpret_cast<double2*>(p)[1] = make_double2(x[2], x[3]);
}

/// SPEC section 1: delta_t = min(imp_t, rho_clip) * (r_{t+1} + gamma v_{t+1} (1 - d_{t+1}) - v_t),
/// k_t = gamma lambda min(imp_t, c_clip) (1 - d_{t+1}); the last step is the map 0.
template <typename T>
struct puff_producer {
    using value_type = T;
    struct step {
        T value, reward, done, importance;
    };

    strided_view<const T> values, rewards, dones, importance;
    T gamma, gamma_lambda, rho_clip, c_clip;

    __device__ __forceinline__ step load(std::int64_t row, std::int64_t t) const {
        return {*values.at(row, t), *rewards.at(row, t), *dones.at(row, t), *importance.at(row, t)};
    }

    __device__ __forceinline__ void load4(std::int64_t row, std::int64_t t, step (&s)[4]) const {
        T v[4], r[4], d[4], imp[4];
        load_vec4(values.at(row, t), v);
        load_vec4(rewards.at(row, t), r);
        load_vec4(dones.at(row, t), d);
        load_vec4(importance.at(row, t), imp);
        for (int j = 0; j < 4; ++j) s[j] = step{v[j], r[j], d[j], imp[j]};
    }

    // An explicit select, as the CPU backend: a NaN importance gives the clip (C fmin).
    static __device__ __forceinline__ T clip(T x, T limit) { return x < limit ? x : limit; }

    __device__ __forceinline__ affine<T> map(const step& cur, const step& next, bool last) const {
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

    template <typename Step>
    __device__ __forceinline__ void store(std::int64_t row, std::int64_t t, T a, const Step&) const {
        *out.at(row, t) = a;
    }
    template <typename Step>
    __device__ __forceinline__ void store4(std::int64_t row, std::int64_t t, const T (&a)[4],
                                           const Step (&)[4]) const {
        store_vec4(out.at(row, t), a);
    }
};

}  // namespace PUFF_GPU_ABI
}  // namespace puffadv::gpu
