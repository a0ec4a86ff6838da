// The one core entry (estimate.hpp): one check, then the backend that owns the
// arrays' memory, or backend_unavailable for the bindings' CPU fallback. The
// documented C++ entry points are thin wrappers over it.
#include "core/estimate.hpp"

#include <string>

#include "core/backends.hpp"
#include "core/checks.hpp"
#include "core/gpu_backend.hpp"
#include "core/kinds.hpp"

namespace puffadv {
namespace {

[[noreturn]] void throw_backend_missing(const device& d, const char* option) {
    throw backend_unavailable("values is on " + detail::describe_device(d) +
                              " but this build of puffadv has no " + device_type_name(d.type) +
                              " backend; rebuild with: pip install . -C cmake.define." + option +
                              "=ON");
}

const gpu_status& status_once(device_type type) {
    if (type == device_type::cuda) {
        static const gpu_status cuda = query_gpu(device_type::cuda);
        return cuda;
    }
    static const gpu_status hip = query_gpu(device_type::rocm);
    return hip;
}

template <typename T>
puff_arrays host_arrays(const T* values, const T* rewards, const T* dones, const T* importance,
                        T* advantages, std::int64_t rows, std::int64_t horizon) {
    if (rows < 0) throw value_error("rows must be >= 0, got " + std::to_string(rows));
    if (horizon < 0) throw value_error("horizon must be >= 0, got " + std::to_string(horizon));
    constexpr dtype type = sizeof(T) == 4 ? dtype::float32 : dtype::float64;
    auto view = [&](const T* p, bool writable) {
        matrix m;
        m.data = const_cast<T*>(p);
        m.type = type;
        m.rows = rows;
        m.cols = horizon;
        m.row_stride = horizon;
        m.col_stride = 1;
        m.writable = writable;
        return m;
    };
    return {view(values, false), view(rewards, false), view(dones, false), view(importance, false),
            view(advantages, true)};
}

}  // namespace

namespace detail {

void require_gpu_backend(const device& d) {
    if (d.type == device_type::cpu) return;
    const bool cuda = d.type == device_type::cuda;
    if (cuda ? !PUFFADV_HAS_CUDA : !PUFFADV_HAS_HIP)
        throw_backend_missing(d, cuda ? "PUFF_CUDA" : "PUFF_HIP");
    // Queried once per process: a launch without a device (no GPU, or a driver
    // older than the toolkit) would fail; the caller can compute on the CPU instead.
    const gpu_status& now = status_once(d.type);
    if (now.device_count > 0) return;
    throw backend_unavailable("values is on " + describe_device(d) + " but puffadv's " +
                              device_type_name(d.type) + " backend finds no usable device: " +
                              (now.error.empty() ? std::string("none found") : now.error));
}

// With next_values, TD(lambda) is the recursion of Peng's Q(lambda) on state
// values, G_t = r_t + gamma (1 - terminated_t) [(1 - lambda) next_values_t +
// lambda G_{t+1}] cut where done (TorchRL's td_lambda_return_estimate, rlax's
// lambda_returns; G = A + V holds only where next_values_t = V_{t+1}), and so
// is n-step with n >= T, whose every window reaches its episode's or row's end.
standard_params computed_as(const standard_arrays& arrays, const standard_params& params) {
    standard_params run = params;
    if (arrays.next_values && (params.kind == estimator::td_lambda ||
                               (params.kind == estimator::n_step_returns && params.n >= arrays.rewards.cols)))
        run.kind = estimator::q_lambda;
    return run;
}

void estimate(const standard_arrays& arrays, const standard_params& checked, gpu_stream stream) {
    throw_problem(find_problem(arrays, checked));
    const standard_params params = computed_as(arrays, checked);
    const matrix& ref = arrays.rewards;  // every array shares its shape and device now
    if (ref.rows == 0) return;           // nothing to launch
    // Horizon 0: the row sums are zeros, written by the backend; a kind whose
    // row says so launches nothing unless fused outputs are requested.
    if (ref.cols == 0 && !kind_info_of(params.kind).empty_horizon_launches && !arrays.fused.any()) return;
    const device& d = ref.device;
    if (d.type == device_type::cpu) return estimate_cpu(arrays, params);
    if (arrays.gamma || arrays.lambda)  // issue 29: the GPU producers read scalars only so far
        throw backend_unavailable("values is on " + describe_device(d) +
                                  " but per-step gamma / lambda arrays have no GPU kernel in this build of "
                                  "puffadv yet (the CPU engine computes them)");
    require_gpu_backend(d);  // backend_unavailable: the caller may fall back to the CPU
#if PUFFADV_HAS_CUDA
    if (d.type == device_type::cuda) return estimate_cuda(arrays, params, stream);
#endif
#if PUFFADV_HAS_HIP
    if (d.type == device_type::rocm) return estimate_hip(arrays, params, stream);
#endif
    (void)stream;
}

}  // namespace detail

void synchronize_device(const device& d) {
#if PUFFADV_HAS_CUDA
    if (d.type == device_type::cuda) detail::cuda_synchronize(d.index);
#endif
#if PUFFADV_HAS_HIP
    if (d.type == device_type::rocm) detail::hip_synchronize(d.index);
#endif
    (void)d;
}

void compute_standard_estimate(const standard_arrays& arrays, const standard_params& params,
                               gpu_stream stream) {
    detail::estimate(arrays, params, stream);
}

void compute_puff_advantage(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    detail::estimate(detail::as_standard_call(arrays), detail::as_standard_params(params), stream);
}

void compute_puff_advantage_cpu(const float* values, const float* rewards, const float* dones,
                                const float* importance, float* advantages, std::int64_t rows,
                                std::int64_t horizon, float gamma, float lambda, float rho_clip,
                                float c_clip) {
    compute_puff_advantage(host_arrays(values, rewards, dones, importance, advantages, rows, horizon),
                           puff_params{gamma, lambda, rho_clip, c_clip});
}

void compute_puff_advantage_cpu(const double* values, const double* rewards, const double* dones,
                                const double* importance, double* advantages, std::int64_t rows,
                                std::int64_t horizon, double gamma, double lambda, double rho_clip,
                                double c_clip) {
    compute_puff_advantage(host_arrays(values, rewards, dones, importance, advantages, rows, horizon),
                           puff_params{gamma, lambda, rho_clip, c_clip});
}

}  // namespace puffadv
