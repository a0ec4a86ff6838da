// The torch side of the one layer: torch tensors to the core's matrix views,
// the core's problems and exceptions to errors torch can carry, outputs, and
// torch's current stream. Every operator goes through these (ops.cpp).
//
// Only torch's LibTorch Stable ABI is used (torch/csrc/stable: C shims plus
// header-only C++), compiled for TORCH_TARGET_VERSION (cmake/PuffTorch.cmake),
// so one binary loads into every torch release from that one on, CPU and CUDA
// builds alike. Not in that ABI, and so in python/puffadv/torch.py: the
// Autograd key, the version counter, the Negative and Functionalize keys, and
// torch's error types (see throw_problem).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <puffadv/conventions.hpp>

namespace puffadv::torch_ops {

using torch::stable::Tensor;

/// A type problem leaves a kernel as std::runtime_error with this prefix (the
/// Stable ABI cannot raise TypeError); puffadv.torch re-raises it as TypeError.
/// A value problem is std::invalid_argument, which torch raises as ValueError.
inline constexpr const char* type_error_prefix = "TypeError: ";

/// Throws the problem as the exception its kind maps to (nothing for none).
void throw_problem(const argument_problem& problem);

/// TypeError naming the argument when torch passed None for it (an undefined tensor).
void require_tensor(const Tensor& t, const char* name);

/// A tensor as the core's view: 2-D as [rows, cols], 1-D as [rows] (ndim 1), any
/// other rank kept for the core to reject. Only facts the core cannot see (a
/// dtype outside its enum, a device it does not read) are checked here.
matrix to_matrix(const Tensor& t, const char* name, bool output);

/// The dtype of an op's outputs: float32 for bfloat16/float16 inputs (float32
/// arithmetic, as the Python API returns), else `typed`'s own.
torch::headeronly::ScalarType output_type(const Tensor& typed);

/// A fresh row-major tensor of output_type(typed) shaped like `shape`, on its device.
Tensor empty_output(const Tensor& shape, const Tensor& typed);

/// The core's one call on views of the tensors, its exceptions rethrown as torch
/// carries them; backend_unavailable is left to the caller (host fallback or refusal).
void compute(const standard_arrays& arrays, const standard_params& params, gpu_stream stream);

/// What the CUDA key's tensors are: HIP memory under a ROCm torch (which files
/// HIP tensors under CUDA; it has libtorch_hip loaded), else CUDA memory.
device_type gpu_memory_type();

/// torch's current stream on the tensor's GPU (nullptr for CPU tensors): the
/// CUDA (HIP) shim of the running torch, found at run time so that one binary
/// serves CPU-only and CUDA builds of torch (stream.cpp).
gpu_stream current_stream(const Tensor& t);

}  // namespace puffadv::torch_ops
