// The building blocks of the one argument check (arguments.cpp): layouts,
// dtypes, aliasing and scalars, each with the message every binding reports.
#include "core/checks.hpp"
#include "core/conventions_detail.hpp"  // the declarations of the dtype and fused-output blocks

#include <charconv>
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

// The caller's shape and strides: a time-major array's view is its transpose, a
// 1-D array's view has one column.
std::string describe_shape(const matrix& m) {
    if (m.time_major) return join('[', m.cols, ", ", m.rows, ']');
    return join('[', m.rows, ", ", m.cols, ']');
}

std::string describe_strides(const matrix& m) {
    if (m.ndim == 1) return join('[', m.row_stride, ']');
    if (m.time_major) return join('[', m.col_stride, ", ", m.row_stride, ']');
    return join('[', m.row_stride, ", ", m.col_stride, ']');
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

// Whether two views of one element size and the same strides, whose byte ranges
// meet, share an element: some di*row_stride + dj*col_stride (|di| < rows,
// |dj| < cols) lands within one element of the offset between them. Exact: a
// buffer's interleaved fields (buf[..., 0] and buf[..., 1]) share none, where the
// byte ranges alone said they overlap. One loop over the shorter axis.
static bool share_an_element(const matrix& a, const matrix& b) {
    const auto element = static_cast<std::int64_t>(dtype_size(a.type));
    const std::int64_t offset = reinterpret_cast<std::intptr_t>(b.data) - reinterpret_cast<std::intptr_t>(a.data);
    std::int64_t outer = a.row_stride, outer_n = a.rows, inner = a.col_stride, inner_n = a.cols;
    if (outer_n > inner_n) std::swap(outer, inner), std::swap(outer_n, inner_n);
    // The element offsets k*element within one element of `offset`.
    const std::int64_t below = offset >= 0 ? offset / element : -((-offset + element - 1) / element);
    for (std::int64_t k : {below, below + 1}) {
        if ((k * element - offset) >= element || (offset - k * element) >= element) continue;
        for (std::int64_t di = -(outer_n - 1); di <= outer_n - 1; ++di) {
            const std::int64_t rest = k - di * outer;
            if (inner == 0 ? rest == 0 : rest % inner == 0 && std::llabs(rest / inner) < inner_n) return true;
        }
    }
    return false;
}

// `exact`: two outputs (written element by element, never past their own elements)
// may interleave; an output and an input are kept to disjoint byte ranges.
static bool share_memory(const matrix& a, const matrix& b, bool exact) {
    byte_range ra{}, rb{};
    if (!byte_extent(a, ra) || !byte_extent(b, rb)) return false;
    if (!(ra.lo < rb.hi && rb.lo < ra.hi)) return false;
    if (!exact || dtype_size(a.type) != dtype_size(b.type) || a.row_stride != b.row_stride ||
        a.col_stride != b.col_stride || a.rows != b.rows || a.cols != b.cols)
        return true;  // the byte ranges' answer (conservative)
    return share_an_element(a, b);
}

argument_problem check_output(const matrix& out, const char* name, named_arrays inputs,
                              bool others_are_outputs) {
    if (!out.writable) {
        return {argument_problem::value,
                std::string(name) + " is read-only; pass a writable array or leave it as None"};
    }
    if (has_self_overlap(out)) {
        return {argument_problem::value, join(name, " has overlapping elements (strides ", describe_strides(out),
                    "); pass an array whose elements are distinct")};
    }
    for (auto [input, input_name] : inputs) {
        if (share_memory(out, *input, others_are_outputs)) {
            return {argument_problem::value,
                    std::string(name) + " overlaps " + input_name + " in memory; " +
                        (others_are_outputs ? "two outputs must not share memory"
                                            : "the output must not alias an input")};
        }
    }
    return {};
}

namespace {
// The shortest text that reads back as `value` (Python's repr): a stream's 6 digits
// printed gamma = 1 + 2.2e-16 as "got 1", the one value the check had to refuse.
std::string exact(double value) {
    char text[32];
    const auto end = std::to_chars(text, text + sizeof text, value).ptr;
    return std::string(text, end);
}
}  // namespace

argument_problem check_unit_interval(double value, const char* name) {
    if (!std::isfinite(value) || value < 0.0 || value > 1.0) {
        return {argument_problem::value, join(name, " must be finite and in [0, 1], got ", exact(value))};
    }
    return {};
}

argument_problem check_non_negative(double value, const char* name) {
    if (!std::isfinite(value) || value < 0.0) {
        return {argument_problem::value, join(name, " must be finite and >= 0, got ", exact(value))};
    }
    return {};
}

void throw_problem(const argument_problem& problem) {
    if (problem.kind == argument_problem::type) throw type_error(problem.message);
    if (problem.kind == argument_problem::value) throw value_error(problem.message);
}

namespace {

argument_problem type_problem(std::string message) { return {argument_problem::type, std::move(message)}; }
argument_problem value_problem(std::string message) { return {argument_problem::value, std::move(message)}; }

// Unaligned elements are undefined behaviour on the CPU and a fault on a GPU.
argument_problem check_alignment(const matrix& m, const char* name) {
    const auto element = static_cast<std::uintptr_t>(dtype_size(m.type));
    if (m.rows > 0 && m.cols > 0 && element > 1 && reinterpret_cast<std::uintptr_t>(m.data) % element != 0)
        return value_problem(std::string(name) + " is not aligned to its " + std::to_string(element) +
                             "-byte " + dtype_name(m.type) + " elements; pass an aligned copy");
    return {};
}

}  // namespace

argument_problem check_float_input(const matrix& m, const char* name, const matrix& first,
                                   const char* first_name, const char* rule) {
    if (&m == &first) {
        if (!is_float(m.type))
            return type_problem(std::string(name) + " must be float32, float64, bfloat16 or float16, got " +
                                dtype_name(m.type));
        return check_alignment(m, name);
    }
    if (m.type != first.type)
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) + " but " + first_name +
                            " has " + dtype_name(first.type) + "; " + rule);
    return check_alignment(m, name);
}

