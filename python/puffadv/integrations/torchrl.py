"""TorchRL on puffadv: drop-in ``GAE``, ``TDLambdaEstimator`` and ``VTrace`` value
estimators, and the functional estimators they call.

One line: import the estimator from here instead of ``torchrl.objectives.value``::

    from puffadv.integrations.torchrl import GAE   # TDLambdaEstimator, VTrace likewise
    advantage = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=True)

Each class IS TorchRL's (a subclass: the same constructor arguments, value
networks, ``shifted``, ``average_gae``, ``differentiable``, ``time_dim``,
``set_keys``, ``value_estimate``): its methods run TorchRL's own code, with the
names of the functional estimators they call (``vec_generalized_advantage_estimate``,
``td_lambda_return_estimate``, ``vtrace_advantage_estimate``, ...) bound to this
module's, which compute with puffadv. TorchRL's modules are not modified.

The functions take TorchRL's arguments and layout (``[*B, T, *F]``, time at
``time_dim``) and compute with puffadv where the case is within puffadv today:
gamma and lambda as numbers or tensors (per step where they broadcast to the
rewards' shape: ``rolling_gamma=True``, TorchRL's default; a 0-d one that requires
grad keeps its gradient), scalar clips, float32 or float64 values, bool ``done`` and
``terminated`` (a terminated step is done), not under torch.compile nor inside a
forward-mode AD level. Next values that are the next step's values inside an episode
(what ``shifted=True`` computes) are read from the values (the bootstrap only where an
episode ends); independent ones (TorchRL's own tests draw them so), and any call that
asks for a gradient, are passed as ``next_values=``, so each gradient reaches the
tensor it came from (``differentiable=True`` included). Any other case is computed by
TorchRL's own function (inside a dual level its loop version, which carries every
tangent), with one warning per reason (``puffadv.FallbackWarning``),
and counted in ``puffadv.integrations.fallbacks["torchrl"]``.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
import types
import warnings

import puffadv
from puffadv import _frameworks

from . import calls, fallbacks
from ._optional import require

torch = require("torch", "torchrl", "torchrl")
_functional = require("torchrl.objectives.value.functional", "torchrl", "torchrl")
_advantages = require("torchrl.objectives.value.advantages", "torchrl", "torchrl")

__all__ = ["GAE", "TDLambdaEstimator", "VTrace", "generalized_advantage_estimate",
           "vec_generalized_advantage_estimate", "td_lambda_return_estimate", "vec_td_lambda_return_estimate",
           "vtrace_advantage_estimate"]

_warned: set = set()


_DUAL_LEVEL = "forward-mode AD (a dual level is open)"
# Inside a dual level TorchRL's loop versions compute: its vectorised ones drop a gamma's or
# lmbda's tangent (a 0-d one is read by .item()) and its vectorised TD(lambda) with per-step
# gamma and lmbda gives other numbers there (measured 2026-12-06, TorchRL 0.14.1).
_LOOP_VERSION = {"vec_generalized_advantage_estimate": "generalized_advantage_estimate",
                 "vec_td_lambda_return_estimate": "td_lambda_return_estimate"}


def _fall_back(function: str, why: str, *args, depth: int = 1, **kwargs):
    """TorchRL's own `function` computes this call (its loop version inside a dual level); says
    why, once per function and reason (the warning points at the caller of the public function
    `depth` frames up)."""
    if why == _DUAL_LEVEL:
        function = _LOOP_VERSION.get(function, function)
    if (function, why) not in _warned:
        _warned.add((function, why))
        warnings.warn(f"puffadv.integrations.torchrl: {why}: {function} computed by TorchRL "
                      f"(said once)", puffadv.FallbackWarning, stacklevel=2 + depth)
    fallbacks["torchrl"] += 1
    return getattr(_functional, function)(*args, **kwargs)


def _scalar(x):
    """A Python float from a number or a one-element tensor; None for a per-step tensor."""
    if isinstance(x, torch.Tensor):
        return float(x.reshape(())) if x.numel() == 1 else None
    return float(x)


def _discount(name: str, x, like, time_dim: int):
    """(why not, None) or (None, gamma or lambda as puffadv takes it): a number; a 0-d
    tensor where one element requires grad (so that its gradient is kept, not dropped by a
    float()); per step, [rows, T] like the rewards, from a tensor that broadcasts to their
    shape (TorchRL's per-step gamma, rolling_gamma=True)."""
    if not isinstance(x, torch.Tensor):
        return None, float(x)
    if x.numel() == 1:
        if x.requires_grad and torch.is_grad_enabled():
            return None, x.reshape(()).to(like.dtype)
        return None, float(x.reshape(()))
    if x.device != like.device:
        return f"a {name} tensor on another device than the rewards", None
    if not x.is_floating_point() or torch.promote_types(x.dtype, like.dtype) != like.dtype:
        return f"a {name} tensor of a wider dtype than the rewards ({x.dtype})", None
    try:
        expanded = x.to(like.dtype).expand(like.shape)
    except RuntimeError:
        return f"a {name} tensor that does not broadcast to the rewards' shape", None
    return None, _rows(expanded, time_dim)


def _discounts(named: dict, like, time_dim: int):
    """(why not, None) or (None, {name: _discount}) for gamma and lmbda."""
    resolved = {}
    for name, x in named.items():
        why, resolved[name] = _discount(name, x, like, time_dim)
        if why is not None:
            return why, None
    return None, resolved


def _outside(floats: dict, flags: dict, scalars: dict, time_dim: int):
    """Why puffadv cannot take this call today (a short reason), or None."""
    if torch.compiler.is_compiling():
        return "under torch.compile"
    if _frameworks.torch_dual_level_open():  # its gamma's or lmbda's tangents too, which puffadv refuses
        return _DUAL_LEVEL
    shapes = {tuple(t.shape) for t in (*floats.values(), *flags.values())}
    if len(shapes) != 1:
        return "arrays of different shapes"  # TorchRL's own error message
    shape = shapes.pop()
    if len(shape) < 2 or not -len(shape) <= time_dim < len(shape) or 0 in shape:
        return "fewer than 2 dimensions, or an empty array"
    if any(v is None for v in scalars.values()):
        return "per-step clips"
    if len({t.dtype for t in floats.values()}) != 1 or next(iter(floats.values())).dtype not in (
            torch.float32, torch.float64):
        return "values other than all float32 or all float64"
    if any(t.dtype != torch.bool for t in flags.values()):
        return "done / terminated that are not bool"
    if len({t.device for t in (*floats.values(), *flags.values())}) != 1:
        return "arrays on different devices"
    if "terminated" in flags and bool((flags["terminated"] & ~flags["done"]).any()):
        return "a terminated step that is not done"
    return None


def _rows(t, time_dim: int):
    """[*B, T, *F] (time at time_dim) -> [rows, T], a view where strides allow."""
    return t.movedim(time_dim, -1).reshape(-1, t.shape[time_dim])


def _back(t, like, time_dim: int):
    """[rows, T] -> like's shape, time at time_dim."""
    moved = like.movedim(time_dim, -1).shape
    return t.reshape(moved).movedim(-1, time_dim)


def _next_values_independent(state_value, next_state_value, done, time_dim: int) -> bool:
    """Whether some next value inside an episode is not the next step's value (GAE, V-trace
    read values[t + 1] there)."""
    v, nv, d = (x.movedim(time_dim, -1) for x in (state_value, next_state_value, done))
    # Elementwise, no gather: a NaN inside an episode counts as different (TorchRL's own then).
    return bool(((nv[..., :-1] != v[..., 1:]) & ~d[..., :-1]).any())


def _next_values(state_value, next_state_value, done, time_dim: int) -> dict:
    """puffadv's keyword argument for TorchRL's next values: next_values= (every step's
    own) where they are independent of the values or a gradient is asked for (reading them
    from state_value[t + 1] gives the same numbers but sends their gradient to state_value,
    where TorchRL's own keeps the two apart); else bootstrap_values=, read only where the
    buffer does not hold them (truncations, the last step), one array fewer per step."""
    wants_gradient = torch.is_grad_enabled() and (state_value.requires_grad or next_state_value.requires_grad)
    if wants_gradient or _next_values_independent(state_value, next_state_value, done, time_dim):
        return {"next_values": _rows(next_state_value, time_dim)}
    return {"bootstrap_values": _rows(next_state_value, time_dim)}


def _checked(floats: dict, *outputs):
    """The outputs, once sure no gradient was dropped: a gradient asked for and none
    carried would be TorchRL's differentiable=True silently turned off."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in floats.values()) and not all(
            t.requires_grad for t in outputs):
        raise RuntimeError("puffadv.integrations.torchrl: inputs require grad, but puffadv's result "
                           "carries no gradient")
    return outputs


def _flags(done, terminated, time_dim):
    terminated = done if terminated is None else terminated
    return _rows(terminated, time_dim), _rows(done & ~terminated, time_dim)


def _gae(own: str, gamma, lmbda, state_value, next_state_value, reward, done, terminated, time_dim: int):
    args = (gamma, lmbda, state_value, next_state_value, reward, done, terminated)
    floats = {"state_value": state_value, "next_state_value": next_state_value, "reward": reward}
    flags = {"done": done} if terminated is None else {"done": done, "terminated": terminated}
    why = _outside(floats, flags, {}, time_dim)
    if why is None:
        why, discounts = _discounts({"gamma": gamma, "lmbda": lmbda}, reward, time_dim)
    if why is not None:
        return _fall_back(own, why, *args, depth=2, time_dim=time_dim)
    terminated_rows, truncated_rows = _flags(done, terminated, time_dim)
    next_keywords = _next_values(state_value, next_state_value, done, time_dim)
    out = puffadv.gae(_rows(reward, time_dim), _rows(state_value, time_dim), terminated_rows, truncated_rows,
                      **next_keywords, gamma=discounts["gamma"], gae_lambda=discounts["lmbda"], time_axis=-1)
    calls["torchrl"] += 1
    return _checked(floats, _back(out.advantages, reward, time_dim), _back(out.returns, reward, time_dim))


def vec_generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, done,
                                       terminated=None, *, time_dim: int = -2):
    """TorchRL's ``vec_generalized_advantage_estimate``: ``(advantage, value_target)``."""
    return _gae("vec_generalized_advantage_estimate", gamma, lmbda, state_value, next_state_value, reward, done,
                terminated, time_dim)


def generalized_advantage_estimate(gamma, lmbda, state_value, next_state_value, reward, done, terminated=None, *,
                                   time_dim: int = -2):
    """TorchRL's ``generalized_advantage_estimate`` (its loop version): the same numbers."""
    return _gae("generalized_advantage_estimate", gamma, lmbda, state_value, next_state_value, reward, done,
                terminated, time_dim)


def _td_lambda(own: str, gamma, lmbda, next_state_value, reward, done, terminated, rolling_gamma, time_dim: int):
    args = (gamma, lmbda, next_state_value, reward, done, terminated, rolling_gamma)
    floats = {"next_state_value": next_state_value, "reward": reward}
    flags = {"done": done} if terminated is None else {"done": done, "terminated": terminated}
    why = _outside(floats, flags, {}, time_dim)
    if why is None and rolling_gamma is False:
        why = "rolling_gamma=False"  # TorchRL's own error for scalar gamma and lambda; no puffadv form per step
    if why is None:
        why, discounts = _discounts({"gamma": gamma, "lmbda": lmbda}, reward, time_dim)
    if why is not None:
        return _fall_back(own, why, *args, depth=2, time_dim=time_dim)
    terminated_rows, truncated_rows = _flags(done, terminated, time_dim)
    following = _rows(next_state_value, time_dim)
    # TD(lambda) reads only next values: next_values= (the lambda-return scanned itself, whose
    # gradient reaches next_state_value); the values argument only makes the advantages, unused.
    out = puffadv.td_lambda_returns(_rows(reward, time_dim), following, terminated_rows, truncated_rows,
                                    next_values=following, gamma=discounts["gamma"], lambda_=discounts["lmbda"],
                                    time_axis=-1, advantages=False)
    calls["torchrl"] += 1
    return _checked(floats, _back(out.returns, reward, time_dim))[0]


def vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated=None,
                                  rolling_gamma=None, *, time_dim: int = -2):
    """TorchRL's ``vec_td_lambda_return_estimate``: the TD(lambda) value target."""
    return _td_lambda("vec_td_lambda_return_estimate", gamma, lmbda, next_state_value, reward, done, terminated,
                      rolling_gamma, time_dim)


