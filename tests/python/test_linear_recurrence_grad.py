"""linear_recurrence's gradient (_recurrence_vjp.py through _autograd.py): torch's
gradcheck and gradgradcheck in float64 for inputs, decay and seed, both directions,
both layouts, strided views, decays of 0 and 1 at the first and last steps; against
autograd of a float64 torch loop; torch.func (grad, vjp, jacrev, vmap) through the Python API,
torch.compile(fullgraph=True) of forward + backward; the NumPy-style function keeps the
gradient (never detaches); NaN isolation in the backward; 16-bit inputs; JAX's
check_grads (order 2) eagerly, under jit and vmap."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv

torch = pytest.importorskip("torch")
pytest.importorskip("puffadv.torch")

op = torch.ops.puffadv.linear_recurrence


def loop(x, a, seed, reverse):
    """The recurrence as a torch loop over [B, T] (autograd's reference)."""
    carry = torch.zeros_like(x[:, 0]) if seed is None else seed
    out = [None] * x.shape[1]
    for t in (range(x.shape[1] - 1, -1, -1) if reverse else range(x.shape[1])):
        carry = x[:, t] + a[:, t] * carry
        out[t] = carry
    return torch.stack(out, dim=1)


def draw(rows=4, horizon=7, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, horizon, generator=g, dtype=dtype)
    a = torch.rand(rows, horizon, generator=g, dtype=dtype) * 2.2 - 1.1
    if horizon >= 2 and rows >= 2:  # a cut and a pass-through at each end
        a[0, 0], a[0, -1], a[1, 0], a[1, -1] = 0.0, 1.0, 1.0, 0.0
    s = torch.randn(rows, generator=g, dtype=dtype)
    return x, a, s


def leaves(*tensors):
    return tuple(t.detach().clone().requires_grad_(True) for t in tensors)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("time_axis", [1, 0])
@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (4, 7), (2, 33)])
def test_gradcheck_and_gradgradcheck(reverse, time_axis, shape):
    x, a, s = draw(*shape, seed=shape[1])
    lay = (lambda m: m) if time_axis == 1 else (lambda m: m.T.contiguous())
    args = leaves(lay(x), lay(a), s)
    f = lambda x, a, s: puffadv.linear_recurrence(x, a, seed=s, reverse=reverse, time_axis=time_axis)
    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)
    g = lambda x, a: op(x, a, reverse=reverse, time_axis=time_axis)  # no seed: y outside the row is 0
    assert torch.autograd.gradcheck(g, args[:2])


@pytest.mark.parametrize("reverse", [False, True])
def test_strided_views(reverse):
    x, a, s = draw(5, 12, seed=3)
    wide_x = torch.zeros(10, 36, dtype=torch.float64)
    wide_x[::2, ::3] = x
    wide_a = torch.zeros(12, 5, 2, dtype=torch.float64)
    wide_a[..., 1] = a.T
    x_view, a_view = wide_x.requires_grad_(True)[::2, ::3], wide_a.requires_grad_(True)[..., 1].T
    assert not x_view.is_contiguous() and not a_view.is_contiguous()
    s = s.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x, a, s: op(x, a, s, reverse=reverse, time_axis=1), (x_view, a_view, s))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("seeded", [False, True])
