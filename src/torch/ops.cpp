// torch.ops.puffadv: the schema (written once, here), the CPU kernels and the
// tensor -> matrix translation. Every argument check is the core's
// find_puff_problem, so messages match the Python API's word for word.
#include "ops.hpp"

#include <string>

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace puffadv::torch_ops {
namespace {

dtype to_dtype(const at::Tensor& t, const char* name) {
    switch (t.scalar_type()) {
        case at::kFloat: return dtype::float32;
        case at::kDouble: return dtype::float64;
        case at::kHalf: return dtype::float16;
        case at::kBFloat16: return dtype::bfloat16;
        case at::kByte: return dtype::uint8;
        case at::kBool: return dtype::boolean;
        default: break;
    }
    // Outside the core's dtype enum; worded as the nanobind module words it (int64, not Long).
    const char* kind = nullptr;
    switch (t.scalar_type()) {
        case at::kChar: kind = "int8"; break;
        case at::kShort: kind = "int16"; break;
        case at::kInt: kind = "int32"; break;
        case at::kLong: kind = "int64"; break;
        case at::kComplexFloat: kind = "complex64"; break;
        case at::kComplexDouble: kind = "complex128"; break;
        default: kind = c10::toString(t.scalar_type()); break;
    }
    TORCH_CHECK_TYPE(false, unreadable_dtype_message(name, kind));
    return dtype::float32;  // not reached
}

}  // namespace

void require_tensor(const at::Tensor& t, const char* name) {
    TORCH_CHECK_TYPE(t.defined(), name, " must be a tensor, got None");
}

matrix to_matrix(const at::Tensor& t, const char* name, bool output) {
    require_tensor(t, name);
    // A negative view's memory holds -x: reading it raw would be silently wrong. (Not
    // reached through the dispatcher: torch's Negative fallback resolves inputs of the
    // functional ops, and puffadv.torch refuses them on that key for the in-place op.)
    TORCH_CHECK_VALUE(!t.is_neg(), name,
                      " is a negative view (torch's neg bit: its memory holds -x); call .resolve_neg() first");
    matrix m;
    m.type = to_dtype(t, name);
    m.ndim = static_cast<int>(t.dim());
    m.data = output ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
    if (t.is_cuda()) {
        m.device = {PUFF_TORCH_ROCM ? device_type::rocm : device_type::cuda, t.device().index()};
    } else {
        TORCH_CHECK_TYPE(t.is_cpu(), name, " is on ", t.device(),
                         "; puffadv reads CPU, CUDA and ROCm tensors");
        m.device = {device_type::cpu, 0};
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

puff_arrays to_arrays(const at::Tensor& values, const at::Tensor& rewards, const at::Tensor& dones,
                      const at::Tensor& importance, const at::Tensor& advantages) {
    return {to_matrix(values, "values", false), to_matrix(rewards, "rewards", false),
            to_matrix(dones, "dones", false), to_matrix(importance, "importance", false),
            to_matrix(advantages, "advantages", true)};
}

void check(const puff_arrays& arrays, const puff_params& params) {
    const argument_problem problem = find_puff_problem(arrays, params);
    TORCH_CHECK_TYPE(problem.kind != argument_problem::type, problem.message);
    TORCH_CHECK_VALUE(problem.kind != argument_problem::value, problem.message);
}

void run(const puff_arrays& arrays, const puff_params& params, gpu_stream stream) {
    try {
        compute_puff_advantage(arrays, params, stream);
    } catch (const type_error& e) {  // a combination the core has no kernel for on this device
        TORCH_CHECK_TYPE(false, e.what());
    } catch (const value_error& e) {
        TORCH_CHECK_VALUE(false, e.what());
    } catch (const gpu_error& e) {
        TORCH_CHECK(false, "puffadv: ", e.what());
    }
}

at::ScalarType output_type(const at::Tensor& values) {
    const auto t = values.scalar_type();
    return t == at::kBFloat16 || t == at::kHalf ? at::kFloat : t;
}

at::Tensor empty_output(const at::Tensor& values) {
    require_tensor(values, "values");
    return at::empty(values.sizes(),
                     values.options().dtype(output_type(values)).memory_format(at::MemoryFormat::Contiguous));
}

namespace {

void puff_advantage_inplace_cpu(const at::Tensor& values, const at::Tensor& rewards,
                                const at::Tensor& dones, const at::Tensor& importance,
                                const at::Tensor& advantages, double gamma, double lambda,
                                double rho_clip, double c_clip) {
    const puff_arrays arrays = to_arrays(values, rewards, dones, importance, advantages);
    const puff_params params{gamma, lambda, rho_clip, c_clip};
    check(arrays, params);
    run(arrays, params, nullptr);
}

at::Tensor puff_advantage_cpu(const at::Tensor& values, const at::Tensor& rewards,
                              const at::Tensor& dones, const at::Tensor& importance, double gamma,
                              double lambda, double rho_clip, double c_clip) {
    at::Tensor out = empty_output(values);
    puff_advantage_inplace_cpu(values, rewards, dones, importance, out, gamma, lambda, rho_clip,
                               c_clip);
    return out;
}

// Advantages are training targets, never differentiated: both ops run below
// autograd (as under torch.no_grad), so no graph is recorded even when values
// requires grad, and no backward can silently return a wrong gradient.
void puff_advantage_inplace_no_grad(const at::Tensor& values, const at::Tensor& rewards,
                                    const at::Tensor& dones, const at::Tensor& importance,
                                    const at::Tensor& advantages, double gamma, double lambda,
                                    double rho_clip, double c_clip) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("puffadv::compute_puff_advantage", "")
                               .typed<decltype(puff_advantage_inplace_cpu)>();
    const at::AutoDispatchBelowAutograd below_autograd;
    op.call(values, rewards, dones, importance, advantages, gamma, lambda, rho_clip, c_clip);
}

at::Tensor puff_advantage_no_grad(const at::Tensor& values, const at::Tensor& rewards,
                                  const at::Tensor& dones, const at::Tensor& importance,
                                  double gamma, double lambda, double rho_clip, double c_clip) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("puffadv::puff_advantage", "")
                               .typed<decltype(puff_advantage_cpu)>();
    const at::AutoDispatchBelowAutograd below_autograd;
    return op.call(values, rewards, dones, importance, gamma, lambda, rho_clip, c_clip);
}

}  // namespace
}  // namespace puffadv::torch_ops

