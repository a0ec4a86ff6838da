# Sourced by scripts/test.sh: a virtual environment at .venv with everything
# the tests need (requirements-test.txt), then activated.
PUFF_VENV="${PUFF_VENV:-$PWD/.venv}"
if [ ! -x "${PUFF_VENV}/bin/python" ]; then
  python3 -m venv "${PUFF_VENV}"
fi
# shellcheck disable=SC1091
source "${PUFF_VENV}/bin/activate"
python -m pip install -q --upgrade pip
# --no-compile: byte-compiling torch, jax and the rest at install costs minutes on
# 2 cores; Python compiles (and caches) what the tests import, when they import it.
python -m pip install -q --no-compile -r requirements-test.txt
export PIP_DISABLE_PIP_VERSION_CHECK=1