def test_equals_autograd_of_a_float64_loop(reverse, seeded):
    x, a, s = draw(6, 40, seed=5)
    x1, a1, s1 = leaves(x, a, s)
    x2, a2, s2 = leaves(x, a, s)
    w = torch.randn(6, 40, dtype=torch.float64)
    (puffadv.linear_recurrence(x1, a1, seed=s1 if seeded else None, reverse=reverse, time_axis=1) * w).sum().backward()
    (loop(x2, a2, s2 if seeded else None, reverse) * w).sum().backward()
    for got, want in ((x1.grad, x2.grad), (a1.grad, a2.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    if seeded:
        torch.testing.assert_close(s1.grad, s2.grad, rtol=1e-12, atol=1e-12)


def test_a_scalar_decay_tensor_gets_its_gradient():
    x, _, s = draw(3, 9, seed=6)
    x, decay = leaves(x, torch.tensor(0.7, dtype=torch.float64))
    assert torch.autograd.gradcheck(
        lambda x, d: puffadv.linear_recurrence(x, d, reverse=True, time_axis=1), (x, decay))
    y = puffadv.linear_recurrence(x, decay, reverse=True, time_axis=1)
    assert y.requires_grad and y.grad_fn is not None


def test_the_python_api_never_drops_a_gradient():
    x, a, s = draw(3, 5)
    for name in ("inputs", "decay", "seed"):
        args = {"inputs": x.clone(), "decay": a.clone(), "seed": s.clone()}
        args[name].requires_grad_(True)
        y = puffadv.linear_recurrence(args["inputs"], args["decay"], seed=args["seed"], reverse=False, time_axis=1)
        assert y.requires_grad, name
        y.sum().backward()
        assert args[name].grad is not None and args[name].grad.abs().sum() > 0, name
    with torch.no_grad():
        assert not puffadv.linear_recurrence(*leaves(x, a), reverse=False, time_axis=1).requires_grad


def test_out_follows_torchs_in_place_rules():
    x, a = leaves(*draw(3, 6)[:2])
    out = torch.zeros(3, 6, dtype=torch.float64)
    y = puffadv.linear_recurrence(x, a, reverse=True, time_axis=1, out=out)
    assert y is out and out.requires_grad  # a copy_ into out, recorded as torch records it
    out.sum().backward()
    x2, a2 = leaves(x, a)
    loop(x2, a2, None, True).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-12, atol=1e-12)
    leaf = torch.zeros(3, 6, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        puffadv.linear_recurrence(x, a, reverse=True, time_axis=1, out=leaf)


def api(reverse, time_axis=1):
    return lambda x, a, s: puffadv.linear_recurrence(x, a, seed=s, reverse=reverse, time_axis=time_axis)


def test_torch_func_grad_vjp_jacrev_and_vmap():
    """Through the Python API (an autograd.Function over the op, _autograd.torch_function)."""
    x, a, s = draw(2, 5, seed=8)
    f = lambda x, a, s: api(True)(x, a, s).sum()
    grads = torch.func.grad(f, argnums=(0, 1, 2))(x, a, s)
    x2, a2, s2 = leaves(x, a, s)
    loop(x2, a2, s2, True).sum().backward()
    for got, want in zip(grads, (x2.grad, a2.grad, s2.grad)):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    y, pullback = torch.func.vjp(lambda x: api(False)(x, a, s), x)
    w = torch.randn_like(y)
    torch.testing.assert_close(pullback(w)[0], torch.autograd.functional.vjp(lambda x: loop(x, a, s, False), x, w)[1],
                               rtol=1e-12, atol=1e-12)
    jac = torch.func.jacrev(lambda x: api(False)(x, a, s))(x)
    torch.testing.assert_close(jac, torch.autograd.functional.jacobian(lambda x: loop(x, a, s, False), x),
                               rtol=1e-12, atol=1e-12)
    many = torch.randn(3, 2, 5, dtype=torch.float64)
    batched = torch.func.vmap(torch.func.grad(f, argnums=(0, 1, 2)), in_dims=(0, None, None))(many, a, s)
    for got, want in zip(batched, torch.func.grad(f, argnums=(0, 1, 2))(many[2], a, s)):
        torch.testing.assert_close(got[2], want, rtol=1e-12, atol=1e-12)
    time_major = torch.randn(3, 5, 2, dtype=torch.float64)
    mapped = torch.func.vmap(lambda x: api(False, 0)(x, a.T, s))(time_major)
    # Not bitwise: the mapped call is one time-major call of 6 rows (walked flat on the
    # CPU), the direct one of 2 (interleaved, 2 steps per vector): the same products
    # associated differently. An axis mixed up would be off by O(1).
    torch.testing.assert_close(mapped[1], api(False, 0)(time_major[1], a.T, s), rtol=1e-14, atol=1e-14)


def test_torch_func_through_the_raw_op_takes_the_functions_rules():
    """torch.func cannot run a custom op's own autograd in this torch (it raised "must override
    setup_context"): the op's call hands the transform's tensors to the Python API's Function,
    so the gradients of inputs, decay and seed equal the public function's."""
    x, a, s = draw(2, 5, seed=8)
    w = torch.randn(2, 5, generator=torch.Generator().manual_seed(8), dtype=x.dtype)

    def loss(f):
        return lambda x, a, s: (f(x, a, s) * w).sum()

    through_op = torch.func.grad(loss(lambda x, a, s: op(x, a, s, reverse=True, time_axis=1)), argnums=(0, 1, 2))
    public = torch.func.grad(loss(lambda x, a, s: puffadv.linear_recurrence(x, a, seed=s, reverse=True, time_axis=1)),
                             argnums=(0, 1, 2))
    for got, wanted in zip(through_op(x, a, s), public(x, a, s)):
        assert wanted.abs().sum() > 0
        torch.testing.assert_close(got, wanted, rtol=1e-14, atol=1e-14)


def test_compile_fullgraph_forward_and_backward():
    torch._dynamo.reset()
    x, a, s = draw(4, 16, seed=9, dtype=torch.float32)

    def step(x, a, s):
        y = puffadv.linear_recurrence(x, a, seed=s, reverse=True, time_axis=1)
        return (y * y).sum()

    compiled = torch.compile(step, fullgraph=True)
    eager_args, compiled_args = leaves(x, a, s), leaves(x, a, s)
    step(*eager_args).backward()
    compiled(*compiled_args).backward()
    for got, want in zip(compiled_args, eager_args):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-5)


def test_nan_stays_in_its_row_in_the_backward():
    x, a, s = draw(5, 30, seed=10)
    x, a, s = leaves(x, a, s)
    with torch.no_grad():
        a[3, 12] = float("nan")
    puffadv.linear_recurrence(x, a, seed=s, reverse=True, time_axis=1).sum().backward()
    for grad in (x.grad, a.grad):
        assert torch.isnan(grad[3]).any()
        assert torch.isfinite(grad[[0, 1, 2, 4]]).all()
    assert torch.isfinite(s.grad[[0, 1, 2, 4]]).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradients_keep_each_arguments_dtype(dtype):
    x, a, s = (t.to(dtype) for t in draw(3, 10, seed=11))
    x, a, s = leaves(x, a, s)
    y = puffadv.linear_recurrence(x, a, seed=s, reverse=False, time_axis=1)
    assert y.dtype == torch.float32
    y.sum().backward()
    assert (x.grad.dtype, a.grad.dtype, s.grad.dtype) == (dtype,) * 3
    x64, a64, s64 = leaves(x.double(), a.double(), s.double())
    loop(x64, a64, s64, False).sum().backward()
    tol = 1e-5 if dtype == torch.float32 else 5e-2
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=tol, atol=tol)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("time_axis", [1, 0])
def test_jax_check_grads(reverse, time_axis):
    jax = pytest.importorskip("jax")
    pjax = pytest.importorskip("puffadv.jax")
    from jax.test_util import check_grads
    x, a, s = (t.numpy() for t in draw(3, 8, seed=12))
    lay = (lambda m: m) if time_axis == 1 else (lambda m: np.ascontiguousarray(m.T))
    with (jax.enable_x64(True) if hasattr(jax, "enable_x64") else jax.experimental.enable_x64()):
        f = lambda x, a, s: pjax.linear_recurrence(x, a, seed=s, reverse=reverse, time_axis=time_axis)
        check_grads(f, (lay(x), lay(a), s), order=2, modes=["rev"])
        check_grads(jax.jit(f), (lay(x), lay(a), s), order=1, modes=["rev"])
        grads = jax.grad(lambda x, a, s: f(x, a, s).sum(), argnums=(0, 1, 2))(lay(x), lay(a), s)
        tx, ta, ts = leaves(*(torch.from_numpy(v) for v in (x, a, s)))
        loop(tx, ta, ts, reverse).sum().backward()
        for got, want in zip(grads, (lay(tx.grad.numpy()), lay(ta.grad.numpy()), ts.grad.numpy())):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-12)
        batched = jax.vmap(jax.grad(lambda x: f(x, lay(a), s).sum()))(np.stack([lay(x), -lay(x)]))
        np.testing.assert_allclose(np.asarray(batched[0]), np.asarray(grads[0]), rtol=1e-12, atol=1e-12)


def test_the_differentiable_path_names_its_errors():
    x, a = leaves(*draw(3, 4)[:2])
    with pytest.raises(TypeError, match=r"time_axis must be an int \(0: time-major \[T, B\], 1: batch-major"):
        puffadv.linear_recurrence(x, a, reverse=False, time_axis=1.0)
    with pytest.raises(ValueError, match="stream= cannot be passed with tensors that require grad"):
        puffadv.linear_recurrence(x, a, reverse=False, time_axis=1, stream=0)
    with pytest.raises(TypeError, match="^seed is a numpy array but inputs is a torch array"):
        puffadv.linear_recurrence(x, a, seed=np.zeros(3), reverse=False, time_axis=1)
    with pytest.raises(ValueError, match=r"decay has shape \[3, 5\] but inputs has shape \[3, 4\]"):
        puffadv.linear_recurrence(x, torch.zeros(3, 5, dtype=torch.float64), reverse=False, time_axis=1)
    with pytest.raises(TypeError, match="decay has dtype float32 but inputs has float64"):
        puffadv.linear_recurrence(x, a.float(), reverse=False, time_axis=1)
