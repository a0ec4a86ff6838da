// Every argument check of a puff-advantage call, written once. The nanobind
// module, the torch operators, the XLA FFI handlers and the C++ entry points
// all call find_puff_problem, so their messages are identical.
#include "core/checks.hpp"
#include "core/conventions_detail.hpp"  // dtype rules and fused outputs, shared with the conventions

#include <cmath>
#include <cstdio>

namespace puffadv {

const char* dtype_name(dtype t) noexcept {
    switch (t) {
        case dtype::float32: return "float32";
        case dtype::float64: return "float64";
        case dtype::float16: return "float16";
        case dtype::bfloat16: return "bfloat16";
        case dtype::uint8: return "uint8";
        case dtype::boolean: return "bool";
    }
    return "unknown";
}

std::string unreadable_dtype_message(const char* name, const std::string& described) {
    // What this argument accepts, known from its name (the names are the core's own).
    const std::string n = name;
    const char* expected = "float32, float64, bfloat16 or float16";
    if (n == "dones" || n == "terminated" || n == "truncated" || n == "greedy")
        expected = "bool, uint8 or the float inputs' dtype (float32, float64, bfloat16 or float16)";
    else if (n == "advantages" || n == "returns" || n == "out" || n == "vs" || n == "pg_advantages")
        expected = "the float inputs' dtype (float32, float64, bfloat16 or float16), or float32 for "
                   "bfloat16/float16 inputs";
    else if (n == "abs_sums" || n == "sums" || n == "square_sums")
        expected = "float32 or float64";
    return n + " has dtype " + described + ", which puffadv does not read; expected " + expected;
}

std::size_t dtype_size(dtype t) noexcept {
    switch (t) {
        case dtype::float64: return 8;
        case dtype::float32: return 4;
        case dtype::float16:
        case dtype::bfloat16: return 2;
        case dtype::uint8:
        case dtype::boolean: return 1;
    }
    return 0;
}

const char* device_type_name(device_type t) noexcept {
    switch (t) {
        case device_type::cpu: return "cpu";
        case device_type::cuda: return "cuda";
        case device_type::rocm: return "rocm";
    }
    return "unknown";
}

namespace detail {

void append(std::string& out, double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    out += text;
}

void append(std::string& out, const void* pointer) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", pointer);
    out += text;
}

std::string describe_shape(const matrix& m) {
    return join('[', m.rows, ", ", m.cols, ']');
}

std::string describe_device(const struct device& d) {
    if (d.type == device_type::cpu) return "cpu";
    return std::string(device_type_name(d.type)) + ":" + std::to_string(d.index);
}

bool same_device(const struct device& a, const struct device& b) {
    return a.type == b.type && (a.type == device_type::cpu || a.index == b.index);
}

bool byte_extent(const matrix& m, byte_range& out) {
    if (m.rows == 0 || m.cols == 0) return false;
    const auto element = static_cast<std::int64_t>(dtype_size(m.type));
    std::int64_t lo = 0, hi = 0;
    for (auto [stride, count] : {std::pair{m.row_stride, m.rows}, std::pair{m.col_stride, m.cols}}) {
        std::int64_t reach = 0;
        if (__builtin_mul_overflow(stride, count - 1, &reach)) return false;
        (reach < 0 ? lo : hi) += reach;
    }
    const auto base = reinterpret_cast<std::intptr_t>(m.data);
    out.lo = base + lo * element;
    out.hi = base + (hi + 1) * element;
    return true;
}

bool has_self_overlap(const matrix& m) {
    if (m.rows == 0 || m.cols == 0 || (m.rows == 1 && m.cols == 1)) return false;
    if (m.rows <= 1) return m.col_stride == 0;
    if (m.cols <= 1) return m.row_stride == 0;
    std::int64_t small = std::llabs(m.row_stride), small_n = m.rows;
    std::int64_t big = std::llabs(m.col_stride);
    if (small > big) std::swap(small, big), small_n = m.cols;
    // Sufficient for distinct elements: the outer stride steps past the whole inner run.
    return small == 0 || big < small * (small_n - 1) + 1;
}

argument_problem check_array_layout(const matrix& m, const char* name, const matrix& ref,
                                    const char* ref_name) {
    if (m.ndim != 2) {
        return {argument_problem::value, join(name, " must be a 2-D [rows, horizon] array, got a ",
                    m.ndim, "-D array")};
    }
    // A negative extent would pass every later check and index before the data.
    if (m.rows < 0 || m.cols < 0) {
        return {argument_problem::value,
                std::string(name) + " has a negative shape " + describe_shape(m)};
    }
    if (m.data == nullptr && m.rows > 0 && m.cols > 0) {
        return {argument_problem::value, std::string(name) + " has no data (null pointer)"};
    }
    // A misaligned element is undefined behaviour on the CPU and a fault on a GPU
    // (a view at an odd byte offset of a uint8 buffer gets this far).
    const auto element = static_cast<std::uintptr_t>(dtype_size(m.type));
    if (m.rows > 0 && m.cols > 0 && element > 1 &&
        reinterpret_cast<std::uintptr_t>(m.data) % element != 0) {
        return {argument_problem::value, join(name, " is not aligned to its ", element, "-byte ",
                    dtype_name(m.type), " elements (data at ", m.data, "); pass an aligned copy")};
    }
    if (&m != &ref && (m.rows != ref.rows || m.cols != ref.cols)) {
        return {argument_problem::value, join(name, " has shape ", describe_shape(m), " but ",
                    ref_name, " has shape ", describe_shape(ref),
                    "; all arrays must share one [rows, horizon] shape")};
    }
    if (!same_device(m.device, ref.device)) {
        return {argument_problem::value, join(name, " is on ", describe_device(m.device), " but ",
                    ref_name, " is on ", describe_device(ref.device),
                    "; all arrays must be on one device")};
    }
    return {};
}

argument_problem check_output(const matrix& out, const char* name, named_arrays inputs,
                              bool others_are_outputs) {
    if (!out.writable) {
        return {argument_problem::value,
                std::string(name) + " is read-only; pass a writable array or leave it as None"};
    }
    if (has_self_overlap(out)) {
        return {argument_problem::value, join(name, " has overlapping elements (strides [",
                    out.row_stride, ", ", out.col_stride,
                    "]); pass an array whose elements are distinct")};
    }
    byte_range out_range{};
    if (!byte_extent(out, out_range)) return {};
    for (auto [input, input_name] : inputs) {
        byte_range in_range{};
        if (byte_extent(*input, in_range) && in_range.lo < out_range.hi && out_range.lo < in_range.hi) {
            return {argument_problem::value,
                    std::string(name) + " overlaps " + input_name + " in memory; " +
                        (others_are_outputs ? "two outputs must not share memory"
                                            : "the output must not alias an input")};
        }
    }
    return {};
}

argument_problem check_unit_interval(double value, const char* name) {
    if (!std::isfinite(value) || value < 0.0 || value > 1.0) {
        return {argument_problem::value, join(name, " must be finite and in [0, 1], got ", value)};
    }
    return {};
}

argument_problem check_non_negative(double value, const char* name) {
    if (!std::isfinite(value) || value < 0.0) {
        return {argument_problem::value, join(name, " must be finite and >= 0, got ", value)};
    }
    return {};
}

void throw_problem(const argument_problem& problem) {
    if (problem.kind == argument_problem::type) throw type_error(problem.message);
    if (problem.kind == argument_problem::value) throw value_error(problem.message);
}

}  // namespace detail

