// Building blocks of the argument checks, for every convention's find_*_problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include <puffadv/puffadv.hpp>

namespace puffadv::detail {

// Messages are built by plain concatenation, not iostreams: an ostringstream
// in these checks crashed (a wrong facet in the locale) inside a process on
// the GPU machine whose other extensions brought their own C++ runtime state.
inline void append(std::string& out, const char* text) { out += text; }
inline void append(std::string& out, const std::string& text) { out += text; }
inline void append(std::string& out, char c) { out += c; }
void append(std::string& out, double value);       // %g: "nan", "1.5"
void append(std::string& out, const void* pointer);  // %p
template <typename Int, typename = std::enable_if_t<std::is_integral_v<Int>>>
void append(std::string& out, Int value) {
    out += std::to_string(value);
}

/// Concatenates strings, characters and numbers into one message.
template <typename... Parts>
std::string join(const Parts&... parts) {
    std::string out;
    (append(out, parts), ...);
    return out;
}

struct byte_range {
    std::intptr_t lo, hi;  // [lo, hi)
};

std::string describe_shape(const matrix& m);
std::string describe_strides(const matrix& m);
std::string describe_device(const struct device& d);
bool same_device(const struct device& a, const struct device& b);

/// The bytes a view can touch; false for an empty view (or one whose reach overflows).
bool byte_extent(const matrix& m, byte_range& out);

/// True when two elements of the view may share memory (zero or interleaved strides).
bool has_self_overlap(const matrix& m);

/// ndim, null data, shape and device of `m` against the reference array `ref`.
argument_problem check_array_layout(const matrix& m, const char* name, const matrix& ref,
                                    const char* ref_name);

/// Arrays with the names the caller knows them by: the first `count` of an
/// array (a call whose optional inputs vary).
class named_arrays {
public:
    using item = std::pair<const matrix*, const char*>;
    named_arrays() = default;
    named_arrays(const item* first, std::size_t count) : first_(first), count_(count) {}
    template <std::size_t N>
    named_arrays(const item (&all)[N]) : first_(all), count_(N) {}
    const item* begin() const { return first_; }
    const item* end() const { return first_ + count_; }

private:
    const item* first_ = nullptr;
    std::size_t count_ = 0;
};

/// An output must be writable, have distinct elements and not overlap any input
/// (or, with `others_are_outputs`, any of the call's other outputs).
argument_problem check_output(const matrix& out, const char* name, named_arrays inputs,
                              bool others_are_outputs = false);
inline argument_problem check_output(const matrix& out, const char* name,
                                     std::initializer_list<std::pair<const matrix*, const char*>> inputs,
                                     bool others_are_outputs = false) {
    return check_output(out, name, named_arrays(inputs.begin(), inputs.size()), others_are_outputs);
}

argument_problem check_unit_interval(double value, const char* name);
argument_problem check_non_negative(double value, const char* name);

/// Throws type_error / value_error for a problem; returns for none.
void throw_problem(const argument_problem& problem);

}  // namespace puffadv::detail
