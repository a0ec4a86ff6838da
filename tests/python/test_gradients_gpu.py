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

from gradient_cases import CASES, episode_arrays, make_call  # noqa: E402

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


def _graph_calls(device):
    """name -> (call(*leaves) -> outputs, leaves): gamma and lambda numbers or per-step
    arrays (a 0-d CUDA tensor is read as a number by the forward, a synchronisation that
    capture refuses)."""
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
    }


# A graph node that the library kept alive past its call would hold a stream from before
# the capture: torch warns of it, and that warning fails the test.
@pytest.mark.filterwarnings("error:The AccumulateGrad node's stream does not match")
@pytest.mark.parametrize("name", ["gae fused", "vtrace composite", "td_lambda per-step decays"])
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
