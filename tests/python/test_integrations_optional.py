"""Every trainer of puffadv.integrations is optional: importing one whose trainer is
not installed raises an ImportError that names what to install, and importing
puffadv (or puffadv.integrations) imports no trainer. tests/trainers holds the
integrations' own tests (scripts/test.d/56-trainers.sh)."""
from __future__ import annotations

import subprocess
import sys

import pytest

TRAINERS = {"sb3": "stable_baselines3", "cleanrl": "torch", "torchrl": "torchrl", "tianshou": "tianshou",
            "skrl": "skrl"}
PACKAGES = {"sb3": "stable-baselines3", "cleanrl": "torch", "torchrl": "torchrl", "tianshou": "tianshou",
            "skrl": "skrl"}


@pytest.mark.parametrize("extra", sorted(TRAINERS))
def test_a_missing_trainer_is_a_clear_import_error(extra):
    # In a fresh interpreter: a submodule of the trainer that another test imported into this
    # process would be found in sys.modules, and the import would not fail.
    code = (f"import sys; sys.modules[{TRAINERS[extra]!r}] = None\n"
            "try:\n"
            f"    import puffadv.integrations.{extra}\n"
            "except ImportError as error:\n"
            "    print(error)\n"
            "else:\n"
            "    print('DID NOT RAISE')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == (
        f"puffadv.integrations.{extra} needs {PACKAGES[extra]}, which is not installed: "
        f"pip install 'puffadv[{extra}]' (or pip install {PACKAGES[extra]})")


def test_importing_puffadv_imports_no_trainer():
    code = ("import sys, puffadv, puffadv.integrations; "
            f"print(sorted(m for m in {sorted(set(TRAINERS.values()) - {'torch'})!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
