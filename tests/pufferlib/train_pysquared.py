"""Trains PufferLib's puffer_pysquared with PufferLib's own trainer (PuffeRL) on
the CPU (or on CUDA: the trainer's config device=cuda) and reports, as JSON, which advantage kernels it called.

Run with whichever `pufferlib` is importable (PufferLib 3.0.0's sdist tree on
PYTHONPATH, or the pufferlib-core wheel). This script never imports puffadv:
the import hook that `python -m puffadv.pufferlib_compat install` put into the
environment is the only thing that connects the two, as for a PufferLib user. Counts come from a TorchDispatchMode around the training phase,
which sees the operator each advantage call finally runs: puffadv's, or
PufferLib's own. The first call's inputs and output are compared with the
float64 reference of tests/python/reference.py.

    python train_pysquared.py PYSQUARED_PY STEPS OUT_JSON [DEVICE: cpu (default) | cuda]
"""
import contextlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from reference import puff_advantage as reference_puff_advantage  # noqa: E402

# PufferLib 3.0.0's config/default.ini with config/ocean/pysquared.ini on top, and
# the settings of the trial: 16 envs, batch 2048, horizon 64, adam, CPU.
TRAIN = dict(
    seed=42, torch_deterministic=True, cpu_offload=False, device="cpu", optimizer="adam",
    anneal_lr=True, precision="float32", learning_rate=0.05, gamma=0.95, gae_lambda=0.90,
    update_epochs=1, clip_coef=0.2, vf_coef=2.0, vf_clip_coef=0.2, max_grad_norm=1.5,
    ent_coef=0.001, adam_beta1=0.95, adam_beta2=0.999, adam_eps=1e-12, data_dir="experiments",
    checkpoint_interval=200, batch_size=2048, minibatch_size=2048, max_minibatch_size=32768,
    bptt_horizon=64, compile=False, compile_mode="max-autotune-no-cudagraphs",
    compile_fullgraph=True, vtrace_rho_clip=1.0, vtrace_c_clip=1.0, prio_alpha=0.8,
    prio_beta0=0.2, use_rnn=False, env="puffer_pysquared", name="pufferai", project="ablations")
NUM_ENVS = 16


class AdvantageCalls(TorchDispatchMode):
    """Counts the advantage operators that run, by namespace and device; keeps the first call."""

    def __init__(self):
        super().__init__()
        self.counts = {}
        self.devices = {}
        self.first = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        if name.endswith("::compute_puff_advantage"):
            namespace = name.split("::")[0]
            self.counts[namespace] = self.counts.get(namespace, 0) + 1
            device = str(args[4].device.type)
            self.devices[device] = self.devices.get(device, 0) + 1
            if self.first is None:
                inputs = [np.array(a.detach().cpu(), dtype=np.float64) for a in args[:4]]
                result = func(*args, **kwargs)
                self.first = (namespace, inputs, list(args[5:9]),
                              np.array(args[4].detach().cpu(), dtype=np.float64))
                return result
        return func(*args, **kwargs)


def load_pysquared(path):
    spec = importlib.util.spec_from_file_location("pysquared", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PySquared


def main(pysquared_path, steps, out_path, device="cpu"):
    started = time.perf_counter()
    out_path, pysquared_path = Path(out_path).resolve(), Path(pysquared_path).resolve()
    # PufferLib 3.0.0 links `resources` into the working directory at import, and the
    # trainer saves its checkpoint under `experiments/`: both go to a scratch folder.
    scratch = tempfile.mkdtemp(prefix="puffadv-pufferlib-")
    os.chdir(scratch)
    torch.set_num_threads(1)  # 16 tiny envs: threads only contend on a shared 2-core machine
    import pufferlib
    import pufferlib.models
    import pufferlib.pufferl as pufferl  # PufferLib's trainer: imports pufferlib._C
    import pufferlib.vector
    imported = time.perf_counter()

    vecenv = pufferlib.vector.make(load_pysquared(pysquared_path), num_envs=NUM_ENVS,
                                   backend=pufferlib.vector.Serial, seed=42)
    policy = pufferlib.models.Default(vecenv.driver_env, hidden_size=128).to(device)
    calls = AdvantageCalls()
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # the dashboard
        trainer = pufferl.PuffeRL(dict(TRAIN, total_timesteps=steps, device=device), vecenv, policy)
        while trainer.global_step < steps:
            trainer.evaluate()
            with calls:
                trainer.train()
        trainer.close()  # PufferLib's end of training: stops its monitor thread, saves
    trained = time.perf_counter()

    namespace, inputs, params, output = calls.first
    reference = reference_puff_advantage(*inputs, *params)
    scale = max(1.0, float(np.abs(reference).max()))
    report = {
        "pufferlib": getattr(pufferlib, "__version__", None),
        "pufferlib_file": pufferlib.__file__,
        "extension": repr(sys.modules.get("pufferlib._C")),
        "steps": int(trainer.global_step),
        "epochs": int(trainer.epoch),
        "calls": calls.counts,
        "call_devices": calls.devices,
        "device": device,
        "checked_call": {"namespace": namespace, "shape": list(output.shape),
                         "params": params,
                         "max_abs_error": float(np.abs(output - reference).max()),
                         "scale": scale},
        "seconds": {"import": imported - started, "train": trained - imported},
    }
    out_path.write_text(json.dumps(report, indent=1))
    os.chdir(ROOT)
    shutil.rmtree(scratch)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
