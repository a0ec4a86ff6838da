// Shared by the torch operator sources: torch tensors to the core's matrix
// views, and the core's argument problems to errors torch can carry.
//
// Only torch's LibTorch Stable ABI is used (torch/csrc/stable: C shims plus
// header-only C++), compiled for TORCH_TARGET_VERSION (cmake/PuffTorch.cmake),
// so one binary loads into every torch release from that one on, CPU and CUDA
// builds alike. Not in that ABI, and so in python/puffadv/torch.py: the
// Autograd key, the version counter, the Negative and Functionalize keys, and
// torch's error types (see throw_problem).
#pragma once

#include <torch/csrc/stable/tensor.h>

#include <puffadv/puffadv.hpp>

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

/// The five tensors of a puff-advantage call as core views.
puff_arrays to_arrays(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                      const Tensor& importance, const Tensor& advantages);

/// find_puff_problem's verdict thrown (TypeError / ValueError in Python).
void check(const puff_arrays& arrays, const puff_params& params);

/// compute_puff_advantage on checked arrays; its errors are rethrown for torch,
/// except backend_unavailable, which the CUDA key catches for the host fallback.
void run(const puff_arrays& arrays, const puff_params& params, gpu_stream stream);

/// The dtype of a functional op's outputs: float32 for bfloat16/float16 inputs
/// (float32 arithmetic, as the Python API returns), else the inputs' own.
torch::headeronly::ScalarType output_type(const Tensor& values);

/// A fresh row-major tensor of output_type shaped like `shape`, on its device.
Tensor empty_output(const Tensor& shape, const Tensor& values);

/// What the CUDA key's tensors are: HIP memory under a ROCm torch (which files
/// HIP tensors under CUDA; it has libtorch_hip loaded), else CUDA memory.
device_type gpu_memory_type();

/// torch's current stream on the tensor's GPU (nullptr for CPU tensors): the
/// CUDA (HIP) shim of the running torch, found at run time so that one binary
/// serves CPU-only and CUDA builds of torch (ops_cuda.cpp).
gpu_stream current_stream(const Tensor& t);

}  // namespace puffadv::torch_ops
