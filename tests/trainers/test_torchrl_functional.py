"""TorchRL (torchrl pinned by requirements-test.txt) on puffadv: the cases of TorchRL's
own value-estimator tests (test/objectives/test_values.py: test_gae, test_gae_param_as_tensor,
test_gae_multidim, test_tdlambda, test_tdlambda_multi, test_vtrace, test_vtrace_multidim,
test_vtrace_truncated_uses_next_value; their grids and draws, written here) through
puffadv.integrations.torchrl's functions, each against TorchRL's own at TorchRL's
tolerance (1e-4) and at float32 rounding. TorchRL's tests draw independent next values,
which go to puffadv's next_values= (test_torchrl_next_values.py holds their
gradients); every grid runs again with the next step's values as next values
(the shifted case), which must go through puffadv too."""
from __future__ import annotations

import warnings

import pytest
import torch
import torchrl.objectives.value.functional as own

import puffadv
from puffadv import integrations
from puffadv.integrations import torchrl as ours

pytestmark = pytest.mark.filterwarnings("ignore::puffadv.FallbackWarning")


def draw(N, T, D=(1,), dtype=torch.float32, has_done=True):
    """TorchRL's draws: done = bernoulli(0.1) | terminated, terminated = bernoulli(0.1)."""
    torch.manual_seed(0)
    done = torch.zeros(*N, T, *D, dtype=torch.bool)
    terminated = done.clone()
    if has_done:
        terminated = terminated.bernoulli_(0.1)
        done = done.bernoulli_(0.1) | terminated
    reward = torch.randn(*N, T, *D, dtype=dtype)
    state_value = torch.randn(*N, T, *D, dtype=dtype)
    next_state_value = torch.randn(*N, T, *D, dtype=dtype)
    return done, terminated, reward, state_value, next_state_value


def shifted(state_value, next_state_value, time_dim):
    """Next values that are the next step's values, the last one drawn."""
    v, nv = state_value.movedim(time_dim, -1), next_state_value.movedim(time_dim, -1)
    return torch.cat((v[..., 1:], nv[..., -1:]), -1).movedim(-1, time_dim).contiguous()


def close(a, b, dtype):
    """TorchRL's tolerance, and float32 rounding of the largest magnitude. float64 too: TorchRL's
    loops form gamma * (~terminated).int(), a Python float times an int tensor, in float32."""
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert a.dtype == b.dtype == dtype
    assert (a - b).abs().max() <= 2e-5 * max(1.0, float(b.abs().max()))


class Through:
    """Counts the calls that went through puffadv and those that fell back to TorchRL."""

    def __enter__(self):
        self.calls, self.fallbacks = integrations.calls["torchrl"], integrations.fallbacks["torchrl"]
        return self

    def __exit__(self, *exc):
        self.puffadv = integrations.calls["torchrl"] - self.calls
        self.torchrl = integrations.fallbacks["torchrl"] - self.fallbacks


def run_gae(gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim=-2, dtype=None):
    kw = dict(done=done, terminated=terminated, time_dim=time_dim)
    want = own.generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, **kw)
    for function in (ours.vec_generalized_advantage_estimate, ours.generalized_advantage_estimate):
        got = function(gamma, lmbda, state_value, next_state_value, reward, **kw)
        for g, w in zip(got, want):
            close(g, w, dtype or reward.dtype)