def td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done, terminated=None, rolling_gamma=None,
                              *, time_dim: int = -2):
    """TorchRL's ``td_lambda_return_estimate`` (its loop version): the same numbers."""
    return _td_lambda("td_lambda_return_estimate", gamma, lmbda, next_state_value, reward, done, terminated,
                      rolling_gamma, time_dim)


def vtrace_advantage_estimate(gamma, log_pi, log_mu, state_value, next_state_value, reward, done,
                              terminated=None, rho_thresh=1.0, c_thresh=1.0, time_dim: int = -2):
    """TorchRL's ``vtrace_advantage_estimate``: ``(advantage, vs)``."""
    args = (gamma, log_pi, log_mu, state_value, next_state_value, reward, done, terminated, rho_thresh, c_thresh)
    floats = {"log_pi": log_pi, "log_mu": log_mu, "state_value": state_value,
              "next_state_value": next_state_value, "reward": reward}
    flags = {"done": done} if terminated is None else {"done": done, "terminated": terminated}
    for name, clip in (("rho_thresh", rho_thresh), ("c_thresh", c_thresh)):
        # TorchRL differentiates its clips (clamp_max); puffadv reads them as numbers.
        if isinstance(clip, torch.Tensor) and clip.requires_grad and torch.is_grad_enabled():
            return _fall_back("vtrace_advantage_estimate", f"a {name} tensor that requires grad", *args,
                              time_dim=time_dim)
    scalars = {"rho_thresh": _scalar(rho_thresh), "c_thresh": _scalar(c_thresh)}
    why = _outside(floats, flags, scalars, time_dim)
    if why is None:
        why, discounts = _discounts({"gamma": gamma}, reward, time_dim)
    if why is not None:
        return _fall_back("vtrace_advantage_estimate", why, *args, time_dim=time_dim)
    terminated_rows, truncated_rows = _flags(done, terminated, time_dim)
    next_keywords = _next_values(state_value, next_state_value, done, time_dim)
    out = puffadv.vtrace(_rows(reward, time_dim), _rows(state_value, time_dim), terminated_rows, truncated_rows,
                         **next_keywords, importance=_rows((log_pi - log_mu).exp(), time_dim), gamma=discounts["gamma"],
                         lambda_=1.0,
                         rho_clip=scalars["rho_thresh"], c_clip=scalars["c_thresh"],
                         rho_pg_clip=scalars["rho_thresh"], time_axis=-1)
    calls["torchrl"] += 1
    return _checked(floats, _back(out.pg_advantages, reward, time_dim), _back(out.vs, reward, time_dim))


