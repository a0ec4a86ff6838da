// XLA FFI buffers as puffadv::matrix views, and core exceptions as ffi::Error:
// the translation every handler shares (ffi_handlers.cpp).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include <puffadv/array.hpp>
#include <xla/ffi/api/ffi.h>

// The runtimes' stream types, declared exactly as cuda_runtime_api.h and
// hip_runtime_api.h do, so that the handlers need neither toolkit's headers.
struct CUstream_st;
struct ihipStream_t;
using cudaStream_t = CUstream_st*;
using hipStream_t = ihipStream_t*;

namespace puffadv::jax {

namespace ffi = xla::ffi;

inline bool to_dtype(ffi::DataType t, dtype& out) {
    switch (t) {
        case ffi::DataType::F32: out = dtype::float32; return true;
        case ffi::DataType::F64: out = dtype::float64; return true;
        case ffi::DataType::F16: out = dtype::float16; return true;
        case ffi::DataType::BF16: out = dtype::bfloat16; return true;
        case ffi::DataType::U8: out = dtype::uint8; return true;
        case ffi::DataType::PRED: out = dtype::boolean; return true;
        default: return false;
    }
}

/// XLA hands over dense row-major buffers (ffi_call's default layout). Leading
/// dimensions, which vmap adds as batch axes, fold into rows: a [B, rows, H]
/// buffer is the [B * rows, H] matrix (every row is independent), and a
/// `vector` buffer [B, rows] is the 1-D [B * rows] view (ndim 1, as the core
/// takes per-row arrays such as last_value).
inline ffi::Error to_matrix(const ffi::AnyBuffer& buffer, const char* name, device where,
                            bool writable, matrix& m, bool vector = false) {
    if (!to_dtype(buffer.element_type(), m.type)) {
        return ffi::Error::InvalidArgument(unreadable_dtype_message(
            name, "of XLA element type " + std::to_string(static_cast<int>(buffer.element_type()))));
    }
    const auto dims = buffer.dimensions();
    const std::size_t rank = dims.size(), minimum = vector ? 1 : 2;
    m.data = buffer.untyped_data();
    m.device = where;
    m.writable = writable;
    m.ndim = rank >= minimum ? static_cast<int>(minimum) : static_cast<int>(rank);
    if (rank >= minimum) {
        std::int64_t rows = 1;
        for (std::size_t i = 0; i + (vector ? 0 : 1) < rank; ++i) rows *= dims[i];
        m.rows = rows;
        m.cols = vector ? 1 : dims[rank - 1];
        m.row_stride = m.cols;
        m.col_stride = 1;
    }
    return ffi::Error::Success();
}

/// An optional input or output of a call: set only when the buffer is readable.
inline ffi::Error to_matrix(const ffi::AnyBuffer& buffer, const char* name, device where, bool writable,
                            std::optional<matrix>& m, bool vector = false) {
    matrix view;
    ffi::Error error = to_matrix(buffer, name, where, writable, view, vector);
    if (!error.failure()) m = view;
    return error;
}

/// Runs `compute` and turns what the core throws into an ffi::Error: exceptions
/// must not cross into XLA, which raises the error in Python (JaxRuntimeError).
template <typename Compute>
ffi::Error run_core(Compute&& compute) {
    try {
        compute();
    } catch (const std::invalid_argument& e) {  // value_error and type_error
        return ffi::Error::InvalidArgument(std::string("puffadv: ") + e.what());
    } catch (const std::exception& e) {
        return ffi::Error::Internal(std::string("puffadv: ") + e.what());
    } catch (...) {
        return ffi::Error::Internal("puffadv: unknown C++ exception");
    }
    return ffi::Error::Success();
}

}  // namespace puffadv::jax
