// See bindings_arrays.hpp.
#include "bindings_arrays.hpp"

#include <cstdint>
#include <string>

#include "bindings_exchange.hpp"

namespace nb = nanobind;

namespace puffadv::bindings {
namespace {

dtype dtype_of(nb::dlpack::dtype t, const char* name) {
    using code = nb::dlpack::dtype_code;
    const auto c = static_cast<code>(t.code);
    if (t.lanes == 1) {
        if (c == code::Float && t.bits == 32) return dtype::float32;
        if (c == code::Float && t.bits == 64) return dtype::float64;
        if (c == code::Float && t.bits == 16) return dtype::float16;
        if (c == code::Bfloat && t.bits == 16) return dtype::bfloat16;
        if (c == code::UInt && t.bits == 8) return dtype::uint8;
        if (c == code::Bool && t.bits == 8) return dtype::boolean;
    }
    static const char* kinds[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
    const std::string kind = t.code < 7 ? kinds[t.code] : "code " + std::to_string(t.code);
    throw type_error(unreadable_dtype_message(name, kind + std::to_string(t.bits)));
}

device device_of(int dlpack_device, int index, const char* name) {
    switch (dlpack_device) {
        case nb::device::cpu::value:
        case nb::device::cuda_host::value:  // pinned host memory: the CPU reads it directly
            return {device_type::cpu, 0};
        case nb::device::cuda::value:
        case nb::device::cuda_managed::value:
            return {device_type::cuda, index};
        case nb::device::rocm::value:
            return {device_type::rocm, index};
    }
    throw type_error(std::string(name) + " lives on DLPack device type " + std::to_string(dlpack_device) +
                     "; puffadv reads CPU, CUDA and ROCm memory");
}

/// The matrix view of an imported array `a` (an nb::ndarray or an exchanged_array).
template <class Array>
matrix describe(const Array& a, bool writable, const char* name) {
    matrix m;
    m.ndim = static_cast<int>(a.ndim());
    m.writable = writable;
    m.type = dtype_of(a.dtype(), name);
    m.device = device_of(a.device_type(), a.device_id(), name);
    m.data = const_cast<void*>(static_cast<const void*>(a.data()));
    if (m.ndim == 2) {
        m.rows = static_cast<std::int64_t>(a.shape(0));
        m.cols = static_cast<std::int64_t>(a.shape(1));
        m.row_stride = a.stride(0);
        m.col_stride = a.stride(1);
    } else if (m.ndim == 1) {
        m.rows = static_cast<std::int64_t>(a.shape(0));
        m.cols = 1;
        m.row_stride = a.stride(0);
        m.col_stride = 1;
    }
    return m;
}

}  // namespace

std::optional<matrix> import_array(nb::handle obj, const char* name, array_holder& keep, bool optional) {
    if (optional && obj.is_none()) return std::nullopt;
    // torch tensors: described by torch's C function, with no capsule (bindings_exchange.hpp).
    if (exchanged_array exchanged; exchanged.import(obj)) return describe(exchanged, /*writable=*/true, name);
    const bool writable = nb::try_cast(obj, keep.writable, false);
    if (!writable && !nb::try_cast(obj, keep.read_only, false)) {
        throw type_error(std::string(name) + " must be an array (NumPy, PyTorch, CuPy, JAX or any "
                         "DLPack producer)" + (optional ? " or None" : "") + ", got " +
                         nb::type_name(obj.type()).c_str());
    }
    return writable ? describe(keep.writable, true, name) : describe(keep.read_only, false, name);
}

}  // namespace puffadv::bindings