# The functional estimators by TorchRL's names: what the drop-in classes' methods call.
_OURS = {name: globals()[name] for name in __all__ if name[0].islower()}


def _rebound(function):
    """TorchRL's method `function`, its decorators re-applied, with the functional estimators'
    names looked up here: its own code, computing with puffadv."""
    raw = inspect.unwrap(function)
    source = textwrap.dedent(inspect.getsource(function))
    decorators = ast.parse(source).body[0].decorator_list
    namespace = {**vars(_advantages), **_OURS}
    new = types.FunctionType(raw.__code__, namespace, raw.__name__, raw.__defaults__, raw.__closure__)
    new.__kwdefaults__, new.__qualname__, new.__doc__ = raw.__kwdefaults__, raw.__qualname__, raw.__doc__
    for decorator in reversed(decorators):
        new = eval(compile(ast.Expression(decorator), "<torchrl decorator>", "eval"), vars(_advantages))(new)
    return new


def _drop_in(own: type) -> type:
    """A subclass of TorchRL's estimator `own` whose methods that call a functional estimator
    call this module's."""
    methods = {}
    for klass in own.__mro__:
        for name, member in vars(klass).items():
            if name in methods or not inspect.isfunction(member):
                continue
            if set(inspect.unwrap(member).__code__.co_names) & _OURS.keys():
                methods[name] = _rebound(member)
    doc = f"TorchRL's ``{own.__name__}`` computing with puffadv (puffadv.integrations.torchrl).\n\n{own.__doc__}"
    return type(own.__name__, (own,), {**methods, "__doc__": doc, "__module__": __name__})


GAE = _drop_in(_advantages.GAE)
TDLambdaEstimator = _drop_in(_advantages.TDLambdaEstimator)
VTrace = _drop_in(_advantages.VTrace)
