"""An input's gradient does not depend on which other inputs require grad, nor on which
outputs carry a cotangent (issue 30). The backward picks its path from both (the fused
kernel where the ratios and gamma / lambda are constants and its forms allow, else the
formulas), so a path that ignores an argument shows up here as a disagreement: V-trace's
`sample_mask` was ignored by the fused kernel when only vs carried a cotangent and the
ratios were constants, until 2026-12-06.

The reference is the call with every argument requiring grad (the formulas, gradchecked
in test_gradients.py); each case is then run with each argument alone requiring grad, the
value arrays together, and all but one, under each output's cotangent alone and all of
them together."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("puffadv")

from gradient_cases import CASES, VALUE_ARRAYS, make_call  # noqa: E402


def _subsets(names):
    singles = [(n,) for n in names]
    values = tuple(n for n in names if n in VALUE_ARRAYS)
    all_but_one = [tuple(m for m in names if m != n) for n in names] if len(names) > 2 else []
    return list(dict.fromkeys([*singles, values, *all_but_one]))


def _grads(call, leaves, weights, selection):
    outputs = call(*leaves)
    return torch.autograd.grad(sum((outputs[i] * weights[i]).sum() for i in selection),
                               [x for x in leaves if x.requires_grad], allow_unused=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_gradient_does_not_depend_on_what_else_is_differentiated(case):
    call, leaves, names = make_call(case, seed=12)
    fixed = [x.detach() for x in leaves]
    g = torch.Generator().manual_seed(12)
    weights = [torch.randn(o.shape, generator=g, dtype=o.dtype) for o in call(*fixed)]
    for selection in [[i] for i in range(len(weights))] + [list(range(len(weights)))]:
        reference = dict(zip(names, _grads(call, leaves, weights, selection)))
        for subset in _subsets(names):
            wanted = [x.detach().requires_grad_(n in subset) for x, n in zip(fixed, names)]
            for name, got in zip(subset, _grads(call, wanted, weights, selection)):
                where = f"{case}: d/d{name} with only {subset} requiring grad, cotangents on outputs {selection}"
                if reference[name] is None:
                    assert got is None or not got.any(), where
                    continue
                assert got is not None, where
                torch.testing.assert_close(got, reference[name], rtol=1e-10, atol=1e-10, msg=where)
