// Framework-neutral description of the 2-D arrays puffadv reads and writes.
// The bindings (nanobind, torch, XLA FFI) translate their own tensor types into
// these views, so that every check and every kernel is written once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace puffadv {

/// Element types that may appear in a puffadv call.
enum class dtype : std::uint8_t { float32, float64, float16, bfloat16, uint8, boolean };

/// Where an array lives. `rocm` is DLPack's kDLROCM: HIP device memory.
enum class device_type : std::uint8_t { cpu, cuda, rocm };

const char* dtype_name(dtype t) noexcept;

/// The one message for an element type puffadv cannot read, `described` in the
/// caller's own words (e.g. "int64"), shared by every binding.
std::string unreadable_dtype_message(const char* name, const std::string& described);
std::size_t dtype_size(dtype t) noexcept;
const char* device_type_name(device_type t) noexcept;

struct device {
    device_type type = device_type::cpu;
    int index = 0;
};

/// A strided [rows, cols] view of memory owned by someone else.
/// Strides count elements, not bytes, and may be negative or zero.
struct matrix {
    void* data = nullptr;
    dtype type = dtype::float32;
    std::int64_t rows = 0;
    std::int64_t cols = 0;
    std::int64_t row_stride = 0;
    std::int64_t col_stride = 1;
    puffadv::device device{};
    /// False for read-only views (a read-only NumPy array, a JAX buffer, ...).
    bool writable = true;
    /// Number of dimensions the caller's array had; anything but 2 is rejected.
    int ndim = 2;
    /// The caller's array is time-major [T, B] and this view its transpose
    /// (apply_time_axis): messages give its shape and strides as the caller's.
    bool time_major = false;

    /// Time steps are adjacent in memory (or there is at most one).
    bool time_contiguous() const noexcept { return col_stride == 1 || cols <= 1; }
};

/// Bad arguments: std::invalid_argument, so nanobind raises ValueError.
using value_error = std::invalid_argument;

/// An argument of the wrong kind (not an array, wrong dtype, wrong device):
/// the bindings raise TypeError for it.
class type_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// A CUDA/HIP runtime failure, carrying the runtime's own error string.
class gpu_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Valid GPU arrays that this build cannot compute on: no backend compiled for
/// their device, or the backend sees no usable device. Thrown only after every
/// argument check passed, so a binding may catch it and compute on the CPU.
/// Python: puffadv.BackendUnavailableError (a RuntimeError).
class backend_unavailable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace puffadv
