"""Every estimator's gradients on CUDA (issue 30: "every estimator's gradient passes
gradcheck on CPU and GPU"): torch.autograd.gradcheck in float64 on the GPU for every
case of gradient_cases (each differentiable argument, both time layouts), and each
case's outputs and gradients on the GPU equal to the CPU's at shapes that take the GPU
kernels' traversals (row groups, whole rows, split and long rows), with the host
fallback set to fail so that nothing passes by running on the CPU. Skipped without a
CUDA device: this runs on the GPU machine (scripts/gpu/validate.sh's tests stage)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
puffadv = pytest.importorskip("puffadv")

import torch.autograd.forward_ad as fwAD  # noqa: E402

from gradient_cases import CASES, episode_arrays, make_call  # noqa: E402
from test_gradients_forward_mode import linear_positions, with_values  # noqa: E402
from test_gradients_ops import op_call  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine)")

# (rows, horizon): a row group, whole rows, long rows split across blocks, odd sizes.
_SHAPES = ((19, 64), (3, 4501), (1024, 128), (37, 50))


@pytest.fixture(autouse=True)
def _no_host_fallback():
    """A CUDA call that cannot run on the GPU raises instead of computing on the CPU."""
    before = puffadv.set_fallback("error")
    yield
    puffadv.set_fallback(before)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("time_major", [False, True])
def test_gradcheck_on_cuda(case, time_major):
    call, leaves, names = make_call(case, seed=11, time_major=time_major, device="cuda")
    assert all(x.is_cuda for x in leaves)
    assert all(o.is_cuda for o in call(*leaves))
    assert torch.autograd.gradcheck(call, tuple(leaves), eps=1e-6, atol=1e-7, rtol=1e-5)


def _outputs_and_grads(case, device, seed, rows, horizon, time_major, weights=None):
    call, leaves, names = make_call(case, seed=seed, time_major=time_major, device=device, rows=rows,
                                    horizon=horizon)
    outputs = call(*leaves)
    if weights is None:
        g = torch.Generator().manual_seed(seed)
        weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in outputs]
    loss = sum((o * w.to(device)).sum() for o, w in zip(outputs, weights))
    grads = torch.autograd.grad(loss, leaves)
    return [o.detach().cpu() for o in outputs], [g.cpu() for g in grads], names, weights


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_gradients_equal_the_cpu(case):
    for seed, (rows, horizon) in enumerate(_SHAPES):
        for time_major in (False, True):
            where = f"{case} {rows}x{horizon} {'time' if time_major else 'batch'}-major"
            cpu_out, cpu_grads, names, weights = _outputs_and_grads(case, "cpu", seed + 30, rows, horizon, time_major)
            gpu_out, gpu_grads, _, _ = _outputs_and_grads(case, "cuda", seed + 30, rows, horizon, time_major, weights)
            for a, b in zip(gpu_out, cpu_out):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10, msg=f"output of {where}")
            for name, a, b in zip(names, gpu_grads, cpu_grads):
                assert torch.isfinite(b).all(), f"{name} of {where}"
                torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"gradient of {name}, {where}")


def _outputs_and_tangents(case, surface, device, seed, rows, horizon, time_major):
    """The outputs and their forward-mode tangents (dual tensors of random tangents in every
    value array), on the CPU."""
    if surface == "operator":
        call, leaves = op_call(case, seed=seed, time_major=time_major, device=device, rows=rows, horizon=horizon)
    else:
        call, leaves, _ = make_call(case, seed=seed, time_major=time_major, device=device, rows=rows,
                                    horizon=horizon)
    fixed, linear = [x.detach() for x in leaves], linear_positions(case)
    g = torch.Generator().manual_seed(seed)
    tangents = [torch.randn(fixed[i].shape, generator=g, dtype=fixed[i].dtype).to(device) for i in linear]
    with fwAD.dual_level():
        outputs = call(*with_values(fixed, linear, [fwAD.make_dual(fixed[i], t) for i, t in zip(linear, tangents)]))
        unpacked = [fwAD.unpack_dual(o) for o in outputs]
        assert all(u.tangent is not None for u in unpacked), f"{case}: an output came back without its tangent"
        return [u.primal.cpu() for u in unpacked], [u.tangent.cpu() for u in unpacked]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("surface", ["public", "operator"])
def test_cuda_tangents_equal_the_cpu(case, surface):
    """Forward mode (torch.autograd.forward_ad) on the GPU kernels' traversals, equal to the CPU's."""
    for seed, (rows, horizon) in enumerate(_SHAPES):
        for time_major in (False, True):
            where = f"{case} {surface} {rows}x{horizon} {'time' if time_major else 'batch'}-major"
            cpu = _outputs_and_tangents(case, surface, "cpu", seed + 40, rows, horizon, time_major)
            gpu = _outputs_and_tangents(case, surface, "cuda", seed + 40, rows, horizon, time_major)
            for what, a_list, b_list in zip(("output", "tangent"), gpu, cpu):
                for a, b in zip(a_list, b_list):
                    assert torch.isfinite(b).all(), f"{what} of {where}"
                    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"{what} of {where}")


def _graph_calls(device):
    """name -> (call(*leaves) -> outputs, leaves): gamma and lambda numbers, per-step arrays
    or 0-d tensors on the GPU (read there as per-step arrays made on the device: float()
    would synchronise, which capture refuses)."""
    e = {k: torch.tensor(v, device=device) for k, v in episode_arrays(7, 64, 32).items()}
    term, trunc = e["terminated"], e["truncated"]
    leaf = lambda name: e[name].clone().requires_grad_()  # noqa: E731
    return {
        "gae fused": (lambda r, v, lv: puffadv.gae(r, v, term, last_value=lv, gamma=0.97, gae_lambda=0.9,
                                                   time_axis=-1), [leaf("rewards"), leaf("values"), leaf("last_value")]),
        "vtrace composite": (lambda r, v, b, imp: puffadv.vtrace(r, v, term, trunc, bootstrap_values=b, importance=imp,
                                                                 gamma=0.97, time_axis=-1),
                             [leaf("rewards"), leaf("values"), leaf("bootstrap_values"), leaf("importance")]),
        "td_lambda per-step decays": (lambda r, v, b, g, lam: puffadv.td_lambda_returns(
            r, v, term, trunc, bootstrap_values=b, gamma=g, lambda_=lam, advantages=True, time_axis=-1),
            [leaf("rewards"), leaf("values"), leaf("bootstrap_values"), leaf("gamma"), leaf("lambda_")]),
        "gae 0-d gamma and lambda": (lambda r, v, lv, g, lam: puffadv.gae(
            r, v, term, last_value=lv, gamma=g, gae_lambda=lam, time_axis=-1),
            [leaf("rewards"), leaf("values"), leaf("last_value"),
             *(torch.tensor(x, device=device, dtype=torch.float64, requires_grad=True) for x in (0.97, 0.9))]),
    }


# A graph node that the library kept alive past its call would hold a stream from before
# the capture: torch warns of it, and that warning fails the test.
@pytest.mark.filterwarnings("error:The AccumulateGrad node's stream does not match")
@pytest.mark.parametrize("name", ["gae fused", "vtrace composite", "td_lambda per-step decays",
                                  "gae 0-d gamma and lambda"])
def test_the_backward_in_a_cuda_graph(name):
    """Forward and backward captured in one CUDA graph, replayed on new input values written
    into the captured leaves: the gradients equal an eager call's on those values."""
    call, leaves = _graph_calls("cuda")[name]
    g = torch.Generator(device="cuda").manual_seed(3)
    # The outputs' shapes without a graph: an autograd graph built here, on the default
    # stream, and kept alive would keep the leaves' AccumulateGrad nodes on that stream,
    # which torch then makes wait on the capture (cudaErrorStreamCaptureImplicit, torch's
    # AccumulateGrad stream-mismatch warning): torch's recipe builds them in the warm-up.
    with torch.no_grad():
        outputs = [o for o in call(*leaves) if o is not None]
    weights = [torch.randn(o.shape, device="cuda", generator=g, dtype=o.dtype) for o in outputs]

    def step():
        outs = [o for o in call(*leaves) if o is not None]
        return torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, weights)), leaves)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch's recipe has it
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    with torch.no_grad():
        for x in leaves:  # new values in place (gamma_t and lambda_t stay in (0, 1))
            x.mul_(0.5).add_(0.25)
        for c in captured:  # poisoned: the replay must write every gradient
            c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    expected = step()
    for x, a, b in zip(leaves, captured, expected):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


