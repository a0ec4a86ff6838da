// torch.ops.puffadv: the schemas (written once, here), the CPU kernels and the
// tensor -> matrix translation. Every argument check is the core's
// find_puff_problem, so messages match the Python API's word for word.
#include "torch/ops.hpp"

#include <stdexcept>
#include <string>

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

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

puff_arrays to_arrays(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                      const Tensor& importance, const Tensor& advantages) {
    return {to_matrix(values, "values", false), to_matrix(rewards, "rewards", false),
            to_matrix(dones, "dones", false), to_matrix(importance, "importance", false),
            to_matrix(advantages, "advantages", true)};
}

void check(const puff_arrays& arrays, const puff_params& params) {
    throw_problem(find_puff_problem(arrays, params));
}

void run(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    try {
        compute_puff_advantage(arrays, params, stream);
    } catch (const type_error& e) {  // a combination the core has no kernel for on this device
        throw_problem({argument_problem::type, e.what()});
    } catch (const gpu_error& e) {
        throw std::runtime_error(std::string("puffadv: ") + e.what());
    }  // value_error is std::invalid_argument already; backend_unavailable goes to the caller
}

ScalarType output_type(const Tensor& values) {
    const ScalarType t = values.scalar_type();
    return t == ScalarType::BFloat16 || t == ScalarType::Half ? ScalarType::Float : t;
}

Tensor empty_output(const Tensor& shape, const Tensor& values) {
    return torch::stable::new_empty(shape, shape.sizes(), output_type(values));
}

namespace {

void puff_advantage_inplace_cpu(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                                const Tensor& importance, const Tensor& advantages, double gamma,
                                double lambda, double rho_clip, double c_clip) {
    const puff_arrays arrays = to_arrays(values, rewards, dones, importance, advantages);
    const puff_params params{gamma, lambda, rho_clip, c_clip};
    check(arrays, params);
    run(arrays, params, nullptr);
}

Tensor puff_advantage_cpu(const Tensor& values, const Tensor& rewards, const Tensor& dones,
                          const Tensor& importance, double gamma, double lambda, double rho_clip,
                          double c_clip) {
    require_tensor(values, "values");
    Tensor out = empty_output(values, values);
    puff_advantage_inplace_cpu(values, rewards, dones, importance, out, gamma, lambda, rho_clip, c_clip);
    return out;
}

std::string built_with_torch() { return PUFF_TORCH_BUILT_WITH; }

}  // namespace
}  // namespace puffadv::torch_ops

// Python-side registrations (fakes, Autograd, BackendSelect, Negative,
// Functionalize) are in python/puffadv/torch.py, which loads this library.
STABLE_TORCH_LIBRARY(puffadv, m) {
    // PufferLib's torch.ops.pufferlib.compute_puff_advantage, character for character.
    m.def("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
          "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
          "float rho_clip, float c_clip) -> ()");
    // Functional form for torch.compile: nothing mutated, and `gae_lambda`
    // because tracing passes arguments by name, which `lambda=` cannot be.
    m.def("puff_advantage(Tensor values, Tensor rewards, Tensor dones, Tensor importance, "
          "float gamma, float gae_lambda, float rho_clip, float c_clip) -> Tensor");
    // For backend(): the torch whose headers compiled this library.
    m.def("_built_with_torch() -> str");
    // torch's current stream as this library sees it (CUDA key, ops_cuda.cpp): for the stream test.
    m.def("_current_stream_handle(Tensor like) -> int");
    // Where that stream comes from in this torch ("libtorch_cuda.so", ...; "" in a
    // CPU-only torch): for the test that a CUDA torch's shim is found without a GPU.
    m.def("_cuda_stream_shim() -> str");
}

STABLE_TORCH_LIBRARY_IMPL(puffadv, CPU, m) {
    m.impl("compute_puff_advantage", TORCH_BOX(&puffadv::torch_ops::puff_advantage_inplace_cpu));
    m.impl("puff_advantage", TORCH_BOX(&puffadv::torch_ops::puff_advantage_cpu));
}

STABLE_TORCH_LIBRARY_IMPL(puffadv, CompositeExplicitAutograd, m) {
    m.impl("_built_with_torch", TORCH_BOX(&puffadv::torch_ops::built_with_torch));
}
