"""The before/after table of scripts/gpu/validate.sh's bench stage: puffadv's
device time per cell of each grid, from a build of the tree under test (after)
and one of an earlier commit (before), measured in the same device call by the
same benchmark scripts (this checkout's), so that only the library differs.

Each folder holds what the stage wrote for one build: std*.json and family*.json
(benchmarks/bench_conventions.py --sections peers --json) and puff*.txt (the
output of benchmarks/bench_gpu.py --quick, which writes no JSON). With several
rounds (std.1.json, std.2.json, ...) a cell's time is the least of its rounds:
noise only ever adds time. The speed bar (issue 28): every cell within 3 % of
its before time.

    python scripts/gpu/compare_bench.py AFTER_DIR BEFORE_DIR [--markdown out.md] [--tolerance 3]
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

PUFF_LINE = re.compile(r"^\s*(\d+)x(\d+)\s+([0-9.]+) us")


def device_times(folder: Path) -> dict:
    """(section, shape, estimator) -> least device time in us over the folder's rounds."""
    times: dict = {}

    def keep(key, us):
        times[key] = min(us, times.get(key, float("inf")))

    for section in ("std", "family"):
        for path in sorted(folder.glob(f"{section}*.json")):
            for row in json.loads(path.read_text()).get("peers", []):
                keep((section, row["shape"], row["estimator"]), row["us"])
    for path in sorted(folder.glob("puff*.txt")):
        for line in path.read_text().splitlines():
            m = PUFF_LINE.match(line)
            if m:
                keep(("puff", f"{m[1]}x{m[2]}", "puff advantage"), float(m[3]))
    return times


def shape_key(shape: str):
    rows, horizon = (int(n) for n in shape.split("x"))
    return rows * horizon, rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("after", type=Path)
    parser.add_argument("before", type=Path)
    parser.add_argument("--markdown", help="write the table here too")
    parser.add_argument("--tolerance", type=float, default=3.0, help="percent (default 3)")
    args = parser.parse_args(argv)
    after, before = device_times(args.after), device_times(args.before)
    common = sorted(after.keys() & before.keys(), key=lambda k: (k[0], k[2], shape_key(k[1])))
    lines = [f"puffadv device time, before ({args.before}) and after ({args.after}): the least of each "
             f"cell's rounds; bar: after within {args.tolerance:g} % of before.", "",
             "| grid | estimator | shape | before us | after us | after / before | |",
             "|---|---|---|---:|---:|---:|---|"]
    slower = 0
    for key in common:
        ratio = after[key] / before[key]
        over = ratio > 1 + args.tolerance / 100
        slower += over
        lines.append(f"| {key[0]} | {key[2]} | {key[1]} | {before[key]:.2f} | {after[key]:.2f} | "
                     f"{ratio:.3f} | {'SLOWER' if over else 'ok'} |")
    only = sorted((after.keys() ^ before.keys()), key=str)
    lines += ["", f"{len(common)} cells compared; {slower} slower than before by more than "
                  f"{args.tolerance:g} %." + (f" Measured on one side only: {only}" if only else "")]
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 1 if slower or not common else 0


if __name__ == "__main__":
    raise SystemExit(main())