# (function, its lambda's name, extra arguments): the fused backward and the formulas'.
_ZERO_D_CALLS = (
    ("gae", "gae_lambda", {}),
    ("td_lambda_returns", "lambda_", {"advantages": True}),
    ("vtrace", "lambda_", {"importance": "importance"}),
    ("discounted_returns", None, {}),
    ("n_step_returns", "lambda_", {"n": 3}),
)


@pytest.mark.parametrize("function,lambda_name,extra", _ZERO_D_CALLS, ids=[c[0] for c in _ZERO_D_CALLS])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_0d_gpu_gamma_never_synchronises(function, lambda_name, extra, requires_grad):
    """gamma and lambda as 0-d CUDA tensors (a meta-gradient step's learned discount): the
    forward and backward run with torch's synchronisation check raising, and give the
    results and gradients of the same call with gamma and lambda as numbers."""
    e = {k: torch.tensor(v, device="cuda") for k, v in episode_arrays(11, 9, 40).items()}
    gamma, lam = 0.97, 0.9
    decays = {"gamma": torch.tensor(gamma, device="cuda", dtype=torch.float64, requires_grad=requires_grad)}
    numbers = {"gamma": gamma}
    if lambda_name is not None:
        decays[lambda_name] = torch.tensor(lam, device="cuda", dtype=torch.float64, requires_grad=requires_grad)
        numbers[lambda_name] = lam
    args = {k: e[v] if isinstance(v, str) else v for k, v in extra.items()}
    leaves = [e["rewards"].clone().requires_grad_(), e["values"].clone().requires_grad_()]
    call = getattr(puffadv, function)

    def run(**scalars):
        extra_args = {**args, **({} if function == "discounted_returns" else {"values": leaves[1]})}
        result = call(leaves[0], terminated=e["terminated"], last_value=e["last_value"], time_axis=-1,
                      **extra_args, **scalars)
        return [o for o in (result if isinstance(result, tuple) else (result,)) if o is not None]

    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = run(**decays)
        weights = [torch.rand_like(o) + 0.5 for o in outs]
        wanted = leaves + ([t for t in decays.values()] if requires_grad else [])
        if function == "discounted_returns":
            wanted = [w for w in wanted if w is not leaves[1]]
        grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, weights)), wanted)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    expected = run(**numbers)
    for a, b in zip(outs, expected):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    wanted_numbers = [w for w in leaves if function != "discounted_returns" or w is not leaves[1]]
    expected_grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(expected, weights)), wanted_numbers)
    for a, b in zip(grads, expected_grads):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    if requires_grad:  # gamma's and lambda's gradients against the per-step arrays' sums
        steps = {k: torch.full_like(e["rewards"], v, requires_grad=True) for k, v in numbers.items()}
        per_step = run(**steps)
        step_grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(per_step, weights)), list(steps.values()))
        for a, b in zip(grads[len(wanted_numbers):], step_grads):
            torch.testing.assert_close(a, b.sum(), rtol=1e-10, atol=1e-10)



