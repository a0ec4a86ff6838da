"""Issue 33: SB3's and CleanRL's episode-start flags as an argument.

episode_starts[t] is set where observation t starts an episode, so the flag at
t + 1 ends step t's episode and last_episode_start (SB3's `dones`, CleanRL's
`next_done`) ends the last step's. Checked against SB3's own loop
(RolloutBuffer.compute_returns_and_advantage, written out in float64), on every
surface, both layouts and leading batch axes."""
from __future__ import annotations

import numpy as np
import pytest

import puffadv

GAMMA, LAM = 0.97, 0.9


def sb3_gae(rewards, values, episode_starts, last_values, dones, gamma=GAMMA, gae_lambda=LAM):
    """Stable-Baselines3's RolloutBuffer.compute_returns_and_advantage on [T, n_envs]
    arrays, in float64: (advantages, returns)."""
    rewards, values, episode_starts = (np.asarray(x, np.float64) for x in (rewards, values, episode_starts))
    last_values, dones = np.asarray(last_values, np.float64), np.asarray(dones, np.float64)
    advantages = np.zeros_like(rewards)
    last_gae_lam = 0.0
    for step in reversed(range(rewards.shape[0])):
        if step == rewards.shape[0] - 1:
            next_non_terminal, next_values = 1.0 - dones, last_values
        else:
            next_non_terminal, next_values = 1.0 - episode_starts[step + 1], values[step + 1]
        delta = rewards[step] + gamma * next_values * next_non_terminal - values[step]
        last_gae_lam = delta + gamma * gae_lambda * next_non_terminal * last_gae_lam
        advantages[step] = last_gae_lam
    return advantages, advantages + values


def _buffer(rng, steps, envs, flag_dtype=np.float32):
    """A rollout as SB3 stores it: [T, n_envs] float32, episode starts at the first
    and last steps of some environments."""
    starts = rng.random((steps, envs)) < 0.1
    starts[0, 0] = starts[-1, -1] = True
    return dict(rewards=rng.standard_normal((steps, envs)).astype(np.float32),
                values=rng.standard_normal((steps, envs)).astype(np.float32),
                episode_starts=starts.astype(flag_dtype),
                last_values=rng.standard_normal(envs).astype(np.float32),
                dones=(rng.random(envs) < 0.5).astype(flag_dtype))


