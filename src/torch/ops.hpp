// Shared by the two torch operator sources: torch tensors to the core's
// matrix views, and the core's argument problems to torch's error types.
#pragma once

#include <ATen/core/Tensor.h>

#include <puffadv/puffadv.hpp>

namespace puffadv::torch_ops {

/// TypeError naming the argument when torch passed None for it (an undefined tensor).
void require_tensor(const at::Tensor& t, const char* name);

/// A tensor as the core's view: 2-D as [rows, cols], 1-D as [rows] (ndim 1), any
/// other rank kept for the core to reject. Only facts the core cannot see (a
/// dtype outside its enum, a negative view, a device it does not read) are checked.
matrix to_matrix(const at::Tensor& t, const char* name, bool output);

/// The five tensors of a puff-advantage call as core views. Only facts the
/// core cannot see (a dtype outside its enum, a negative view) are checked here.
puff_arrays to_arrays(const at::Tensor& values, const at::Tensor& rewards, const at::Tensor& dones,
                      const at::Tensor& importance, const at::Tensor& advantages);

/// find_puff_problem's verdict as TORCH_CHECK_TYPE (TypeError) or TORCH_CHECK_VALUE (ValueError).
void check(const puff_arrays& arrays, const puff_params& params);

/// compute_puff_advantage on checked arrays; its errors become torch's, except
/// backend_unavailable, which the CUDA key catches for the host fallback.
void run(const puff_arrays& arrays, const puff_params& params, gpu_stream stream);

/// The dtype of a functional op's outputs: float32 for bfloat16/float16 inputs
/// (float32 arithmetic, as the Python API returns), else the inputs' own.
at::ScalarType output_type(const at::Tensor& values);

/// The functional op's output: a fresh row-major tensor shaped like values, of
/// output_type (TypeError naming values when it is None: an undefined tensor).
at::Tensor empty_output(const at::Tensor& values);

}  // namespace puffadv::torch_ops