TORCH_LIBRARY(puffadv, m) {
    // Fake kernels (for torch.compile and meta tensors) live in this module.
    m.set_python_module("puffadv.torch");
    // PufferLib's torch.ops.pufferlib.compute_puff_advantage, character for character.
    m.def("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
          "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
          "float rho_clip, float c_clip) -> ()");
    // Functional form for torch.compile: nothing mutated, and `gae_lambda`
    // because tracing passes arguments by name, which `lambda=` cannot be.
    m.def("puff_advantage(Tensor values, Tensor rewards, Tensor dones, Tensor importance, "
          "float gamma, float gae_lambda, float rho_clip, float c_clip) -> Tensor");
    // For backend(): the torch this library was compiled against.
    m.def("_built_with_torch() -> str", [] { return std::string(PUFF_TORCH_BUILT_WITH); });
    // torch's current stream as this library sees it (CUDA key, ops_cuda.cpp): for the stream test.
    m.def("_current_stream_handle(Tensor like) -> int");
}

TORCH_LIBRARY_IMPL(puffadv, CPU, m) {
    m.impl("compute_puff_advantage", &puffadv::torch_ops::puff_advantage_inplace_cpu);
    m.impl("puff_advantage", &puffadv::torch_ops::puff_advantage_cpu);
}

TORCH_LIBRARY_IMPL(puffadv, Autograd, m) {
    m.impl("compute_puff_advantage", &puffadv::torch_ops::puff_advantage_inplace_no_grad);
    m.impl("puff_advantage", &puffadv::torch_ops::puff_advantage_no_grad);
}
