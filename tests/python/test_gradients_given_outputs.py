"""Outputs given in place (`advantages=`, `returns=`, ...) while a graph is recorded (issue 30):
written by copy_, they follow torch's in-place rules under every way of recording one
(autograd, torch.func, torch.compile), and an input that requires grad is never dropped
because an output was given."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
puffadv = pytest.importorskip("puffadv")

SCALARS = (0.97, 0.9, 1.1, 0.95)


def _puff_inputs():
    rng = np.random.default_rng(5)
    values, rewards = (torch.from_numpy(x) for x in rng.standard_normal((2, 3, 8)))
    dones = torch.from_numpy(rng.choice(np.array([0.0, 0.0, 1.0, 0.4]), size=(3, 8)))
    dones[:, -1] = 1.0  # an episode end at the last step
    importance = torch.from_numpy(rng.uniform(0.5, 1.5, (3, 8)))
    return values, rewards, dones, importance


@pytest.mark.parametrize("scalars", [{"gamma": 0.97, "gae_lambda": 0.9}, dict(zip(("gamma", "gae_lambda", "rho_clip",
                                                                                   "c_clip"), SCALARS))])
def test_float_dones_that_require_grad_keep_it_with_a_given_output(scalars):
    """The host fast path for a given advantages skipped a call whose only input requiring
    grad was the float dones: the result was detached, its gradient silently lost."""
    v, r, d, imp = _puff_inputs()
    puffadv.compute_puff_advantage(v, r, d, imp, torch.empty_like(v), **scalars)  # the first call loads the core
    d.requires_grad_()
    weights = torch.linspace(-1.0, 2.0, d.numel(), dtype=d.dtype).reshape(d.shape)
    out = torch.full_like(v, float("nan"))
    given = puffadv.compute_puff_advantage(v, r, d, imp, out, **scalars)
    assert given is out and out.requires_grad
    allocated = puffadv.compute_puff_advantage(v, r, d, imp, None, **scalars)
    torch.testing.assert_close(given, allocated, rtol=0, atol=0)
    (got,) = torch.autograd.grad((given * weights).sum(), d)
    (want,) = torch.autograd.grad((allocated * weights).sum(), d)
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def _gae(rewards, values, out=None):
    terminated = torch.zeros(rewards.shape, dtype=torch.bool)
    terminated[0, 0] = terminated[1, -1] = True
    return puffadv.gae(rewards, values, terminated, last_value=values[:, 0], advantages=True if out is None else out,
                       time_axis=-1).advantages


def test_torch_func_with_a_given_output():
    """torch.func.grad of a call writing a given output: it had been refused as if the inputs
    could not be read (the eager check of the output read the transform's wrappers)."""
    r = torch.linspace(-1.0, 1.0, 16, dtype=torch.float64).reshape(2, 8)
    v = r.flip(1).clone()
    weights = torch.rand_like(r)
    got = torch.func.grad(lambda r: (_gae(r, v, torch.empty_like(r)) * weights).sum())(r)
    want = torch.func.grad(lambda r: (_gae(r, v) * weights).sum())(r)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    v_grad = torch.func.grad(lambda v: (puffadv.compute_puff_advantage(
        v, r, torch.zeros_like(r), torch.ones_like(r), torch.empty_like(r), *SCALARS) * weights).sum())(v)
    leaf = v.clone().requires_grad_()
    out = puffadv.compute_puff_advantage(leaf, r, torch.zeros_like(r), torch.ones_like(r), None, *SCALARS)
    torch.testing.assert_close(v_grad, torch.autograd.grad((out * weights).sum(), leaf)[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match="advantages"):  # still checked: a wrong shape is refused
        torch.func.grad(lambda r: _gae(r, v, torch.empty(2, 7, dtype=r.dtype)).sum())(r)


def test_an_output_that_requires_grad_is_written_by_torchs_rules():
    """A given output that requires grad (a view of a non-leaf) where no input does: the write
    follows torch's in-place rules (copy_), as with inputs that require grad; it had been
    refused as a stale history. The overwritten part of its base then gets no gradient."""
    r = torch.linspace(-1.0, 1.0, 16, dtype=torch.float64).reshape(2, 8)
    w = torch.rand(2, 10, dtype=torch.float64, requires_grad=True)
    buffer = w * 2
    written = _gae(r, r.flip(1), buffer[:, :8])
    assert written.requires_grad
    torch.testing.assert_close(buffer[:, :8], _gae(r, r.flip(1)), rtol=0, atol=0)
    (g,) = torch.autograd.grad(buffer.sum(), w)
    torch.testing.assert_close(g, torch.cat([torch.zeros(2, 8), torch.full((2, 2), 2.0)], 1).double())


@pytest.mark.parametrize("call", ["gae", "puff"])
def test_a_given_output_under_torch_compile_is_refused_by_name(call):
    """torch.compile(fullgraph=True) of a recording call writing a given output: the eager check
    of the output cannot read dynamo's fake tensors. Refused by name when the function runs,
    not dynamo's "Unsupported ... is_neg"."""
    torch._dynamo.reset()
    v, r, d, imp = _puff_inputs()
    v.requires_grad_()

    def step(v, out):
        if call == "gae":
            return _gae(r, v, out)
        return puffadv.compute_puff_advantage(v, r, d, imp, out, *SCALARS)

    with pytest.raises(TypeError, match="^advantages given as output under torch.compile while puffadv records"):
        torch.compile(step, fullgraph=True, backend="aot_eager")(v, torch.empty_like(r))
    with torch.no_grad():  # no graph: the traced operator writes it
        torch.testing.assert_close(torch.compile(step, fullgraph=True, backend="aot_eager")(v, torch.empty_like(r)),
                                   step(v, torch.empty_like(r)), rtol=0, atol=0)


@pytest.mark.parametrize("call", ["api", "op"])
def test_an_output_that_requires_grad_is_refused_under_torch_compile(call):
    """No input requires grad, the given output does: the traced operator's write into it kept
    its history, a silently wrong gradient (every overwritten element passed 1 to its base),
    where the eager call refuses or records a copy_. Refused by name while recording."""
    torch._dynamo.reset()
    v, r, d, imp = _puff_inputs()
    base = torch.rand(3, 8, dtype=torch.float64, requires_grad=True)

    def step(v, base):
        out = base * 1
        if call == "api":
            return puffadv.compute_puff_advantage(v, r, d, imp, out, *SCALARS)
        torch.ops.puffadv.compute_puff_advantage(v, r, d, imp, out, *SCALARS)
        return out

    with pytest.raises(Exception, match="advantages (given as output under torch.compile|requires grad, but)"):
        torch.compile(step, fullgraph=True, backend="aot_eager")(v, base)
    with torch.no_grad():  # no graph: written
        torch.testing.assert_close(torch.compile(step, fullgraph=True, backend="aot_eager")(v, base),
                                   puffadv.compute_puff_advantage(v, r, d, imp, None, *SCALARS), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("call", ["gae", "puff"])
def test_a_gamma_that_requires_grad_compiles_forward_and_backward(call, dtype):
    """A 0-d gamma and lambda that require grad under torch.compile(fullgraph=True): the
    Function's forward read them with float(), a SymFloat while dynamo traces, which the traced
    operator's float argument refused (the trace failed, in float32)."""
    torch._dynamo.reset()
    v, r, d, imp = (x.to(dtype) for x in _puff_inputs())
    v.requires_grad_()
    gamma = torch.tensor(0.97, dtype=dtype, requires_grad=True)
    lam = torch.tensor(0.9, dtype=dtype, requires_grad=True)

    def loss(v, gamma, lam):
        if call == "gae":
            out = puffadv.gae(r, v, d > 0.5, last_value=v[:, 0], gamma=gamma, gae_lambda=lam, time_axis=-1).advantages
        else:
            out = puffadv.compute_puff_advantage(v, r, d, imp, None, gamma, lam, 1.1, 0.95)
        return (out * torch.linspace(0.5, 1.5, out.numel(), dtype=out.dtype).reshape(out.shape)).sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")(v, gamma, lam)
    eager = loss(v, gamma, lam)
    torch.testing.assert_close(compiled, eager, rtol=0, atol=0)
    for got, want in zip(torch.autograd.grad(compiled, (v, gamma, lam)), torch.autograd.grad(eager, (v, gamma, lam))):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want)


def _writers():
    """Each surface that writes a given output, as (name, write(into))."""
    pytest.importorskip("puffadv.torch")
    g = torch.Generator().manual_seed(21)
    r, v = (torch.randn(3, 5, generator=g, dtype=torch.float64) for _ in range(2))
    term = torch.zeros(3, 5, dtype=torch.bool)
    term[0, -1] = True
    lv, imp, d = torch.randn(3, generator=g, dtype=torch.float64), torch.ones_like(r), term.double()
    yield "gae", lambda out: puffadv.gae(r, v, term, last_value=lv, gamma=0.9, gae_lambda=0.8, time_axis=-1,
                                         advantages=out, returns=False)
    yield "compute_puff_advantage", lambda out: puffadv.compute_puff_advantage(v, r, d, imp, out, 0.9, 0.8, 1, 1)
    yield "torch.ops.puffadv", lambda out: torch.ops.puffadv.compute_puff_advantage(v, r, d, imp, out, 0.9, 0.8,
                                                                                      1.0, 1.0)


@pytest.mark.parametrize("writer", ["gae", "compute_puff_advantage", "torch.ops.puffadv"])
def test_compiled_write_into_a_tensor_saved_for_backward_is_refused(writer):
    """Third audit, 2026-12-06: eager autograd refuses a backward that saved a tensor a later
    write changed ("modified by an inplace operation"); compiled, the traced write bumped no
    version counter, and the backward read the new values (off by up to 3.8 here). Now
    AOTAutograd's trace refuses it too; written before it is read, the gradient is right."""
    import warnings
    write = dict(_writers())[writer]

    def saved_then_written(w):
        buffer = torch.ones(3, 5, dtype=torch.float64)
        loss = (buffer * w).sum()  # mul saves buffer: d loss / d w = ones
        write(buffer)
        return loss

    def written_then_read(w):
        buffer = torch.ones(3, 5, dtype=torch.float64)
        write(buffer)
        return (buffer * w).sum()

    w = torch.rand(3, 5, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            torch.autograd.grad(saved_then_written(w), w)
        torch._dynamo.reset()
        with pytest.raises(Exception, match="modified by an inplace operation"):
            torch.autograd.grad(torch.compile(saved_then_written, fullgraph=True, backend="aot_eager")(w), w)
        torch._dynamo.reset()
        (got,) = torch.autograd.grad(torch.compile(written_then_read, fullgraph=True, backend="aot_eager")(w), w)
        buffer = torch.ones(3, 5, dtype=torch.float64)
        write(buffer)
        assert not torch.equal(buffer, torch.ones_like(buffer))
        torch.testing.assert_close(got, buffer, rtol=0, atol=0)
