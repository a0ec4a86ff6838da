#!/usr/bin/env bash
# Run where there is a network (not on the GPU machine, which has none): fills the
# git-ignored folder that scripts/gpu/55-pufferlib-cuda.sh needs there, carried
# along by the device tool (carry [".gpu"]; ~26 MB of its 64 MiB):
#   .gpu/pufferlib/pufferlib-3.0.0/  PufferLib 3.0.0's unpacked sdist, as
#       scripts/test.d/55-pufferlib.sh fetched it (sha256 pinned there), minus
#       pufferlib/resources/ (72 MB of art for its C environments) and the Raylib
#       copy its setup.py downloaded; puffer_pysquared needs neither.
#   .gpu/pufferlib/wheels/  PufferLib's pure-Python dependencies (its setup.py's
#       pins: numpy<2, gym<=0.23, gymnasium<=0.29.1; psutil, pynvml, rich,
#       rich_argparse, pyro-ppl) for CPython 3.12 on manylinux x86_64; gym 0.23.0
#       exists only as an sdist, so it is built into a wheel here.
# Usage: scripts/gpu/prepare_pufferlib.sh [DEST (default .gpu/pufferlib)] [SDIST_TREE]
set -euo pipefail
cd "$(dirname "$0")/../.."
dest="${1:-.gpu/pufferlib}"
sdist="${2:-build/pufferlib/pufferlib-3.0.0}"
[ -f "$sdist/pufferlib/pufferl.py" ] && grep -qx "Version: 3.0.0" "$sdist/PKG-INFO" || {
  echo "prepare_pufferlib: no PufferLib 3.0.0 tree at $sdist; scripts/test.d/55-pufferlib.sh fetches one" >&2
  exit 1
}
rm -rf "$dest/pufferlib-3.0.0" "$dest/wheels" && mkdir -p "$dest/wheels"
(cd "$(dirname "$sdist")" && tar -c --exclude "pufferlib-3.0.0/pufferlib/resources" \
   --exclude "pufferlib-3.0.0/raylib-5.5_linux_amd64" --exclude "__pycache__" \
   --exclude "*.so" pufferlib-3.0.0) | tar -x -C "$dest"
mkdir -p "$dest/pufferlib-3.0.0/pufferlib/resources"  # PufferLib links it into the working directory
echo "Left out of the carried copy: 72 MB of art for PufferLib's C environments." \
  > "$dest/pufferlib-3.0.0/pufferlib/resources/LEFT_OUT.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$dest/wheels" "numpy==1.26.4" "gymnasium==0.29.1" psutil pynvml nvidia-ml-py rich rich_argparse \
  markdown-it-py mdurl pygments "pyro-ppl==1.9.2" pyro-api opt_einsum tqdm cloudpickle gym_notices \
  farama-notifications typing_extensions
python3 -m pip wheel -q --no-deps "gym==0.23.0" -w "$dest/wheels"
du -sh "$dest"
