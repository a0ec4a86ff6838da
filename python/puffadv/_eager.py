"""The eager call of every estimator on NumPy, PyTorch, CuPy, JAX or DLPack arrays,
driven by its description: find the arrays' framework, check what only Python
checks, allocate the outputs asked for, and run the core (_engine). The public
functions come here through _route; so does the body of each torch.compile
operator (_compiled), with every output given."""
from __future__ import annotations

from . import _engine, _frameworks, _outputs, _parameters, _shapes
from ._arguments import Call
from ._estimators import PUFF_ADVANTAGE, SUM_ROLES, Estimate, Estimator
from ._shapes import required_time_axis

# The GPU backends produce these kinds' row sums only beside the advantages (the window and
# the lookahead kernels sum what they store: the GPU engine, src/gpu/engine.cuh, refuses the rest).
GPU_SUMS_NEED_ADVANTAGES = frozenset({"n_step_returns", "retrace", "q_lambda"})


def _wanted(spec) -> bool:
    return spec is not False and spec is not None


def sums_without_advantages(estimator: Estimator, specs: dict) -> bool:
    """Row sums of a kind in GPU_SUMS_NEED_ADVANTAGES requested without the advantages."""
    return (estimator.kind in GPU_SUMS_NEED_ADVANTAGES and not _wanted(specs["advantages"])
            and (_wanted(specs["abs_sums"]) or _wanted(specs["sums"]) or _wanted(specs["square_sums"])))


def advantages_for_sums(estimator: Estimator, framework: str, rewards, specs: dict) -> bool:
    """Whether to allocate an advantages array the caller did not ask for: sums without them
    (sums_without_advantages) on a GPU, in a framework that allocates there (a plain DLPack
    producer cannot: its call goes on as asked). _compiled.estimate decides the same for torch."""
    return (sums_without_advantages(estimator, specs) and framework in ("torch", "cupy", "jax")
            and _frameworks.is_gpu(rewards))


def estimate(estimator: Estimator, call: Call, check_only: bool = False) -> dict | None:
    """The outputs by role (None: not asked for) of one call of a family estimator.
    `check_only`: every check of the call, the outputs it gives included, and nothing
    computed (_engine.check); returns None."""
    arrays = tuple(call.arrays.values())
    given = _outputs.given(call.outputs)
    framework = _frameworks.framework_of_call(arrays[:call.required], (*arrays[call.required:], *given.values()),
                                              call.check_names)
    _outputs.refuse_immutable(framework, given, call.names)
    time_axis = required_time_axis(call.time_axis, estimator.function)
    scalars = _parameters.real_parameters(tuple(call.scalars.values()), call.scalar_names)
    inputs, given, plan, time_axis = as_views(framework, call.arrays, given, time_axis, call.names)
    rewards, values = inputs["rewards"], inputs.get("values")
    specs = call.outputs
    hidden = advantages_for_sums(estimator, framework, rewards, specs)  # the advantages only the kernel sees
    if hidden:
        specs = {**specs, "advantages": True}
    outputs = _outputs.allocate(framework, rewards, values, time_axis, specs, given)
    kernel = _engine.kernel(estimator.kind, scalars, lambda_name=estimator.lambda_name, n=call.n,
                            log_probs=call.log_probs, reset_at_start=call.reset_at_start, time_axis=time_axis,
                            reverse=call.reverse, check_only=check_only)
    if check_only:
        return _engine.check(kernel, framework, inputs, outputs)
    _engine.run(kernel, framework, inputs, outputs, call.stream, call.names)
    outputs = _outputs.finish(framework, rewards if values is None else values, specs, outputs)
    if plan is not None:  # in the caller's shapes: its own arrays where given, the allocated ones reshaped
        outputs = {role: out if out is None else call.outputs[role] if specs[role] is not True else
                   _shapes.back(out, plan.batch if role in SUM_ROLES else plan.shape)
                   for role, out in outputs.items()}
    if hidden:
        outputs["advantages"] = None
    return outputs


