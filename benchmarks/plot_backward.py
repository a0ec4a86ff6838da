"""The chart of issue 30's benchmark, from bench_backward.py's --out file:
left, each estimator's backward time over its forward's (device time, CUDA graphs; the
1.3x bar drawn); right, GAE's forward + backward eager time (what a training loop
sees) of puffadv and of each peer, log scale.

    python benchmarks/plot_backward.py results.md docs/backward.png
"""
from __future__ import annotations

import sys


def _rows(text: str, header_start: str):
    """The cells of the markdown table whose header begins with `header_start`."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(header_start):
            out = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                out.append([c.strip() for c in row.strip("|").split("|")])
            return out
    return []


def _number(cell: str):
    try:
        return float(cell)
    except ValueError:
        return None


def main(source: str, target: str) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    text = open(source).read()
    ratios = {}  # estimator -> {shape: bwd / fwd}
    for shape, name, _, _, ratio, *_ in _rows(text, "| shape | estimator | fwd device us"):
        if _number(ratio) is not None:
            ratios.setdefault(name, {})[shape] = _number(ratio)
    eager = {}  # implementation -> {shape: fwd+bwd eager us}
    for shape, label, _, _, time_eager, _ in _rows(text, "| shape | implementation |"):
        if _number(time_eager) is not None:
            eager.setdefault(label, {})[shape] = _number(time_eager)
    shapes = list(dict.fromkeys(s for d in (*ratios.values(), *eager.values()) for s in d))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    width = 0.8 / max(1, len(ratios))
    for i, (name, by_shape) in enumerate(ratios.items()):
        left.bar([j + i * width for j in range(len(shapes))], [by_shape.get(s, 0) for s in shapes], width, label=name)
    left.axhline(1.3, color="k", linestyle="--", linewidth=1, label="issue 30's bar (1.3x)")
    left.set_yscale("log")
    left.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], shapes)
    left.set_ylabel("backward / forward, device time")
    left.set_title("puffadv: backward over forward (H200, float32)")
    left.legend(fontsize=7)
    width = 0.8 / max(1, len(eager))
    for i, (label, by_shape) in enumerate(eager.items()):
        right.bar([j + i * width for j in range(len(shapes))], [by_shape.get(s, 0) for s in shapes], width,
                  label=label)
    right.set_yscale("log")
    right.set_xticks([j + 0.4 - width / 2 for j in range(len(shapes))], shapes)
    right.set_ylabel("GAE forward + backward, eager us (lower is better)")
    right.set_title("GAE forward + backward beside peers")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
