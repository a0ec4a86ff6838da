#!/usr/bin/env bash
# GPU machine: which C++ runtimes a process with every framework loaded holds,
# and whether an argument error (which formats numbers) survives there. An
# earlier run crashed formatting such a message inside libpuffadv.so.
set -uo pipefail
OUT="${OUT:-/tmp/puffadv-gpu-out}"
cd "$(dirname "$0")/../.."
python3 - <<'PY' 2>&1 | tee "$OUT/runtime-diagnosis.txt"
import numpy as np, torch, cupy, jax, puffadv
maps = open("/proc/self/maps").read().splitlines()
runtimes = sorted({line.split()[-1] for line in maps if "libstdc++" in line or "libc++" in line})
print("C++ runtimes mapped:", runtimes)
print("libpuffadv:", sorted({l.split()[-1] for l in maps if "libpuffadv" in l}))
v = np.ones((3, 4), np.float32)
for bad in (dict(rewards=np.ones((3, 5), np.float32)), dict(gamma=float("nan"))):
    try:
        puffadv.compute_puff_advantage(**{"values": v, "rewards": v, "dones": v, "importance": v, **bad})
    except (TypeError, ValueError) as e:
        print("error message OK:", e)
PY