def as_views(framework: str, arrays: dict, given: dict, time_axis: int, names: dict):
    """(inputs, given outputs, plan or None, the core's time_axis): a call's arrays as
    the core's 2-D and [rows] views (_shapes), shared by the eager and compiled paths."""
    rewards = arrays["rewards"]
    plan = _shapes.plan(rewards, time_axis, names.get("rewards", "rewards"))
    if plan is None:  # 2-D: only a per-row array of extra axes of 1 ([B, 1], [1, B]) changes
        shape = tuple(getattr(rewards, "shape", ()) or ())
        if len(shape) == 2 and _shaped(arrays.get("last_value"), 1):
            rows = shape[1] if time_axis in (0, -2) else shape[0]
            arrays = {**arrays, "last_value": _shapes.row_view(arrays["last_value"], rows, (rows,), names.get(
                "last_value", "last_value"), framework)}
        return arrays, given, None, time_axis
    rows = plan.view[1] if plan.time_axis == 0 else plan.view[0]

    def view(role, x):
        name = names.get(role, role)
        if role in SUM_ROLES or role == "last_value":
            return _shapes.row_view(x, rows, plan.batch, name, framework)
        return _shapes.series_view(x, plan, name, framework)
    inputs = {role: None if x is None else view(role, x) for role, x in arrays.items()}
    given = {role: None if x is None else view(role, x) for role, x in given.items()}
    return inputs, given, plan, plan.time_axis


def _shaped(x, ndim: int) -> bool:
    """x is an array of more than `ndim` dimensions."""
    return x is not None and len(getattr(x, "shape", ()) or ()) > ndim


_PUFF_INPUTS = ("values", "rewards", "dones", "importance", "advantages")
_PUFF_FUSED_NAMES = ("values", "returns", "abs_sums", "sums", "square_sums")
_PUFF_NAMES = PUFF_ADVANTAGE.names()
_PUFF_SCALAR_NAMES = PUFF_ADVANTAGE.scalar_names()[:4]  # gamma, gae_lambda, rho_clip, c_clip
_PUFF_KIND, _PUFF_LAMBDA_NAME = PUFF_ADVANTAGE.kind, PUFF_ADVANTAGE.lambda_name


def puff_advantage(values, rewards, dones, importance, advantages, scalars: tuple, stream, returns=None,
                   abs_sums=None, sums=None, square_sums=None, check_only: bool = False):
    """compute_puff_advantage's eager call: `scalars` as passed (gamma, gae_lambda, rho_clip,
    c_clip), then the fused outputs' specs. Returns the advantages, or an Estimate when any
    fused output is asked for. `check_only`: as estimate's (returns None)."""
    framework = _frameworks.framework_of_call((values, rewards, dones, importance), (advantages,), _PUFF_INPUTS)
    _outputs.refuse_immutable(framework, {"advantages": advantages}, {})
    scalars = _parameters.real_parameters(scalars, _PUFF_SCALAR_NAMES)
    out = advantages if advantages is not None else _outputs.output_like(framework, values)
    kernel = _engine.kernel(_PUFF_KIND, scalars, lambda_name=_PUFF_LAMBDA_NAME, check_only=check_only)
    inputs = {"values": values, "rewards": rewards, "terminated": dones, "importance": importance}
    if (returns is not None or abs_sums is not None or sums is not None or square_sums is not None) and \
            (_wanted(returns) or _wanted(abs_sums) or _wanted(sums) or _wanted(square_sums)):
        fused = {"returns": returns, "abs_sums": abs_sums, "sums": sums, "square_sums": square_sums}
        given = _outputs.given(fused)
        _frameworks.framework_of_call((values,), tuple(given.values()), _PUFF_FUSED_NAMES)
        _outputs.refuse_immutable(framework, given, {})
        made = _outputs.allocate(framework, values, values, -1, fused, given)
        if check_only:
            return _engine.check(kernel, framework, inputs, {"advantages": out, **made})
        _engine.run(kernel, framework, inputs, {"advantages": out, **made}, stream, _PUFF_NAMES)
        made = _outputs.finish(framework, values, fused, made)
        result = _frameworks.finish(framework, values, out) if advantages is None else out
        return Estimate(result, made["returns"], made["abs_sums"], made["sums"], made["square_sums"])
    if check_only:
        return _engine.check(kernel, framework, inputs, {"advantages": out})
    _engine.run(kernel, framework, inputs, {"advantages": out}, stream, _PUFF_NAMES)
    return out if advantages is not None else _frameworks.finish(framework, values, out)
