// Building blocks of the argument checks, for every convention's find_*_problem.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include <puffadv/puffadv.hpp>

namespace puffadv::detail {

struct byte_range {
    std::intptr_t lo, hi;  // [lo, hi)
};

std::string describe_shape(const matrix& m);
std::string describe_device(const struct device& d);
bool same_device(const struct device& a, const struct device& b);

/// The bytes a view can touch; false for an empty view (or one whose reach overflows).
bool byte_extent(const matrix& m, byte_range& out);

/// True when two elements of the view may share memory (zero or interleaved strides).
bool has_self_overlap(const matrix& m);

/// ndim, null data, shape and device of `m` against the reference array `ref`.
argument_problem check_array_layout(const matrix& m, const char* name, const matrix& ref,
                                    const char* ref_name);

/// An output must be writable, have distinct elements and not overlap any input.
argument_problem check_output(const matrix& out, const char* name,
                              std::initializer_list<std::pair<const matrix*, const char*>> inputs);

argument_problem check_unit_interval(double value, const char* name);
argument_problem check_non_negative(double value, const char* name);

/// Throws type_error / value_error for a problem; returns for none.
void throw_problem(const argument_problem& problem);

}  // namespace puffadv::detail
