// torch.ops.puffadv: one boxed kernel for every row of the op table
// (op_table.hpp), on the CPU and CUDA keys (HIP too: ROCm torch files HIP
// tensors under CUDA). A call is unboxed by its row, its tensors become one
// standard_arrays (tensors.cpp), checked by the core's one check, and computed
// by the core's one call on the shape tensor's device, on torch's current stream.
//
// Without a usable GPU backend in the core, CUDA tensors still reach this kernel
// (never the dispatcher's "Could not run ... 'CUDA' backend"): a row with
// host_fallback computes on the host, counted by the core (puffadv.torch turns
// the first one into its RuntimeWarning: a c10 warning from a torch.ops call only
// reaches stderr) or refused under PUFFADV_FALLBACK=error; the others refuse,
// saying where the fallback is.
//
// Python-side registrations (fakes, Autograd, BackendSelect, Negative,
// Functionalize) are in python/puffadv/, which loads this library.
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/headeronly/util/Exception.h>

#include <puffadv/fallback.hpp>

#include "core/layer_call.hpp"
#include "torch/op_table.hpp"
#include "torch/tensors.hpp"

namespace puffadv::torch_ops {
namespace {

using detail::argument_role;
using torch::stable::detail::from;
using torch::stable::detail::to;

constexpr std::size_t index(arg a) { return static_cast<std::size_t>(a); }
constexpr argument_role role_of(std::size_t tensor) { return static_cast<argument_role>(tensor); }
static_assert(index(arg::greedy) == static_cast<std::size_t>(argument_role::greedy) &&
              index(arg::advantages) == static_cast<std::size_t>(argument_role::advantages));

/// One call's arguments, unboxed by its row: tensors by role (absent optional
/// ones empty), the outputs once allocated, the scalars as the core's params.
struct op_call {
    std::optional<Tensor> tensors[tensor_roles];
    std::optional<Tensor> returns;
    standard_params params;
    std::optional<std::int64_t> time_axis;

