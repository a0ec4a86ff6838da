// Private pieces shared by the standard conventions and the fused/reduced-
// precision puff advantage: dtype rules and fused-output checks.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>

#include <puffadv/conventions.hpp>

#include "core/checks.hpp"
#include "core/kinds.hpp"  // argument_role, argument_name: the one table of kinds

namespace puffadv::detail {

using named_matrix = std::pair<const matrix*, const char*>;

inline bool is_float(dtype t) noexcept {
    return t == dtype::float32 || t == dtype::float64 || t == dtype::float16 || t == dtype::bfloat16;
}
inline bool is_reduced(dtype t) noexcept { return t == dtype::float16 || t == dtype::bfloat16; }

/// A float input: `first_float`'s dtype (float32, float64, bfloat16 or float16).
argument_problem check_float_input(const matrix& m, const char* name, const matrix& first,
                                   const char* first_name,
                                   const char* rule = "the float inputs must share one dtype");

/// Flags (dones, terminated, truncated): bool, uint8 or the float inputs' dtype.
argument_problem check_flag_input(const matrix& m, const char* name, dtype float_type);

/// A [rows, horizon] output: the inputs' dtype, or float32 for reduced-precision inputs.
argument_problem check_float_output(const matrix& m, const char* name, dtype float_type);

/// A 1-D [rows] array on `ref`'s device with `ref.rows` elements.
argument_problem check_vector_layout(const matrix& m, const char* name, const matrix& ref,
                                     const char* ref_name);

/// Layout, dtype and aliasing of every present fused output. `outputs` are the
/// call's other outputs, which the fused ones must not overlap either.
argument_problem check_fused_outputs(const fused_outputs& fused, const matrix& ref, const char* ref_name,
                                     dtype float_type, named_arrays inputs, named_arrays outputs);

/// The message for a time_axis that is none of 0, -2, 1, -1 (`got`: as the caller wrote it).
std::string time_axis_message(const char* name, const std::string& got);

/// The message for a family call without time_axis (issue 33: no default layout, so
/// that a time-major [T, B] buffer is never read as batch-major [B, T]). Every
/// surface raises it as a TypeError: the Python functions, puffadv.jax, torch.ops.
std::string time_axis_required_message(const char* function);

/// puffadv::apply_time_axis on every [rows, horizon] array of a call, each named as
/// `p`'s kind names it (the public overload's names are the gae family's).
argument_problem apply_time_axis(standard_arrays& a, std::int64_t time_axis, const standard_params& p);

}  // namespace puffadv::detail
