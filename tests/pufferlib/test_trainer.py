"""PufferLib's own trainer (PuffeRL) trains puffer_pysquared on puffadv, for both
packages a user may have, with no change to PufferLib's code and no import of
puffadv in the training script: only the environment's import hook."""
from __future__ import annotations

import importlib.util

from conftest import puffadv_lines

STEPS = 8192  # 4 epochs of 2048 steps: 8 advantage calls (one per epoch, one per minibatch)
EXPECTED_CALLS = 2 * STEPS // 2048
# float32 kernel vs float64 reference, over a 64-step recursion with |advantages| ~ 1.
TOLERANCE = 1e-5


def check_trained_on_puffadv(report, stderr):
    assert report["steps"] >= STEPS and report["epochs"] == STEPS // 2048, report
    assert report["calls"] == {"puffadv": EXPECTED_CALLS}, report
    checked = report["checked_call"]
    assert checked["namespace"] == "puffadv" and checked["shape"] == [32, 64], checked
    assert checked["params"] == [0.95, 0.9, 1.0, 1.0], checked
    assert checked["max_abs_error"] <= TOLERANCE * checked["scale"], checked
    assert "(puffadv)" in report["extension"], report  # `from pufferlib import _C` gave the stand-in
    said = puffadv_lines(stderr)
    assert len(said) == 1, stderr  # once per process
    return said[0]


def test_the_import_hook_is_installed():
    """The documented step (python -m puffadv.pufferlib_compat install) ran in this venv."""
    assert importlib.util.find_spec("_puffadv_pufferlib_hook") is not None


def test_pufferlib_3_0_0_from_its_sdist_trains_on_puffadv(train, sdist):
    report, stderr, seconds = train(STEPS, pythonpath=[sdist])
    assert report["pufferlib"] == 3.0 and report["pufferlib_file"].startswith(str(sdist))
    said = check_trained_on_puffadv(report, stderr)
    assert said.startswith("puffadv: no PufferLib extension (pufferlib._C) was found; "
                           "puffadv's kernel serves torch.ops.pufferlib.compute_puff_advantage ")
    print(f"PufferLib 3.0.0: {report['steps']} steps, {seconds:.1f} s in all "
          f"(import {report['seconds']['import']:.1f} s, train {report['seconds']['train']:.1f} s)")


def test_pufferlib_core_trains_on_puffadv_in_place_of_its_unloadable_extension(train):
    report, stderr, seconds = train(STEPS)
    assert report["pufferlib"] == "3.0.23", report
    said = check_trained_on_puffadv(report, stderr)
    # The wheel's extension needs libcudart.so.12 (and was built for torch 2.9.0).
    assert said.startswith("puffadv: PufferLib's extension ") and " cannot be loaded here (" in said
    assert "_C.cpython-311-x86_64-linux-gnu.so" in said and "ImportError" in said
    assert "Could not load pufferlib._C" not in stderr  # pufferlib-core's own complaint
    print(f"pufferlib-core 3.0.23: {report['steps']} steps, {seconds:.1f} s in all "
          f"(import {report['seconds']['import']:.1f} s, train {report['seconds']['train']:.1f} s)")


def test_pufferlibs_own_loadable_extension_stays_and_is_named(train, tree_with_extension):
    """Where PufferLib's extension loads, its kernel serves the trainer, and puffadv says so."""
    report, stderr, _ = train(2048, pythonpath=[tree_with_extension])
    assert report["calls"] == {"pufferlib": 2}, report
    checked = report["checked_call"]
    assert checked["namespace"] == "pufferlib"
    assert checked["max_abs_error"] <= TOLERANCE * checked["scale"], checked
    said = puffadv_lines(stderr)
    assert said == [f"puffadv: PufferLib's own extension {tree_with_extension}/pufferlib/_C.so "
                    "is loaded; its kernel serves torch.ops.pufferlib.compute_puff_advantage "
                    "(CPU tensors), not puffadv's."], stderr
