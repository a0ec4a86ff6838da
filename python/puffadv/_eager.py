"""The eager call of every estimator on NumPy, PyTorch, CuPy, JAX or DLPack arrays,
driven by its description: find the arrays' framework, check what only Python
checks, allocate the outputs asked for, and run the core (_engine). The public
functions come here through _route; so does the body of each torch.compile
operator (_compiled), with every output given."""
from __future__ import annotations

from . import _engine, _frameworks, _outputs
from ._arguments import Call, check_time_axis
from ._estimators import PUFF_ADVANTAGE, Estimate, Estimator

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


def estimate(estimator: Estimator, call: Call) -> dict:
    """The outputs by role (None: not asked for) of one call of a family estimator."""
    arrays = tuple(call.arrays.values())
    given = _outputs.given(call.outputs)
    framework = _frameworks.framework_of_call(arrays[:call.required], (*arrays[call.required:], *given.values()),
                                              call.check_names)
    _outputs.refuse_immutable(framework, given, call.names)
    time_axis = check_time_axis(call.time_axis)
    scalars = _frameworks.real_parameters(tuple(call.scalars.values()), call.scalar_names)
    rewards, values = call.arrays["rewards"], call.arrays.get("values")
    specs = call.outputs
    hidden = advantages_for_sums(estimator, framework, rewards, specs)  # the advantages only the kernel sees
    if hidden:
        specs = {**specs, "advantages": True}
    outputs = _outputs.allocate(framework, rewards, values, time_axis, specs, given)
    kernel = _engine.kernel(estimator.kind, scalars, lambda_name=estimator.lambda_name, n=call.n,
                            log_probs=call.log_probs, reset_at_start=call.reset_at_start, time_axis=time_axis,
                            reverse=call.reverse)
    _engine.run(kernel, framework, call.arrays, outputs, call.stream, call.names)
    outputs = _outputs.finish(framework, rewards if values is None else values, specs, outputs)
    if hidden:
        outputs["advantages"] = None
    return outputs


_PUFF_INPUTS = ("values", "rewards", "dones", "importance", "advantages")
_PUFF_FUSED_NAMES = ("values", "returns", "abs_sums", "sums", "square_sums")
_PUFF_NAMES = PUFF_ADVANTAGE.names()
_PUFF_SCALAR_NAMES = PUFF_ADVANTAGE.scalar_names()[:4]  # gamma, gae_lambda, rho_clip, c_clip
_PUFF_KIND, _PUFF_LAMBDA_NAME = PUFF_ADVANTAGE.kind, PUFF_ADVANTAGE.lambda_name


def puff_advantage(values, rewards, dones, importance, advantages, scalars: tuple, stream, returns=None,
                   abs_sums=None, sums=None, square_sums=None):
    """compute_puff_advantage's eager call: `scalars` as passed (gamma, gae_lambda, rho_clip,
    c_clip), then the fused outputs' specs. Returns the advantages, or an Estimate when any
    fused output is asked for."""
    framework = _frameworks.framework_of_call((values, rewards, dones, importance), (advantages,), _PUFF_INPUTS)
    _outputs.refuse_immutable(framework, {"advantages": advantages}, {})
    scalars = _frameworks.real_parameters(scalars, _PUFF_SCALAR_NAMES)
    out = advantages if advantages is not None else _outputs.output_like(framework, values)
    kernel = _engine.kernel(_PUFF_KIND, scalars, lambda_name=_PUFF_LAMBDA_NAME)
    inputs = {"values": values, "rewards": rewards, "terminated": dones, "importance": importance}
    if (returns is not None or abs_sums is not None or sums is not None or square_sums is not None) and \
            (_wanted(returns) or _wanted(abs_sums) or _wanted(sums) or _wanted(square_sums)):
        fused = {"returns": returns, "abs_sums": abs_sums, "sums": sums, "square_sums": square_sums}
        given = _outputs.given(fused)
        _frameworks.framework_of_call((values,), tuple(given.values()), _PUFF_FUSED_NAMES)
        _outputs.refuse_immutable(framework, given, {})
        made = _outputs.allocate(framework, values, values, -1, fused, given)
        _engine.run(kernel, framework, inputs, {"advantages": out, **made}, stream, _PUFF_NAMES)
        made = _outputs.finish(framework, values, fused, made)
        result = _frameworks.finish(framework, values, out) if advantages is None else out
        return Estimate(result, made["returns"], made["abs_sums"], made["sums"], made["square_sums"])
    _engine.run(kernel, framework, inputs, {"advantages": out}, stream, _PUFF_NAMES)
    return out if advantages is not None else _frameworks.finish(framework, values, out)