@pytest.mark.parametrize("gamma", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("lmbda", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("N", [(1,), (3,), (7, 3)])
@pytest.mark.parametrize("T", [200, 5, 3])
@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("has_done", [False, True])
def test_gae(gamma, lmbda, N, T, dtype, has_done):
    done, terminated, reward, state_value, next_state_value = draw(N, T, dtype=dtype, has_done=has_done)
    with Through() as drawn:
        run_gae(gamma, lmbda, state_value, next_state_value, reward, done, terminated)
    assert drawn.puffadv == 2 and drawn.torchrl == 0  # independent next values: puffadv's next_values=
    with Through() as through:
        run_gae(gamma, lmbda, state_value, shifted(state_value, next_state_value, -2), reward, done, terminated)
    assert through.puffadv == 2 and through.torchrl == 0


@pytest.mark.parametrize("N", [(1,), (8,), (7, 3)])
@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("has_done", [True, False])
@pytest.mark.parametrize("gamma_tensor", ["scalar", "tensor", "tensor_single_element"])
@pytest.mark.parametrize("lmbda_tensor", ["scalar", "tensor", "tensor_zero_dim", "tensor_single_element"])
def test_gae_param_as_tensor(N, dtype, has_done, gamma_tensor, lmbda_tensor):
    gamma, lmbda, T = 0.95, 0.90, 200
    done, terminated, reward, state_value, next_state_value = draw(N, T, dtype=dtype, has_done=has_done)
    next_state_value = shifted(state_value, next_state_value, -2)
    gamma_vec = {"tensor": torch.full_like(reward, gamma), "tensor_single_element": torch.as_tensor([gamma]),
                 "scalar": gamma}[gamma_tensor]
    lmbda_vec = {"tensor": torch.full_like(reward, lmbda), "tensor_zero_dim": torch.as_tensor(lmbda),
                 "tensor_single_element": torch.as_tensor([lmbda]), "scalar": lmbda}[lmbda_tensor]
    want = own.generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, done=done,
                                              terminated=terminated)
    with Through() as through:
        got = ours.vec_generalized_advantage_estimate(gamma_vec, lmbda_vec, state_value, next_state_value, reward,
                                                      done=done, terminated=terminated)
    assert (through.puffadv, through.torchrl) == (1, 0)  # per-step tensors too (issue 29)
    for g, w in zip(got, want):
        close(g, w, dtype)


@pytest.mark.parametrize("gamma", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("lmbda", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("N", [(3,), (7, 3)])
@pytest.mark.parametrize("T", [100, 3])
@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("feature_dim", [[5], [2, 5]])
@pytest.mark.parametrize("has_done", [True, False])
def test_gae_multidim(gamma, lmbda, N, T, dtype, has_done, feature_dim):
    time_dim = -1 - len(feature_dim)
    done, terminated, reward, state_value, next_state_value = draw(N, T, feature_dim, dtype, has_done)
    with Through() as through:
        run_gae(gamma, lmbda, state_value, shifted(state_value, next_state_value, time_dim), reward, done,
                terminated, time_dim)
    assert through.puffadv == 2


@pytest.mark.parametrize("gamma", [0.1, 0.5, 0.99])
@pytest.mark.parametrize("lmbda", [0.1, 0.5, 0.99])
@pytest.mark.parametrize("N", [(3,), (7, 3)])
@pytest.mark.parametrize("T", [200, 5, 3])
@pytest.mark.parametrize("next_values", ["shifted", "independent"])
def test_tdlambda(gamma, lmbda, N, T, next_values):
    done, terminated, reward, state_value, next_state_value = draw(N, T)
    if next_values == "shifted":
        next_state_value = shifted(state_value, next_state_value, -2)
    want = own.td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done=done, terminated=terminated)
    with Through() as through:
        for function in (ours.vec_td_lambda_return_estimate, ours.td_lambda_return_estimate):
            close(function(gamma, lmbda, next_state_value, reward, done=done, terminated=terminated), want,
                  torch.float32)
    assert through.puffadv == 2  # TD(lambda) reads only next values: any of them


@pytest.mark.parametrize("gamma", [0.1, 0.99])
@pytest.mark.parametrize("lmbda", [0.1, 0.99])
@pytest.mark.parametrize("N", [(3,), (7, 3)])
@pytest.mark.parametrize("T", [3, 100])
@pytest.mark.parametrize("feature_dim", [[5], [2, 5]])
def test_tdlambda_multi(gamma, lmbda, N, T, feature_dim):
    time_dim = -1 - len(feature_dim)
    done, terminated, reward, _, next_state_value = draw(N, T, feature_dim)
    want = own.td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done=done, terminated=terminated,
                                         time_dim=time_dim)
    with Through() as through:
        got = ours.vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done=done,
                                                 terminated=terminated, time_dim=time_dim)
    assert through.puffadv == 1
    close(got, want, torch.float32)