@pytest.mark.parametrize("flag_dtype", [np.float32, np.bool_])
@pytest.mark.parametrize("time_axis", [0, -1])
def test_equal_to_sb3s_loop(rng, target, flag_dtype, time_axis):
    b = _buffer(rng, 64, 5, flag_dtype)
    b["dones"][0] = 1  # the last step of environment 0 ends its episode
    want_adv, want_ret = sb3_gae(b["rewards"], b["values"], b["episode_starts"], b["last_values"], b["dones"])
    lay = (lambda x: x) if time_axis == 0 else (lambda x: np.ascontiguousarray(x.T))
    put = lambda x: target.put(lay(x))
    # SB3's last_values is a torch [n_envs, 1] tensor: [B, 1] is accepted.
    out = puffadv.gae(put(b["rewards"]), put(b["values"]), episode_starts=put(b["episode_starts"]),
                      last_episode_start=target.put(b["dones"]), last_value=target.put(b["last_values"][:, None]),
                      gamma=GAMMA, gae_lambda=LAM, time_axis=time_axis)
    back = (lambda x: target.get(x)) if time_axis == 0 else (lambda x: target.get(x).T)
    np.testing.assert_allclose(back(out.advantages), want_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(back(out.returns), want_ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("function", ["gae", "td_lambda_returns", "vtrace", "discounted_returns", "n_step_returns"])
def test_same_as_the_shifted_terminated(rng, function):
    """Every function that takes them: the call with terminated[t] = episode_starts[t + 1]."""
    b = _buffer(rng, 40, 6)
    terminated = np.concatenate([b["episode_starts"][1:], b["dones"][None]], 0)
    fn = getattr(puffadv, function)
    values = () if function == "discounted_returns" else (b["values"],)
    extra = dict(n=4) if function == "n_step_returns" else {}
    got = fn(b["rewards"], *values, episode_starts=b["episode_starts"], last_episode_start=b["dones"],
             last_value=b["last_values"], time_axis=0, **extra)
    want = fn(b["rewards"], *values, terminated, last_value=b["last_values"], time_axis=0, **extra)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_array_equal(g, w)


def test_truncated_marks_which_ends_are_time_limits(rng):
    b = _buffer(rng, 30, 4)
    ends = np.concatenate([b["episode_starts"][1:], b["dones"][None]], 0) != 0
    truncated = ends & (rng.random(ends.shape) < 0.5)
    truncated[-1, :] = ends[-1, :]  # the last step's end a time limit where it ends
    boot = rng.standard_normal(ends.shape).astype(np.float32)
    got = puffadv.gae(b["rewards"], b["values"], None, truncated, episode_starts=b["episode_starts"],
                      last_episode_start=b["dones"], bootstrap_values=boot, time_axis=0)
    want = puffadv.gae(b["rewards"], b["values"], ends & ~truncated, truncated, bootstrap_values=boot, time_axis=0)
    np.testing.assert_array_equal(got.advantages, want.advantages)


def test_leading_batch_axes(rng):
    b = _buffer(rng, 16, 6)
    shaped = lambda x: x.reshape(16, 3, 2)
    got = puffadv.gae(shaped(b["rewards"]), shaped(b["values"]), episode_starts=shaped(b["episode_starts"]),
                      last_episode_start=b["dones"].reshape(3, 2, 1), last_value=b["last_values"].reshape(3, 2),
                      time_axis=0)
    want = puffadv.gae(b["rewards"], b["values"], episode_starts=b["episode_starts"], last_episode_start=b["dones"],
                       last_value=b["last_values"], time_axis=0)
    np.testing.assert_array_equal(got.advantages.reshape(16, 6), want.advantages)


def test_jax(rng):
    pjax = pytest.importorskip("puffadv.jax")
    b = _buffer(rng, 32, 4)
    want_adv, _ = sb3_gae(b["rewards"], b["values"], b["episode_starts"], b["last_values"], b["dones"])
    out = pjax.gae(b["rewards"], b["values"], episode_starts=b["episode_starts"], last_episode_start=b["dones"],
                   last_value=b["last_values"], gamma=GAMMA, gae_lambda=LAM, time_axis=0)
    np.testing.assert_allclose(np.asarray(out.advantages), want_adv, rtol=1e-5, atol=1e-5)


def test_torch_compile(rng):
    torch = pytest.importorskip("torch")
    b = {k: torch.from_numpy(v) for k, v in _buffer(rng, 32, 4).items()}

    def step(r, v, s, d, last):
        return puffadv.gae(r, v, episode_starts=s, last_episode_start=d, last_value=last, gamma=GAMMA,
                           gae_lambda=LAM, time_axis=0).advantages
    args = (b["rewards"], b["values"], b["episode_starts"], b["dones"], b["last_values"])
    torch.testing.assert_close(torch.compile(step, fullgraph=True)(*args), step(*args), rtol=0, atol=0)


def test_errors(rng):
    b = _buffer(rng, 8, 3)
    r, v, s, d = b["rewards"], b["values"], b["episode_starts"], b["dones"]
    with pytest.raises(ValueError, match=r"^gae\(\) takes either terminated .* or episode_starts .*, not both$"):
        puffadv.gae(r, v, s, episode_starts=s, last_episode_start=d, last_value=b["last_values"], time_axis=0)
    with pytest.raises(ValueError, match=r"^gae\(\) needs last_episode_start with episode_starts"):
        puffadv.gae(r, v, episode_starts=s, last_value=b["last_values"], time_axis=0)
    with pytest.raises(ValueError, match=r"^gae\(\) needs episode_starts with last_episode_start"):
        puffadv.gae(r, v, last_episode_start=d, last_value=b["last_values"], time_axis=0)
    with pytest.raises(TypeError, match=r"^gae\(\) needs time_axis"):
        puffadv.gae(r, v, episode_starts=s, last_episode_start=d, last_value=b["last_values"])
    with pytest.raises(ValueError, match=r"^episode_starts has shape \[8, 2\], but rewards has \[8, 3\]"):
        puffadv.gae(r, v, episode_starts=s[:, :2], last_episode_start=d, last_value=b["last_values"], time_axis=0)
    with pytest.raises(ValueError, match=r"^last_episode_start has shape \[2\]: one flag per row \(3\) expected"):
        puffadv.gae(r, v, episode_starts=s, last_episode_start=d[:2], last_value=b["last_values"], time_axis=0)
    with pytest.raises(TypeError, match=r"^terminated must be an array"):  # as gae(r, v, None) always said
        puffadv.gae(r, v, last_value=b["last_values"], time_axis=0)