argument_problem find_puff_problem(const puff_arrays& a, const puff_params& p) {
    using namespace detail;
    const std::pair<const matrix*, const char*> inputs[] = {
        {&a.values, "values"}, {&a.rewards, "rewards"}, {&a.dones, "dones"}, {&a.importance, "importance"}};
    const std::pair<const matrix*, const char*> all[] = {
        inputs[0], inputs[1], inputs[2], inputs[3], {&a.advantages, "advantages"}};

    for (auto [m, name] : all)
        if (auto problem = check_array_layout(*m, name, a.values, "values")) return problem;

    // Floats: one dtype (float32, float64, bfloat16, float16); dones may also be
    // bool/uint8; the output float32 for reduced-precision inputs (conventions_checks.cpp).
    const dtype t = a.values.type;
    for (auto [m, name] : {inputs[0], inputs[1], inputs[3]})
        if (auto problem = check_float_input(*m, name, a.values, "values", "all arrays must share one dtype"))
            return problem;
    if (auto problem = check_flag_input(a.dones, "dones", t)) return problem;
    if (auto problem = check_float_output(a.advantages, "advantages", t)) return problem;
    if (auto problem = check_output(a.advantages, "advantages", inputs)) return problem;
    if (auto problem = check_fused_outputs(a.fused, a.values, "values", t, inputs, {all + 4, 1}))
        return problem;

    if (auto problem = check_unit_interval(p.gamma, "gamma")) return problem;
    if (auto problem = check_unit_interval(p.gae_lambda, "gae_lambda")) return problem;
    if (auto problem = check_non_negative(p.rho_clip, "rho_clip")) return problem;
    if (auto problem = check_non_negative(p.c_clip, "c_clip")) return problem;
    return {};
}

void check_puff_arguments(const puff_arrays& arrays, const puff_params& params) {
    detail::throw_problem(find_puff_problem(arrays, params));
}

}  // namespace puffadv
