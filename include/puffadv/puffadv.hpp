// puffadv: PufferLib's "puff advantage" (GAE-lambda with V-trace clipped
// importance weights) for CPU, CUDA and HIP. Plain C++17: no CUDA types here,
// so a CPU-only consumer compiles this header with any C++ compiler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <puffadv/array.hpp>
#include <puffadv/config.hpp>

namespace puffadv {

/// A cudaStream_t or hipStream_t, passed opaquely; nullptr is the legacy default stream.
using gpu_stream = void*;

/// Scalars of SPEC section 1. All must be finite; gamma and gae_lambda in [0, 1]; clips >= 0.
struct puff_params {
    double gamma = 0.99;
    double gae_lambda = 0.95;
    double rho_clip = 1.0;
    double c_clip = 1.0;
};

/// Optional outputs computed in the same pass as the advantages, costing no
/// second read of the inputs. An absent one is not computed. The sums are
/// 1-D [rows] arrays (ndim 1, rows = length, row_stride = element stride),
/// float32 or float64, accumulated in float64 whatever their dtype.
struct fused_outputs {
    std::optional<matrix> returns;      ///< [rows, horizon]: advantages + values (value targets)
    std::optional<matrix> abs_sums;     ///< [rows]: sum over t of |A| (prioritised replay)
    std::optional<matrix> sums;         ///< [rows]: sum over t of A (normalisation)
    std::optional<matrix> square_sums;  ///< [rows]: sum over t of A^2 (normalisation)
    bool any() const noexcept { return returns || abs_sums || sums || square_sums; }
};

/// The five arrays of one call; all [rows, horizon] on one device. `fused` is
/// optional and last, so `puff_arrays{v, r, d, i, a}` still means "no extras".
struct puff_arrays {
    matrix values, rewards, dones, importance, advantages;
    fused_outputs fused{};
};

/// What is wrong with a call, if anything. `type` problems become TypeError in
/// Python (TORCH_CHECK_TYPE in torch), `value` problems ValueError.
struct argument_problem {
    enum kind_t { none, type, value } kind = none;
    std::string message;
    explicit operator bool() const noexcept { return kind != none; }
};

/// Every argument check of a puff-advantage call, shared by all bindings.
argument_problem find_puff_problem(const puff_arrays& arrays, const puff_params& params);

/// Throws type_error / value_error for the first problem find_puff_problem reports.
void check_puff_arguments(const puff_arrays& arrays, const puff_params& params);

/// Checks, then computes on the arrays' device: CPU threads, or a kernel on
/// `stream` (never synchronised). rows == 0 launches nothing.
void compute_puff_advantage(const puff_arrays& arrays, const puff_params& params,
                            gpu_stream stream = nullptr);

/// SPEC section 3: contiguous row-major host arrays of shape [rows, horizon].
/// Throws std::invalid_argument on bad arguments.
void compute_puff_advantage_cpu(const float* values, const float* rewards, const float* dones,
                                const float* importance, float* advantages,
                                std::int64_t rows, std::int64_t horizon,
                                float gamma, float lambda, float rho_clip, float c_clip);
void compute_puff_advantage_cpu(const double* values, const double* rewards, const double* dones,
                                const double* importance, double* advantages,
                                std::int64_t rows, std::int64_t horizon,
                                double gamma, double lambda, double rho_clip, double c_clip);

#if PUFFADV_HAS_CUDA
/// Device pointers on the current CUDA device; `stream` is a cudaStream_t.
/// Asynchronous: returns once the kernel is queued. Throws gpu_error on launch failure.
void compute_puff_advantage_cuda(const float* values, const float* rewards, const float* dones,
                                 const float* importance, float* advantages,
                                 std::int64_t rows, std::int64_t horizon,
                                 float gamma, float lambda, float rho_clip, float c_clip,
                                 gpu_stream stream);
#endif
#if PUFFADV_HAS_HIP
/// Device pointers on the current HIP device; `stream` is a hipStream_t.
void compute_puff_advantage_hip(const float* values, const float* rewards, const float* dones,
                                const float* importance, float* advantages,
                                std::int64_t rows, std::int64_t horizon,
                                float gamma, float lambda, float rho_clip, float c_clip,
                                gpu_stream stream);
#endif

/// What this build contains.
struct build_info {
    std::string version;
    bool has_cuda = false;
    bool has_hip = false;
    std::string gpu_architectures;  ///< e.g. "75;80;86;89;90" or "gfx90a"; empty without GPU
    std::string build_type;         ///< CMAKE_BUILD_TYPE
    std::string compiler;           ///< C++ compiler id and version
    std::string cxx_flags;          ///< flags the core was compiled with
    bool openmp = false;            ///< always false: CPU threads are puffadv's own fork-safe pool
    bool sanitizers = false;        ///< built with ASan/UBSan
};
build_info get_build_info();

/// What a GPU backend sees right now.
struct gpu_status {
    bool compiled = false;
    int device_count = 0;
    int runtime_version = 0;  ///< e.g. 13000 for CUDA 13.0; 0 when unknown
    int driver_version = 0;   ///< highest runtime the driver supports, same encoding
    std::vector<std::string> device_names;
    std::string error;        ///< why no device is usable, when device_count == 0
};
gpu_status query_gpu(device_type type);

/// Waits until all work queued on GPU `d` has finished (no-op for the CPU, and
/// for a device type this build has no backend for). For callers that cannot
/// order their next use of an output on a stream, such as JAX arrays reached
/// through DLPack; puffadv's own calls never wait.
void synchronize_device(const device& d);

/// CPU threads a call uses: PUFFADV_NUM_THREADS if set (>= 1), else all cores.
int cpu_thread_count();

/// Reads PUFFADV_NUM_THREADS now, and makes later calls from this thread use that
/// count without reading the environment again (false goes back to reading it on every
/// call). getenv is not safe against a concurrent setenv: Python changes os.environ
/// under the GIL, so the Python module pins the count, GIL held, before every call.
void pin_cpu_thread_count(bool pin = true);

}  // namespace puffadv
