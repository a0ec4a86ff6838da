"""Every trainer of puffadv.integrations is optional: importing one whose trainer is
not installed raises an ImportError that names what to install, and importing
puffadv (or puffadv.integrations) imports no trainer. tests/trainers holds the
integrations' own tests (scripts/test.d/56-trainers.sh)."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

TRAINERS = {"sb3": "stable_baselines3", "cleanrl": "torch", "torchrl": "torchrl", "tianshou": "tianshou",
            "skrl": "skrl"}
PACKAGES = {"sb3": "stable-baselines3", "cleanrl": "torch", "torchrl": "torchrl", "tianshou": "tianshou",
            "skrl": "skrl"}


@pytest.mark.parametrize("extra", sorted(TRAINERS))
def test_a_missing_trainer_is_a_clear_import_error(monkeypatch, extra):
    monkeypatch.setitem(sys.modules, TRAINERS[extra], None)  # as if not installed: import raises
    monkeypatch.delitem(sys.modules, f"puffadv.integrations.{extra}", raising=False)
    with pytest.raises(ImportError) as raised:
        importlib.import_module(f"puffadv.integrations.{extra}")
    assert str(raised.value) == (
        f"puffadv.integrations.{extra} needs {PACKAGES[extra]}, which is not installed: "
        f"pip install 'puffadv[{extra}]' (or pip install {PACKAGES[extra]})")


def test_importing_puffadv_imports_no_trainer():
    code = ("import sys, puffadv, puffadv.integrations; "
            f"print(sorted(m for m in {sorted(set(TRAINERS.values()) - {'torch'})!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