@pytest.mark.parametrize("surface", ["public", "operator"])
def test_cuda_float_dones_gradients_equal_the_cpu(surface):
    """The puff advantage's float dones (numbers in its forward) get their gradient on the GPU
    as on the CPU, with every other input's, at each traversal's shape."""
    rng = torch.Generator().manual_seed(12)
    for rows, horizon in _SHAPES:
        base = [torch.randn(rows, horizon, generator=rng, dtype=torch.float64) for _ in range(2)]
        dones = torch.randint(0, 4, (rows, horizon), generator=rng).double() / 3  # 0, 1/3, 2/3, 1
        importance = torch.rand(rows, horizon, generator=rng, dtype=torch.float64) + 0.5
        weights = torch.randn(rows, horizon, generator=rng, dtype=torch.float64)
        results = []
        for device in ("cpu", "cuda"):
            leaves = [x.to(device).requires_grad_() for x in (*base, dones, importance)]
            if surface == "public":
                out = puffadv.compute_puff_advantage(*leaves, gamma=0.95, gae_lambda=0.9, rho_clip=1.1, c_clip=0.95)
            else:
                out = torch.ops.puffadv.puff_advantage(*leaves, 0.95, 0.9, 1.1, 0.95)
            results.append([g.cpu() for g in torch.autograd.grad((out * weights.to(device)).sum(), leaves)])
        for name, a, b in zip(("values", "rewards", "dones", "importance"), *results):
            assert torch.isfinite(b).all() and (name != "dones" or b.abs().sum() > 0), name
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=f"{name} {rows}x{horizon}")
