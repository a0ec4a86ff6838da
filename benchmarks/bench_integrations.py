"""Each trainer's own advantage estimator against puffadv.integrations' one line,
on the shapes those trainers use (docs/integrations.md's table).

Stable-Baselines3 (RolloutBuffer.compute_returns_and_advantage), CleanRL's
ppo.py loop, TorchRL's vectorised GAE and TD(lambda) (its defaults), Tianshou's
compute_episodic_return (numba) and skrl's compute_gae, each on the same random
buffers as puffadv's integration, CPU, one thread. Every case is timed in turn,
round after round, and keeps its fastest round (the machine may be shared);
`--clock cpu` counts process CPU time instead of wall time. The trainers that
are not installed are left out.

    python benchmarks/bench_integrations.py [--rounds 15] [--clock wall|cpu]
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import time

import numpy as np
import torch


def _cleanrl_loop(rewards, values, dones, next_done, next_value, gamma, gae_lambda):
    # CleanRL's ppo.py, its GAE block (tests/trainers/test_cleanrl.py holds the same copy).
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal, nextvalues = 1.0 - next_done, next_value
        else:
            nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def cases(rng):
    """(trainer, shape, its own call, puffadv's call), each a no-argument function."""
    out = []
    if importlib.util.find_spec("stable_baselines3"):
        import gymnasium as gym
        from stable_baselines3.common.buffers import RolloutBuffer

        from puffadv.integrations import sb3
        for T, n in ((2048, 1), (2048, 4), (128, 1024)):
            own = RolloutBuffer(T, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), n_envs=n)
            own.rewards[:], own.values[:] = rng.standard_normal((2, T, n))
            own.episode_starts[:] = rng.random((T, n)) < 0.02
            ours, last, dones = copy.deepcopy(own), torch.randn(n, 1), np.zeros(n, dtype=bool)
            out.append(("Stable-Baselines3", f"{T}x{n}",
                        lambda own=own, last=last, dones=dones: own.compute_returns_and_advantage(last, dones),
                        lambda ours=ours, last=last, dones=dones: sb3.compute_returns_and_advantage(ours, last, dones)))
    from puffadv.integrations import cleanrl
    for T, n in ((128, 4), (2048, 64)):
        r, v = torch.randn(T, n), torch.randn(T, n)
        d, nd, nv = (torch.rand(T, n) < 0.02).float(), torch.zeros(n), torch.randn(1, n)
        out.append(("CleanRL", f"{T}x{n}", lambda a=(r, v, d, nd, nv): _cleanrl_loop(*a, 0.99, 0.95),
                    lambda a=(r, v, d, nd, nv): cleanrl.gae(*a, 0.99, 0.95)))
    if importlib.util.find_spec("torchrl"):
        import torchrl.objectives.value.functional as own_f

        from puffadv.integrations import torchrl as ours_f
        for B, T in ((8, 128), (4096, 128)):
            done = torch.rand(B, T, 1) < 0.02
            r, v = torch.randn(B, T, 1), torch.randn(B, T, 1)
            nv = torch.cat((v[:, 1:], torch.randn(B, 1, 1)), 1)
            args = (0.99, 0.95, v, nv, r, done, done)
            out.append(("TorchRL GAE", f"{B}x{T}x1", lambda a=args: own_f.vec_generalized_advantage_estimate(*a),
                        lambda a=args: ours_f.vec_generalized_advantage_estimate(*a)))
            targs = (0.99, 0.95, torch.randn(B, T, 1), r, done, done)
            out.append(("TorchRL TD(lambda)", f"{B}x{T}x1", lambda a=targs: own_f.vec_td_lambda_return_estimate(*a),
                        lambda a=targs: ours_f.vec_td_lambda_return_estimate(*a)))
    if importlib.util.find_spec("tianshou"):
        from tianshou.algorithm.algorithm_base import Algorithm
        from types import SimpleNamespace

        from tianshou.data import Batch

        from puffadv.integrations import tianshou
        for n in (2048, 65536):
            ends = rng.random(n) < 0.02
            batch = Batch(rew=rng.standard_normal(n), terminated=ends, truncated=np.zeros(n, bool))
            # What compute_episodic_return reads of a buffer: its flags and its unfinished episode.
            buffer = SimpleNamespace(terminated=ends, unfinished_index=lambda n=n: np.array([n - 1]))
            idx = np.arange(n)
            vs_, vs = torch.randn(n), torch.randn(n)
            Algorithm.compute_episodic_return(batch, buffer, idx, vs_, vs)  # numba's compilation, untimed
            out.append(("Tianshou", f"{n}", lambda a=(batch, buffer, idx, vs_, vs): Algorithm.compute_episodic_return(*a),
                        lambda a=(batch, buffer, idx, vs_, vs): tianshou.compute_episodic_return(*a)))
    if importlib.util.find_spec("skrl"):
        import skrl.agents.torch.ppo.ppo as skrl_ppo

        from puffadv.integrations import skrl
        for T, n in ((16, 4), (1024, 64)):
            kw = dict(rewards=torch.randn(T, n, 1), terminated=torch.rand(T, n, 1) < 0.02,
                      truncated=torch.zeros(T, n, 1, dtype=torch.bool), values=torch.randn(T, n, 1),
                      last_values=torch.randn(n, 1))
            out.append(("skrl", f"{T}x{n}x1", lambda kw=kw: skrl_ppo.compute_gae(**kw),
                        lambda kw=kw: skrl.compute_gae(**kw)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    args = parser.parse_args()
    torch.set_num_threads(1)
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    table = cases(np.random.default_rng(0))
    best = {}
    for _ in range(args.rounds):
        for i, (_, _, own, ours) in enumerate(table):
            for j, call in enumerate((own, ours)):
                calls, started = 0, clock()
                while True:  # at least 2 ms of calls per round
                    call()
                    calls += 1
                    elapsed = clock() - started
                    if elapsed > 2e-3:
                        break
                best[i, j] = min(best.get((i, j), float("inf")), elapsed / calls)
    print(f"{'trainer':<20} {'shape':<12} {'its own':>12} {'puffadv':>12} {'speed-up':>9}   ({args.clock} clock)")
    for i, (trainer, shape, _, _) in enumerate(table):
        own, ours = best[i, 0], best[i, 1]
        print(f"{trainer:<20} {shape:<12} {_fmt(own):>12} {_fmt(ours):>12} {own / ours:>8.1f}x")


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
