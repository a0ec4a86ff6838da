"""The Python API inside torch.func transforms where puffadv's own inputs are not the ones
differentiated (third audit, 2026-12-06), and under torch.compile of a transform.

torch.func.grad wraps every tensor argument of the function it differentiates, and every
tensor the function allocates: before 2026-12-06 such a call took the eager path, whose
DLPack cannot read them, and was refused ("rewards is a tensor inside a torch.func
transform"), which blocked the functional PPO pattern (advantages of a batch passed in, a
policy differentiated). Under torch.compile of a transform it went to the detached compiled
path: all-zero gradients, without a word."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import puffadv  # noqa: E402


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    r, v = (torch.randn(2, 5, generator=g, dtype=torch.float64) for _ in range(2))
    term = torch.zeros(2, 5, dtype=torch.bool)
    term[0, 0] = term[1, -1] = True
    lv = torch.randn(2, generator=g, dtype=torch.float64)
    obs = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    return r, v, term, lv, obs


def _policy_loss(advantages_of):
    r, v, term, lv, obs = _batch()
    policy = torch.nn.Linear(3, 1).double()
    torch.nn.init.normal_(policy.weight, generator=torch.Generator().manual_seed(1))

    def loss(params, r, v):
        advantages = advantages_of(r, v, term, lv)
        logp = torch.func.functional_call(policy, params, (obs,)).squeeze(-1)
        return -(advantages.detach() * logp).mean()

    params = {k: p.detach() for k, p in policy.named_parameters()}
    return loss, params, r, v


ADVANTAGES = {
    "gae": lambda r, v, t, lv: puffadv.gae(r, v, t, last_value=lv, gamma=0.9, gae_lambda=0.8,
                                           time_axis=-1).advantages,
    "vtrace": lambda r, v, t, lv: puffadv.vtrace(r, v, t, last_value=lv, importance=torch.ones_like(r), gamma=0.9,
                                                 time_axis=-1).pg_advantages,
    "compute_puff_advantage": lambda r, v, t, lv: puffadv.compute_puff_advantage(v, r, t.double(), torch.ones_like(r),
                                                                                 gamma=0.9, gae_lambda=0.8),
    "discounted_returns": lambda r, v, t, lv: puffadv.discounted_returns(r, t, last_value=lv, gamma=0.9,
                                                                         time_axis=-1).returns,
    # PufferLib's calling pattern: a given advantages buffer (the host fast path took it once an
    # eager torch call had run, and refused the transform's tensors)
    "compute_puff_advantage given": lambda r, v, t, lv: puffadv.compute_puff_advantage(
        v, r, t.double(), torch.ones_like(r), torch.empty_like(v), gamma=0.9, gae_lambda=0.8),
}


@pytest.mark.parametrize("name", sorted(ADVANTAGES))
@pytest.mark.parametrize("captured", [False, True])
def test_grad_of_a_policy_loss_whose_advantages_puffadv_computes(name, captured):
    loss, params, r, v = _policy_loss(ADVANTAGES[name])
    loss(params, r, v)  # an eager call first: the host fast paths are set up by one
    if captured:
        got = torch.func.grad(lambda p: loss(p, r, v))(params)
    else:
        got = torch.func.grad(loss)(params, r, v)
    leaves = {k: p.clone().requires_grad_() for k, p in params.items()}
    want = dict(zip(leaves, torch.autograd.grad(loss(leaves, r, v), list(leaves.values()))))
    for k in want:
        assert want[k].abs().max() > 0
        torch.testing.assert_close(got[k], want[k], rtol=1e-12, atol=1e-12)


def test_grad_by_an_argument_puffadv_never_reads_is_zero():
    r, v, term, lv, _ = _batch(2)

    def f(unused, r):
        return puffadv.td_lambda_returns(r, v, term, last_value=lv, gamma=0.9, lambda_=0.9, time_axis=-1).returns.sum()

    assert torch.equal(torch.func.grad(f)(v, r), torch.zeros_like(v))
    # and by the one it reads: d sum(G) / d r, against autograd
    x = r.clone().requires_grad_()
    (want,) = torch.autograd.grad(f(v, x), x)
    torch.testing.assert_close(torch.func.grad(f, argnums=1)(v, r), want, rtol=1e-12, atol=1e-12)


def test_vmap_still_says_to_call_the_operators():
    r, _, term, _, _ = _batch(3)
    with pytest.raises(TypeError, match="inside a torch.func transform .* call the operator torch.ops.puffadv"):
        torch.func.vmap(lambda row: puffadv.episodic_cumsum(row[None], term[:1], time_axis=-1))(r)


def test_compile_of_a_transform_is_right_or_refused_never_zero():
    """compile(func.grad(f)) through the Python API: without fullgraph the call breaks the graph
    and runs eagerly (right); with fullgraph=True it is refused, naming the way out."""
    r, v, term, lv, _ = _batch(4)
    w = torch.linspace(-1, 2, 10, dtype=torch.float64).reshape(2, 5)

    def loss(v, gamma):
        return (puffadv.gae(r, v, term, last_value=lv, gamma=gamma, gae_lambda=0.8,
                            time_axis=-1).advantages * w).sum()

    gamma = torch.tensor(0.9, dtype=torch.float64)
    want = torch.func.grad(loss, argnums=(0, 1))(v, gamma)
    assert want[0].abs().max() > 0 and want[1].abs() > 0
    torch._dynamo.reset()
    got = torch.compile(torch.func.grad(loss, argnums=(0, 1)), backend="aot_eager")(v, gamma)
    for g, w_ in zip(got, want):
        torch.testing.assert_close(g, w_, rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="not traced inside a torch.func transform .* under torch.compile"):
        torch.compile(torch.func.grad(loss, argnums=(0, 1)), fullgraph=True, backend="aot_eager")(v, gamma)


class _Critic(torch.nn.Module):
    def __init__(self, estimator):
        super().__init__()
        self.critic = torch.nn.Linear(3, 1).double()
        self.estimator = estimator

    def forward(self, obs, r, term, lv):
        v = self.critic(obs).squeeze(-1)
        return (self.estimator(r, v, term, lv) ** 2).mean() + 0.5 * (v ** 2).mean()


@pytest.mark.parametrize("name", ["gae", "compute_puff_advantage"])
@pytest.mark.parametrize("strict", [False, True])
def test_export_with_a_gradient_to_keep_is_refused_and_without_one_works(name, strict):
    """torch.export of a module whose critic's values go through the Python API (fourth look,
    2026-12-06): export inlined puffadv's autograd Function and the exported module ran with
    the critic's gradient through the advantages dropped, without a word. Refused by name now;
    under no_grad (inference) the export computes the eager values."""
    from puffadv import _torch_tracing
    if strict and not _torch_tracing.DYNAMO_TELLS_EXPORT:
        pytest.skip("a strict export is refused from torch 2.13 on (dynamo's is_exporting before)")
    r, _, term, lv, obs = _batch(5)
    module = _Critic(ADVANTAGES[name])
    # strict: raised where dynamo traces, it arrives inside dynamo's "Observed exception"
    with pytest.raises(TypeError if not strict else Exception,
                       match="torch.export of a puffadv call whose inputs require grad"):
        torch.export.export(module, (obs, r, term, lv), strict=strict)
    with torch.no_grad():
        exported = torch.export.export(module, (obs, r, term, lv), strict=strict).module()
        torch.testing.assert_close(exported(obs, r, term, lv), module(obs, r, term, lv), rtol=1e-12, atol=1e-12)