def run_vtrace(gamma, N, T, D, dtype, has_done, next_values):
    time_dim = -1 - len(D)
    done, terminated, reward, state_value, next_state_value = draw(N, T, D, dtype, has_done)
    if next_values == "shifted":
        next_state_value = shifted(state_value, next_state_value, time_dim)
    log_pi = torch.log(torch.rand(*N, T, *D, dtype=dtype))
    log_mu = torch.log(torch.rand(*N, T, *D, dtype=dtype))
    args = (gamma, log_pi, log_mu, state_value, next_state_value, reward)
    want = own.vtrace_advantage_estimate(*args, done=done, terminated=terminated, time_dim=time_dim)
    with Through() as through:
        got = ours.vtrace_advantage_estimate(*args, done=done, terminated=terminated, time_dim=time_dim)
    for g, w in zip(got, want):
        close(g, w, dtype)
    assert not torch.isnan(got[1]).any() and not torch.isinf(got[1]).any()
    assert (through.puffadv, through.torchrl) == (1, 0)  # independent next values: puffadv's next_values=


@pytest.mark.parametrize("gamma", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("N", [(1,), (3,), (7, 3)])
@pytest.mark.parametrize("T", [200, 5, 3])
@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("has_done", [False, True])
@pytest.mark.parametrize("next_values", ["shifted", "independent"])
def test_vtrace(gamma, N, T, dtype, has_done, next_values):
    run_vtrace(gamma, N, T, (1,), dtype, has_done, next_values)


@pytest.mark.parametrize("gamma", [0.99, 0.5, 0.1])
@pytest.mark.parametrize("N", [(3,), (7, 3)])
@pytest.mark.parametrize("T", [100, 3])
@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("feature_dim", [[5], [2, 5]])
@pytest.mark.parametrize("has_done", [True, False])
def test_vtrace_multidim(gamma, N, T, dtype, feature_dim, has_done):
    run_vtrace(gamma, N, T, tuple(feature_dim), dtype, has_done, "shifted")


def test_vtrace_truncated_uses_next_value():
    done = torch.tensor([[False], [True], [False], [False]])
    terminated = torch.zeros_like(done)
    reward = torch.zeros(4, 1)
    state_value = torch.tensor([[1.0], [1.0], [100.0], [100.0]])
    log_pi = log_mu = torch.zeros_like(state_value)
    with Through() as through:
        advantage, _ = ours.vtrace_advantage_estimate(1.0, log_pi, log_mu, state_value, state_value.clone(), reward,
                                                      done=done, terminated=terminated)
    assert through.puffadv == 1
    torch.testing.assert_close(advantage, torch.zeros_like(advantage))


def test_fallbacks_say_why_once():
    done, terminated, reward, state_value, next_state_value = draw((2,), 9)
    ours._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            ours.vec_generalized_advantage_estimate(0.9, 0.9, state_value, next_state_value, reward, done, terminated)
            ours.vec_generalized_advantage_estimate(torch.full_like(reward, 0.9), 0.9, state_value, next_state_value,
                                                    reward, done, terminated)
            ours.td_lambda_return_estimate(torch.full_like(reward, 0.9), 0.9, next_state_value, reward, done,
                                           terminated, rolling_gamma=False)
    messages = [str(w.message) for w in caught if issubclass(w.category, puffadv.FallbackWarning)]
    assert messages == [  # independent next values and per-step gamma go to puffadv: no warning
        "puffadv.integrations.torchrl: rolling_gamma=False: td_lambda_return_estimate "
        "computed by TorchRL (said once)"]


def test_gradients_go_through_puffadv_and_equal_torchrls():
    """differentiable GAE: the gradient reaches state_value and next_state_value as through TorchRL's own."""
    done, terminated, reward, state_value, next_state_value = draw((3,), 20)
    next_state_value = shifted(state_value, next_state_value, -2)
    grads = []
    for through_puffadv in (True, False):
        leaf = state_value.detach().clone().requires_grad_(True)
        nsv = shifted(leaf, next_state_value.detach(), -2)
        if through_puffadv:
            with Through() as through:
                advantage, _ = ours.vec_generalized_advantage_estimate(0.9, 0.9, leaf, nsv, reward, done, terminated)
            # puffadv computes it (next_values=: the gradient must reach next_state_value's leaf)
            assert (through.puffadv, through.torchrl) == (1, 0)
        else:
            advantage, _ = own.vec_generalized_advantage_estimate(0.9, 0.9, leaf, nsv, reward, done, terminated)
        advantage.sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- per-step gamma and lambda (issue 29)

@pytest.mark.parametrize("dtype", [torch.float, torch.double])
@pytest.mark.parametrize("next_values", ["shifted", "independent"])
def test_per_step_gamma_and_lambda_tensors_go_through_puffadv(dtype, next_values):
    """Random per-step gamma and lmbda tensors ([*B, T, 1], and gamma [T, 1] broadcast over
    the batch) beside shifted or independent next values: GAE, TD(lambda) (rolling_gamma
    None and True) and V-trace through puffadv, equal to TorchRL's own."""
    done, terminated, reward, state_value, next_state_value = draw((4, 3), 37, dtype=dtype)
    if next_values == "shifted":
        next_state_value = shifted(state_value, next_state_value, -2)
    g = torch.Generator().manual_seed(5)
    gamma = torch.rand(reward.shape, generator=g, dtype=dtype) * 0.5 + 0.5
    lmbda = torch.rand(reward.shape, generator=g, dtype=dtype)
    gamma_over_time = gamma[0, 0]  # [T, 1]: broadcast to every row
    kw = dict(done=done, terminated=terminated)
    for gam in (gamma, gamma_over_time):
        want = own.vec_generalized_advantage_estimate(gam, lmbda, state_value, next_state_value, reward, **kw)
        with Through() as through:
            got = ours.vec_generalized_advantage_estimate(gam, lmbda, state_value, next_state_value, reward, **kw)
        assert (through.puffadv, through.torchrl) == (1, 0)
        for a, b in zip(got, want):
            close(a, b, dtype)
        for rolling in (None, True):  # TorchRL's own takes a scalar lmbda here
            want = own.vec_td_lambda_return_estimate(gam, 0.8, next_state_value, reward, rolling_gamma=rolling, **kw)
            with Through() as through:
                got = ours.vec_td_lambda_return_estimate(gam, 0.8, next_state_value, reward, rolling_gamma=rolling,
                                                         **kw)
            assert (through.puffadv, through.torchrl) == (1, 0)
            close(got, want, dtype)
        log_pi, log_mu = (torch.randn(reward.shape, generator=g, dtype=dtype) * 0.3 for _ in range(2))
        want = own.vtrace_advantage_estimate(gam, log_pi, log_mu, state_value, next_state_value, reward, **kw)
        with Through() as through:
            got = ours.vtrace_advantage_estimate(gam, log_pi, log_mu, state_value, next_state_value, reward, **kw)
        assert (through.puffadv, through.torchrl) == (1, 0)
        for a, b in zip(got, want):
            close(a, b, dtype)


def test_gamma_tensors_that_require_grad_keep_their_gradient():
    """A 0-d gamma and a per-step lmbda that require grad (meta-gradients): puffadv's
    gradients equal autograd of TorchRL's own, none dropped by a float()."""
    done, terminated, reward, state_value, next_state_value = draw((3,), 25, dtype=torch.double)
    lmbda_steps = torch.rand(reward.shape, generator=torch.Generator().manual_seed(6), dtype=torch.double)
    grads = []
    for function in (ours.vec_generalized_advantage_estimate, own.vec_generalized_advantage_estimate):
        gamma = torch.tensor(0.9, dtype=torch.double, requires_grad=True)
        lmbda = lmbda_steps.clone().requires_grad_(True)
        value = state_value.clone().requires_grad_(True)
        with Through() as through:
            advantage, _ = function(gamma, lmbda, value, next_state_value, reward, done, terminated)
        if function is ours.vec_generalized_advantage_estimate:
            assert (through.puffadv, through.torchrl) == (1, 0)
        grads.append(torch.autograd.grad((advantage * torch.linspace(0.5, 1.5, advantage.numel(),
                                                                     dtype=torch.double).reshape(advantage.shape)).sum(),
                                         (gamma, lmbda, value)))
    for a, b in zip(*grads):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("estimator", ["gae", "td_lambda"])
@pytest.mark.parametrize("per_step", [False, True])
def test_forward_mode_falls_back_to_torchrls_loop_version(estimator, per_step):
    """Dual tensors (torch.autograd.forward_ad): TorchRL's loop version computes the call, with
    every tangent, a dual gamma's and lambda's and the next values' apart from the values'
    included: the tangent equals central differences of the call outside the dual level, and
    the values are the same. (TorchRL's vectorised functions, used here before 2026-12-06, read
    a 0-d gamma by .item() there, dropping its tangent, and their TD(lambda) with per-step
    gamma and lambda gave other values inside a dual level.)"""
    import torch.autograd.forward_ad as fwAD
    done, terminated, reward, state_value, next_state_value = draw((3,), 12, dtype=torch.double)
    g = torch.Generator().manual_seed(8)
    shape = reward.shape[-2:] if per_step else ()  # [T, 1]: per step, broadcast over rows
    gamma = torch.rand(shape, generator=g, dtype=torch.double) * 0.2 + 0.75
    lmbda = torch.rand(shape, generator=g, dtype=torch.double) * 0.2 + 0.7
    primals = (gamma, lmbda, state_value, next_state_value)
    tangents = [torch.randn(x.shape, generator=g, dtype=torch.double) for x in primals]

    def call(gamma, lmbda, state_value, next_state_value):
        if estimator == "gae":
            return ours.vec_generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward,
                                                           done, terminated)[0]
        return ours.vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated)

    ours._warned.clear()
    with fwAD.dual_level(), warnings.catch_warnings(record=True) as caught, Through() as through:
        warnings.simplefilter("always")
        result = call(*(fwAD.make_dual(x, t) for x, t in zip(primals, tangents)))
        value, tangent = fwAD.unpack_dual(result)
    assert (through.puffadv, through.torchrl) == (0, 1)
    assert any("forward-mode AD" in str(w.message) and "computed by TorchRL" in str(w.message) and "vec_" not in
               str(w.message) for w in caught), [str(w.message) for w in caught]
    torch.testing.assert_close(value, call(*primals), rtol=1e-12, atol=1e-12)
    eps = 1e-6
    plus, minus = (call(*(x + s * eps * t for x, t in zip(primals, tangents))) for s in (1, -1))
    torch.testing.assert_close(tangent, (plus - minus) / (2 * eps), rtol=1e-6, atol=1e-7)
    assert tangent.abs().sum() > 0