argument_problem check_flag_input(const matrix& m, const char* name, dtype float_type) {
    if (m.type != dtype::boolean && m.type != dtype::uint8 && m.type != float_type)
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) +
                            "; expected bool, uint8 or the float inputs' dtype " + dtype_name(float_type));
    return check_alignment(m, name);
}

argument_problem check_float_output(const matrix& m, const char* name, dtype float_type) {
    if (m.type != float_type && !(is_reduced(float_type) && m.type == dtype::float32)) {
        std::string expected = dtype_name(float_type);
        if (is_reduced(float_type)) expected += " or float32";
        return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) + "; expected " + expected);
    }
    return check_alignment(m, name);
}

argument_problem check_vector_layout(const matrix& m, const char* name, const matrix& ref,
                                     const char* ref_name) {
    if (m.ndim != 1) {
        return value_problem(join(name, " must be a 1-D array of ", ref.rows, " (one per row of ",
                                  ref_name, "), got a ", m.ndim, "-D array"));
    }
    if (m.rows != ref.rows) {
        return value_problem(join(name, " has ", m.rows, " elements but ", ref_name, " has ",
                                  ref.rows, " rows; pass one per row"));
    }
    if (m.data == nullptr && m.rows > 0) return value_problem(std::string(name) + " has no data (null pointer)");
    if (!same_device(m.device, ref.device))
        return value_problem(std::string(name) + " is on " + describe_device(m.device) + " but " + ref_name +
                             " is on " + describe_device(ref.device) + "; all arrays must be on one device");
    return check_alignment(m, name);
}

argument_problem check_fused_outputs(const fused_outputs& f, const matrix& ref, const char* ref_name,
                                     dtype float_type, named_arrays inputs, named_arrays outputs) {
    // Every output must be clear of every input and of every other output.
    auto clear_of_others = [&](const matrix& out, const char* name) -> argument_problem {
        // `outputs` holds the reference input itself when a call has no advantages output.
        for (auto [other, other_name] : outputs)
            if (auto problem = check_output(out, name, {{other, other_name}}, other != &ref)) return problem;
        if (f.returns && &out != &*f.returns)
            if (auto problem = check_output(out, name, {{&*f.returns, "returns"}}, true)) return problem;
        for (auto [input, input_name] : inputs)
            if (auto problem = check_output(out, name, {{input, input_name}})) return problem;
        return check_output(out, name, {});
    };
    if (f.returns) {
        if (auto problem = check_array_layout(*f.returns, "returns", ref, ref_name)) return problem;
        if (auto problem = check_float_output(*f.returns, "returns", float_type)) return problem;
        if (auto problem = clear_of_others(*f.returns, "returns")) return problem;
    }
    const std::pair<const std::optional<matrix>*, const char*> sums[] = {
        {&f.abs_sums, "abs_sums"}, {&f.sums, "sums"}, {&f.square_sums, "square_sums"}};
    for (auto [sum, name] : sums) {
        if (!*sum) continue;
        const matrix& m = **sum;
        if (auto problem = check_vector_layout(m, name, ref, ref_name)) return problem;
        if (m.type != dtype::float32 && m.type != dtype::float64)
            return type_problem(std::string(name) + " has dtype " + dtype_name(m.type) +
                                "; expected float32 or float64");
        if (auto problem = clear_of_others(m, name)) return problem;
        for (auto [other, other_name] : sums)
            if (other != sum && *other)
                if (auto problem = check_output(m, name, {{&**other, other_name}}, true)) return problem;
    }
    return {};
}

}  // namespace detail

}  // namespace puffadv
