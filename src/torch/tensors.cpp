// Tensors to matrix views and the core's errors to torch's: the translation
// every operator of the op table shares (ops.cpp). Every argument check is the
// core's, so messages match the Python API's word for word.
#include "torch/tensors.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/stable/ops.h>

#include "core/layer_call.hpp"

namespace puffadv::torch_ops {
namespace {

using torch::headeronly::DeviceType;
using torch::headeronly::ScalarType;

dtype to_dtype(const Tensor& t, const char* name) {
    switch (t.scalar_type()) {
        case ScalarType::Float: return dtype::float32;
        case ScalarType::Double: return dtype::float64;
        case ScalarType::Half: return dtype::float16;
        case ScalarType::BFloat16: return dtype::bfloat16;
        case ScalarType::Byte: return dtype::uint8;
        case ScalarType::Bool: return dtype::boolean;
        default: break;
    }
    // Outside the core's dtype enum; worded as the nanobind module words it (int64, not Long).
    const char* kind = nullptr;
    switch (t.scalar_type()) {
        case ScalarType::Char: kind = "int8"; break;
        case ScalarType::Short: kind = "int16"; break;
        case ScalarType::Int: kind = "int32"; break;
        case ScalarType::Long: kind = "int64"; break;
        case ScalarType::ComplexFloat: kind = "complex64"; break;
        case ScalarType::ComplexDouble: kind = "complex128"; break;
        default: kind = torch::headeronly::toString(t.scalar_type()); break;
    }
    throw_problem({argument_problem::type, unreadable_dtype_message(name, kind)});
    return dtype::float32;  // not reached
}

}  // namespace

void throw_problem(const argument_problem& problem) {
    if (problem.kind == argument_problem::type) throw std::runtime_error(type_error_prefix + problem.message);
    if (problem.kind == argument_problem::value) throw std::invalid_argument(problem.message);
}

void require_tensor(const Tensor& t, const char* name) {
    if (!t.defined()) throw_problem({argument_problem::type, std::string(name) + " must be a tensor, got None"});
}

matrix to_matrix(const Tensor& t, const char* name, bool output) {
    require_tensor(t, name);
    // The neg bit is never seen here: torch's Negative fallback resolves the
    // functional ops' inputs, and puffadv.torch refuses it there for the in-place op.
    matrix m;
    m.type = to_dtype(t, name);
    m.ndim = static_cast<int>(t.dim());
    m.data = output ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
    const DeviceType device = t.device().type();
    if (device == DeviceType::CUDA) {  // HIP tensors too, under ROCm torch
        m.device = {gpu_memory_type(), t.get_device_index()};
    } else if (device == DeviceType::CPU) {
        m.device = {device_type::cpu, 0};
    } else {  // only in a call mixing devices: a kernel runs for one of CPU or CUDA
        throw_problem({argument_problem::type,
                       std::string(name) + " is on a device of type " + std::to_string(static_cast<int>(device)) +
                           "; puffadv reads CPU, CUDA and ROCm tensors"});
    }
    if (m.ndim == 2) {
        m.rows = t.size(0);
        m.cols = t.size(1);
        m.row_stride = t.stride(0);  // torch strides count elements, as the core's do
        m.col_stride = t.stride(1);
    } else if (m.ndim == 1) {
        m.rows = t.size(0);
        m.cols = 1;
        m.row_stride = t.stride(0);
        m.col_stride = 1;
    }
    return m;
}

ScalarType output_type(const Tensor& typed) {
    const ScalarType t = typed.scalar_type();
    return t == ScalarType::BFloat16 || t == ScalarType::Half ? ScalarType::Float : t;
}

Tensor empty_output(const Tensor& shape, const Tensor& typed) {
    return torch::stable::new_empty(shape, shape.sizes(), output_type(typed));
}

void compute(const standard_arrays& arrays, const standard_params& params, gpu_stream stream) {
    try {
        layer::compute(arrays, params, stream);
    } catch (const type_error& e) {  // a combination the core has no kernel for on this device
        throw_problem({argument_problem::type, e.what()});
    } catch (const gpu_error& e) {
        throw std::runtime_error(std::string("puffadv: ") + e.what());
    }  // value_error is std::invalid_argument already; backend_unavailable goes to the caller
}

}  // namespace puffadv::torch_ops
