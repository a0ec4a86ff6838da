# Sourced by scripts/test.sh: a virtual environment at .venv with everything
# the tests need (requirements-test.txt), then activated.
PUFF_VENV="${PUFF_VENV:-$PWD/.venv}"
if [ ! -x "${PUFF_VENV}/bin/python" ]; then
  python3 -m venv "${PUFF_VENV}"
fi
# shellcheck disable=SC1091
source "${PUFF_VENV}/bin/activate"
python -m pip install -q --upgrade pip
python -m pip install -q -r requirements-test.txt
export PIP_DISABLE_PIP_VERSION_CHECK=1
