#!/usr/bin/env bash
# Other trainers on puffadv (tests/trainers, puffadv.integrations): Stable-Baselines3,
# CleanRL's loop, TorchRL's value estimators, Tianshou and skrl, each against its own
# estimator on real rollout buffers and in a short CartPole training run through the
# one-line integration.
#
# Builds nothing: the environment's puffadv (10-python.sh's install), torch,
# torchrl and stable-baselines3 (requirements-test.txt) are seen through a .pth file
# from ONE cached virtual environment that adds only the pinned Tianshou and skrl
# (and their pure-Python dependencies). It is remade only when the pins change.
# Measured on a 2-core machine: see the timing line at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
root="$(realpath -m "${PUFF_TRAINERS_BUILD_DIR:-build/trainers}")"
venv="$root/venv"
pins="tianshou==2.0.1 skrl==2.1.1"
unset PYTHONPATH

site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if [ "$(cat "$venv/pins" 2>/dev/null)" != "$pins $site" ]; then
  echo "--- a virtual environment for $pins, over $site"
  rm -rf "$venv"
  python -m venv --without-pip "$venv"
  # A site directory, not a plain path entry: its own .pth files are read too.
  echo "import site; site.addsitedir('$site')" \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/puffadv_ci_env.pth"
  # --no-compile: imports compile what they use. Everything already in $site is kept.
  python -m pip --python "$venv/bin/python" install -q --no-compile $pins
  echo "$pins $site" > "$venv/pins"
fi
"$venv/bin/python" -c 'import puffadv, torch, torchrl, stable_baselines3, tianshou, skrl; print(
    "puffadv", puffadv.__version__, "torch", torch.__version__, "torchrl", torchrl.__version__,
    "stable-baselines3", stable_baselines3.__version__, "tianshou", tianshou.__version__, "skrl", skrl.__version__)'
installed=$SECONDS

echo "--- the trainers on puffadv"
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n "${PUFF_PYTEST_WORKERS:-2}" tests/trainers
echo "56-trainers: $((SECONDS - started)) s in all ($((installed - started)) s for the environment)"
