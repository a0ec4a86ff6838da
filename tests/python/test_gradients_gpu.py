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

from gradient_cases import CASES, make_call  # noqa: E402

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