def test_gamma_tensors_puffadv_cannot_take_fall_back_by_name():
    """A float64 gamma for float32 rewards (TorchRL's own promotes its result), and one that
    does not broadcast to the rewards' shape (TorchRL's own then raises its own error)."""
    done, terminated, reward, state_value, next_state_value = draw((2,), 9)
    for gamma, why in ((torch.full(reward.shape, 0.9, dtype=torch.double), "of a wider dtype"),
                       (torch.full((9, 2), 0.9), "does not broadcast")):
        ours._warned.clear()
        with warnings.catch_warnings(record=True) as caught, Through() as through:
            warnings.simplefilter("always")
            try:
                ours.vec_generalized_advantage_estimate(gamma, 0.9, state_value, next_state_value, reward, done,
                                                        terminated)
            except RuntimeError as error:  # TorchRL's own shape error, not puffadv's
                assert why == "does not broadcast", error
        assert (through.puffadv, through.torchrl) == (0, 1)
        assert any(why in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_vtrace_clip_tensors_that_require_grad_fall_back_to_torchrls_own():
    """TorchRL's V-trace differentiates rho_thresh and c_thresh (clamp_max); puffadv reads its
    clips as numbers, so such a call is TorchRL's, with their gradients (before 2026-12-06 it
    went through puffadv and they came back None, with only torch's float() warning)."""
    done, terminated, reward, state_value, next_state_value = draw((3,), 12, dtype=torch.double)
    g = torch.Generator().manual_seed(9)
    log_pi = torch.rand(reward.shape, generator=g, dtype=torch.double) * 2 - 1
    log_mu = torch.zeros_like(log_pi)
    grads = []
    for function in (ours.vtrace_advantage_estimate, own.vtrace_advantage_estimate):
        ours._warned.clear()
        rho, c = (torch.tensor(1.0, dtype=torch.double, requires_grad=True) for _ in range(2))
        value = state_value.clone().requires_grad_(True)
        with warnings.catch_warnings(record=True) as caught, Through() as through:
            warnings.simplefilter("always")
            advantage, vs = function(0.9, log_pi, log_mu, value, next_state_value, reward, done, terminated,
                                     rho_thresh=rho, c_thresh=c)
        if function is ours.vtrace_advantage_estimate:
            assert (through.puffadv, through.torchrl) == (0, 1)
            assert any("a rho_thresh tensor that requires grad" in str(w.message) for w in caught), \
                [str(w.message) for w in caught]
        grads.append(torch.autograd.grad((advantage + vs).sum(), (rho, c, value)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert grads[0][0].abs() > 0 and grads[0][1].abs() > 0
