# Sourced by scripts/test.sh: when ccache is installed (.ci/run installs it),
# every compiler the steps run (g++, nvcc, clang for HIP, the sanitizer builds,
# pip's scikit-build-core builds) goes through it, with its cache beside the
# second-torch venv (PUFF_CI_CACHE, default ~/.cache/puffadv-ci). ccache hashes
# each unit's preprocessed source, compiler and flags, so a hit is the object the
# compiler would make; paths are taken relative to the clone (CCACHE_BASEDIR), so
# a fresh clone at a new path hits what an earlier clone compiled. They are relative
# to the build directory too: two builds share a unit only where their build
# directories sit at the same depth below their sources (the steps use build/NAME, and
# 50-wheel build/wheel inside its unpacked sdist). Headers from the clone's .venv
# (nanobind, torch, jaxlib) are relative to the clone, not the sources, so the units
# that include them are shared only by builds of the clone itself. A machine
# without ccache, or PUFF_CCACHE=0, compiles everything, as before.
if [ "${PUFF_CCACHE:-1}" != 0 ] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-${PUFF_CI_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/puffadv-ci}/ccache}"
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-include_file_mtime,include_file_ctime,time_macros}"
  for lang in C CXX CUDA HIP; do export "CMAKE_${lang}_COMPILER_LAUNCHER=ccache"; done
  ccache --zero-stats >/dev/null
  echo "compiler cache: ccache at ${CCACHE_DIR} ($(ccache --show-stats 2>/dev/null | awk '/Cache size/ {print $4, $5; exit}') used)"
else
  echo "compiler cache: none (ccache not installed or PUFF_CCACHE=0): every unit compiles"
fi
