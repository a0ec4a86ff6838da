#!/usr/bin/env bash
# PufferLib's own trainer on puffadv (tests/pufferlib): PufferLib 3.0.0 (its sdist,
# which pip cannot install here: setup.py downloads Raylib) and pufferlib-core
# 3.0.23 (a wheel whose extension needs libcudart.so.12) each train puffer_pysquared
# on the CPU through the import hook of `python -m puffadv.pufferlib_compat install`,
# with no change to PufferLib's code; then every import order, with PufferLib's own
# CPU extension built from its sdist, must end without an abort.
#
# A virtual environment of its own (PufferLib 3.0.0 pins numpy<2), made fresh:
# torch 2.13.0 (the CPU wheel), PufferLib's pure-Python dependencies, puffadv's
# wheel repackaged from 10-python.sh's build folder (same options: nothing is
# recompiled). Measured on a 2-core machine: see the timing line at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
started=$SECONDS
root="$(realpath -m "${PUFF_PUFFERLIB_BUILD_DIR:-build/pufferlib}")"
venv="$root/venv"
sdist="$root/pufferlib-3.0.0"
mkdir -p "$root"
unset PYTHONPATH

echo "--- puffadv's wheel, from 10-python.sh's build"
rm -rf "$root/wheel"
# PUFF_PUFFERLIB_WHEEL_ARGS: another build folder and its options (default: 10-python.sh's).
read -r -a wheel_args <<< "${PUFF_PUFFERLIB_WHEEL_ARGS:--C build-dir=build/test-wheel}"
python -m pip wheel -q --no-build-isolation --no-deps "${wheel_args[@]}" -w "$root/wheel" .

echo "--- a fresh virtual environment"
rm -rf "$venv"
python -m venv "$venv"

if [ ! -f "$sdist/pufferlib/pufferl.py" ]; then
  echo "--- PufferLib 3.0.0's sdist"
  # pip fetches the sdist, checks the pinned hash and unpacks it, then fails to read
  # its metadata: setup.py imports numpy, which this fresh environment lacks (were
  # it there, setup.py would next try to download Raylib). The unpacked tree is what
  # a PufferLib user puts on PYTHONPATH; --no-clean keeps it.
  fetch="$root/fetch"
  rm -rf "$fetch" && mkdir -p "$fetch"
  echo "pufferlib==3.0.0 --hash=sha256:7df3a3e3f5f894d78d2a1f5374097890aec01473183e748abefe4f3faa10eaa9" \
    > "$fetch/requirement.txt"
  TMPDIR="$fetch" "$venv/bin/pip" download --no-deps --no-build-isolation --no-clean \
    --no-binary :all: -r "$fetch/requirement.txt" -d "$fetch/download" > "$fetch/pip.log" 2>&1 || true
  unpacked="$(find "$fetch" -maxdepth 3 -name PKG-INFO -path '*/pufferlib_*/PKG-INFO' -printf '%h\n' | head -1)"
  if [ -z "$unpacked" ] || ! grep -qx "Version: 3.0.0" "$unpacked/PKG-INFO" \
     || ! grep -q "No module named 'numpy'" "$fetch/pip.log"; then
    echo "55-pufferlib: pip did not fetch and unpack PufferLib 3.0.0 as expected:" >&2
    tail -40 "$fetch/pip.log" >&2
    exit 1
  fi
  mv "$unpacked" "$sdist"
  rm -rf "$fetch"
fi

echo "--- torch, PufferLib's dependencies, puffadv, pufferlib-core"
# --no-compile: byte-compiling torch's files costs ~45 s here; imports compile what they use.
"$venv/bin/pip" install -q --no-compile torch==2.13.0 "numpy<2" "gym<=0.23" "gymnasium<=0.29.1" \
  psutil rich rich_argparse pyro-ppl pytest ninja
"$venv/bin/pip" install -q --no-compile --no-deps "$root"/wheel/puffadv-*.whl pufferlib-core==3.0.23
installed=$SECONDS

echo "--- the documented step"
"$venv/bin/python" -m puffadv.pufferlib_compat install

echo "--- PufferLib's trainer on puffadv"
PUFFADV_PUFFERLIB_SDIST="$sdist" "$venv/bin/python" -m pytest -q -s -p no:cacheprovider tests/pufferlib
echo "55-pufferlib: $((SECONDS - started)) s in all ($((installed - started)) s for the environment)"