    const Tensor& tensor(arg a) const { return *tensors[index(a)]; }
    bool has(arg a) const { return tensors[index(a)].has_value(); }
    const char* name(arg a) const { return layer::caller_name(params, role_of(index(a))); }
};

/// Takes the stack's inputs (the tensors' handles become owned Tensors).
op_call unbox(const op_spec& op, StableIValue* stack) {
    op_call call;
    standard_params& p = call.params;
    p.kind = op.kind;
    p.lambda_name = layer::lambda_name(op.kind);
    p.gamma = p.lambda = 1.0;  // the value of an op that takes neither (episodic_cumsum)
    const StableIValue* next = stack;
    for (const op_argument& a : op.arguments) {
        const StableIValue v = *next++;
        switch (a.what) {
            case arg::gamma: p.gamma = to<double>(v); break;
            case arg::lambda: p.lambda = to<double>(v); break;
            case arg::rho_clip: p.rho_clip = to<double>(v); break;
            case arg::c_clip: p.c_clip = to<double>(v); break;
            case arg::rho_pg_clip: p.rho_pg_clip = to<double>(v); break;
            case arg::alpha: p.alpha = to<double>(v); break;
            case arg::n: p.n = to<std::int64_t>(v); break;
            case arg::log_probs: p.log_probs = to<bool>(v); break;
            case arg::reset_at_start: p.reset_at_start = to<bool>(v); break;
            case arg::reverse: p.reverse = to<bool>(v); break;
            case arg::time_axis:  // int64 unnarrowed
                if (op.kind == estimator::linear_recurrence) {  // its schema's `int time_axis`, a required keyword
                    call.time_axis = to<std::int64_t>(v);
                    break;
                }
                // The family's `int? time_axis=None`: required all the same (issue 33).
                call.time_axis = to<std::optional<std::int64_t>>(v);
                if (!call.time_axis)
                    throw_problem({argument_problem::type, detail::time_axis_required_message(op.name)});
                break;
            default: {
                std::optional<Tensor>& slot = call.tensors[index(a.what)];
                if (!a.optional) {
                    slot = to<Tensor>(v);
                } else if ((slot = to<std::optional<Tensor>>(v)) && !slot->defined()) {
                    slot.reset();
                }
            }
        }
    }
    return call;
}

/// The call's tensors as the core's views: the shape tensor first, then by role
/// (so a call's argument errors come in one order), outputs last.
standard_arrays views(const op_spec& op, const op_call& call) {
    standard_arrays a;
    const auto view = [&](arg what) {
        const matrix m = to_matrix(call.tensor(what), call.name(what), what == arg::advantages);
        layer::set_view(a, role_of(index(what)), m);
    };
    view(op.shape_of);
    for (std::size_t t = 0; t < tensor_roles; ++t)
        if (call.tensors[t] && static_cast<arg>(t) != op.shape_of) view(static_cast<arg>(t));
    if (call.returns) a.fused.returns = to_matrix(*call.returns, "returns", true);
    if (call.time_axis) throw_problem(detail::apply_time_axis(a, *call.time_axis, call.params));
    return a;
}

/// The core's fallback policy (fallback.hpp), shared with the Python layer: one
/// setting, one wording, one count. Host copies in, the CPU kernels, one copy
/// back per output: blocking, so never inside a CUDA graph.
void compute_on_host(const op_spec& op, const op_call& call, const std::string& reason) {
    const fallback_mode mode = current_fallback_mode();  // a bad setting: value_error, a ValueError
    if (mode == fallback_mode::error) throw std::runtime_error(fallback_error_message(reason));
    const torch::stable::Device cpu(torch::headeronly::DeviceType::CPU);
    const auto host_output = [&](const Tensor& t) {
        return torch::stable::new_empty(t, t.sizes(), std::nullopt, std::nullopt, cpu);
    };
    op_call host;
    host.params = call.params;
    host.time_axis = call.time_axis;
    std::uint64_t tensors = 0;
    for (std::size_t t = 0; t < tensor_roles; ++t) {
        if (!call.tensors[t]) continue;
        const Tensor& device = *call.tensors[t];
        host.tensors[t] = static_cast<arg>(t) == arg::advantages ? host_output(device) : torch::stable::to(device, cpu);
        ++tensors;
    }
    if (call.returns) host.returns = host_output(*call.returns), ++tensors;
    compute(views(op, host), host.params, nullptr);
    const auto copy_back = [](const std::optional<Tensor>& out, const std::optional<Tensor>& host_out) {
        if (!out) return;
        Tensor device = *out;  // a second handle on the caller's tensor, which copy_ writes
        torch::stable::copy_(device, *host_out);
    };
    copy_back(call.tensors[index(arg::advantages)], host.tensors[index(arg::advantages)]);
    copy_back(call.returns, host.returns);
    const Tensor& shape = call.tensor(op.shape_of);
    const auto bytes = static_cast<std::uint64_t>(shape.numel()) * tensors * shape.element_size();
    record_fallback(bytes, reason);  // the first one: a RuntimeWarning from _torch_kernels.py
}

/// The core's one call on the shape tensor's device and torch's current stream there.
void compute_on_device(const op_spec& op, const op_call& call, const standard_arrays& arrays) {
    const Tensor& shape = call.tensor(op.shape_of);
    std::string reason;
    try {
        std::optional<torch::stable::accelerator::DeviceGuard> guard;  // the core launches on the current device
        if (shape.is_cuda()) guard.emplace(shape.get_device_index());
        compute(arrays, call.params, current_stream(shape));
        return;
    } catch (const backend_unavailable& missing) {  // no backend compiled, or no usable device
        if (!op.host_fallback)
            throw std::runtime_error(std::string(missing.what()) +
                                     " (the functions of the puffadv module fall back to the host)");
        reason = missing.what();
    }
    compute_on_host(op, call, reason);
}

void run_op(const op_spec& op, StableIValue* stack, std::uint64_t num_args, std::uint64_t num_outputs) {
    STD_TORCH_CHECK(num_args == op.arguments.size && num_outputs == op.results.size, "puffadv::", op.name,
                    ": the registered schema has ", num_args, " args and ", num_outputs,
                    " outputs, the op table ", op.arguments.size, " and ", op.results.size);
    op_call call = unbox(op, stack);
    // The outputs are shaped like the shape tensor, in the values' dtype (the shape tensor's without values).
    const Tensor& shape = call.tensor(op.shape_of);
    require_tensor(shape, call.name(op.shape_of));
    if (call.has(arg::values)) require_tensor(call.tensor(arg::values), call.name(arg::values));
    const Tensor& typed = call.has(arg::values) ? call.tensor(arg::values) : shape;
    for (const result r : op.results) {
        (r == result::returns ? call.returns : call.tensors[index(arg::advantages)]) = empty_output(shape, typed);
    }
    const standard_arrays arrays = views(op, call);
    throw_problem(layer::find_problem(arrays, call.params));  // on the caller's tensors, whatever the path
    compute_on_device(op, call, arrays);
    std::size_t out = 0;
    for (const result r : op.results)
        stack[out++] = from(r == result::returns ? *call.returns : call.tensor(arg::advantages));
}

template <std::size_t Row>
void kernel(StableIValue* stack, std::uint64_t num_args, std::uint64_t num_outputs) {
    run_op(op_table[Row], stack, num_args, num_outputs);
}

using boxed_kernel = void (*)(StableIValue*, std::uint64_t, std::uint64_t);
template <std::size_t... Rows>
constexpr std::array<boxed_kernel, sizeof...(Rows)> kernels_of(std::index_sequence<Rows...>) {
    return {&kernel<Rows>...};
}
constexpr auto kernels = kernels_of(std::make_index_sequence<std::size(op_table)>());

std::string built_with_torch() { return PUFF_TORCH_BUILT_WITH; }

}  // namespace

void register_kernels(torch::stable::detail::StableLibrary& m) {
    for (std::size_t row = 0; row < kernels.size(); ++row) m.impl(op_table[row].name, kernels[row]);
}

}  // namespace puffadv::torch_ops

STABLE_TORCH_LIBRARY(puffadv, m) {
    for (const auto& op : puffadv::torch_ops::op_table) m.def(op.schema);
    // For backend(): the torch whose headers compiled this library.
    m.def("_built_with_torch() -> str");
    // torch's current stream as this library sees it (CUDA key, stream.cpp): for the stream test.
    m.def("_current_stream_handle(Tensor like) -> int");
    // Where that stream comes from in this torch ("libtorch_cuda.so", ...; "" in a
    // CPU-only torch): for the test that a CUDA torch's shim is found without a GPU.
    m.def("_cuda_stream_shim() -> str");
}

// One kernel per row for CPU and CUDA: the core routes by the tensors' device.
STABLE_TORCH_LIBRARY_IMPL(puffadv, CPU, m) { puffadv::torch_ops::register_kernels(m); }
STABLE_TORCH_LIBRARY_IMPL(puffadv, CUDA, m) { puffadv::torch_ops::register_kernels(m); }

STABLE_TORCH_LIBRARY_IMPL(puffadv, CompositeExplicitAutograd, m) {
    m.impl("_built_with_torch", TORCH_BOX(&puffadv::torch_ops::built_with_torch));
}
