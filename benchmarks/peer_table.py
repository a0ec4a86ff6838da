"""The peer section of bench_conventions.py: puffadv beside rl-triton
(peer_rl_triton.py) on every estimator and shape, checked equal before timing;
device time (CUDA-graph replays, inputs cycling past the L2), eager time
(triton.testing.do_bench), % of the copy bandwidth measured by the caller, the
issues' bars, and the table as markdown and as a chart."""
from __future__ import annotations

import math

import numpy as np
import torch

from bench_gpu import eager_time_us, median_time_us
import peer_rl_triton as peer

DEV = "cuda"

L2_BYTES = 60e6  # H200; inputs cycle through >= 3x this


def do_bench_us(fn):
    """Eager time of one call with the L2 flushed before it (triton.testing.do_bench, median)."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return eager_time_us(fn, repeats=20)
    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1000.0


def graph_us(fn, eager_us):
    """Device time of one call: graph replays of as many calls as fill ~5 ms (2 to 100)."""
    calls = max(2, min(100, int(5000 // max(eager_us, 1.0))))
    return median_time_us(fn, calls, repeats=7)


def peer_benchmark(rl, shapes, copy, estimators=peer.ESTIMATORS, after_shape=None):
    """puffadv beside rl-triton (None: puffadv alone) on every estimator and shape;
    after_shape(table so far) runs after each shape (a run cut short by a time
    limit keeps what it measured)."""
    table = []
    for rows, horizon in shapes:
        n = rows * horizon
        sets = max(1, min(32, math.ceil(3 * L2_BYTES / (n * 24))))
        g = torch.Generator(device=DEV).manual_seed(rows * 7919 + horizon)
        data = [peer.make_inputs(rows, horizon, g) for _ in range(sets)]
        for est in estimators:
            mine = [peer.puffadv_call(est, d) for d in data]
            names = mine[0][1]
            for name in names:
                data[0][name].fill_(float("nan"))  # every element must be written
            mine[0][0]()
            row = dict(shape=f"{rows}x{horizon}", rows=rows, horizon=horizon, estimator=est,
                       bytes=peer.BYTES[est][0], mbytes=n * peer.BYTES[est][0] / 1e6)
            theirs = [peer.rl_triton_call(rl, est, d) for d in data] if rl is not None else [None]
            if theirs[0] is not None:
                got = theirs[0]()
                torch.cuda.synchronize()
                row["rel_err"] = max(peer.relative_error(data[0][name], ref) for name, ref in zip(names, got))
                if not row["rel_err"] <= 1e-5:  # timed anyway; the bars then fail
                    print(f"MISMATCH {est} {rows}x{horizon}: puffadv and rl-triton differ: {row['rel_err']:.2e}")
            else:  # no peer: the same call on the CPU
                torch.cuda.synchronize()
                row["cpu_rel_err"] = peer.cpu_check(est, data[0])
                if not row["cpu_rel_err"] <= 1e-5:
                    print(f"MISMATCH {est} {rows}x{horizon}: puffadv on CUDA and on the CPU differ: "
                          f"{row['cpu_rel_err']:.2e}")
            row["eager_us"] = do_bench_us(mine[0][0])
            row["us"] = graph_us(lambda i: mine[i % sets][0](), row["eager_us"])
            row["pct_copy"] = 100 * n * row["bytes"] / (row["us"] * 1e-6) / 1e9 / copy
            if theirs[0] is not None:
                row["rl_eager_us"] = do_bench_us(theirs[0])
                row["rl_us"] = graph_us(lambda i: theirs[i % sets](), row["rl_eager_us"])
                row["rl_pct_copy"] = 100 * n * peer.BYTES[est][1] / (row["rl_us"] * 1e-6) / 1e9 / copy
                row["speedup"] = row["rl_us"] / row["us"]
            table.append(row)
            print(f"{row['shape']:>12} {est:<26} {row['us']:9.2f} us {row['pct_copy']:6.1f}% (eager {row['eager_us']:.1f})"
                  + (f"   rl-triton {row['rl_us']:9.2f} us {row['rl_pct_copy']:6.1f}% (eager {row['rl_eager_us']:.1f})"
                     f"  x{row['speedup']:.2f}  rel err {row['rel_err']:.1e}" if "rl_us" in row else ""),
                  flush=True)
        del data
        torch.cuda.empty_cache()
        if after_shape is not None:
            after_shape(table)
    return table


def peer_bars(table):
    """The issue's bars on the peer table, each (name, met, value)."""
    bars = []
    for r in table:
        if "rel_err" in r:
            bars.append((f"{r['estimator']} {r['shape']} equal to rl-triton", r["rel_err"] <= 1e-5,
                         f"rel err {r['rel_err']:.1e}"))
        if "cpu_rel_err" in r:
            bars.append((f"{r['estimator']} {r['shape']} equal to puffadv on the CPU", r["cpu_rel_err"] <= 1e-5,
                         f"rel err {r['cpu_rel_err']:.1e}"))
        if r["mbytes"] >= 64:
            floor = 80 if r["estimator"] in peer.FAMILY else 90
            bars.append((f"{r['estimator']} {r['shape']} >= {floor}% of copy BW", r["pct_copy"] >= floor,
                         f"{r['pct_copy']:.1f}%"))
        if (r["rows"], r["horizon"]) in ((8, 131072), (64, 16384)):
            bars.append((f"{r['estimator']} {r['shape']} < 25 us", r["us"] < 25, f"{r['us']:.1f} us"))
        if "speedup" in r and r["estimator"] != "td_lambda returns":
            bars.append((f"{r['estimator']} {r['shape']} <= rl-triton", r["speedup"] >= 1, f"x{r['speedup']:.2f}"))
    speedups = [r["speedup"] for r in table if "speedup" in r and r["estimator"] != "td_lambda returns"
                and r["estimator"] not in peer.FAMILY]
    if speedups:
        geomean = math.exp(sum(map(math.log, speedups)) / len(speedups))
        bars.append(("geomean speedup over rl-triton (GAE both forms, V-trace) >= 1.5x", geomean >= 1.5,
                     f"{geomean:.2f}x"))
    return bars


def peer_markdown(table, bars, meta):
    lines = [f"Measured {meta['date']} on {meta['device']} (torch {meta['torch']}, {meta['peer']}); "
             f"copy bandwidth {meta['copy']:.0f} GB/s (eager 1 GiB device-to-device copy, read + write).", "",
             "| shape | estimator | puffadv device us | eager us | % of copy BW | rl-triton device us | eager us "
             "| % of copy BW | rl-triton / puffadv |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table:
        peer_cols = (f"{r['rl_us']:.2f} | {r['rl_eager_us']:.1f} | {r['rl_pct_copy']:.1f} | {r['speedup']:.2f}x"
                     if "rl_us" in r else "- | - | - | -")
        lines.append(f"| {r['shape']} | {r['estimator']} | {r['us']:.2f} | {r['eager_us']:.1f} | "
                     f"{r['pct_copy']:.1f} | {peer_cols} |")
    lines += ["", "Bars:", ""] + [f"- {n}: {'met' if ok else 'MISSED'} ({v})" for n, ok, v in bars]
    return "\n".join(lines)


def peer_plot(table, path, copy):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    estimators = [e for e in peer.ESTIMATORS if any(r["estimator"] == e for r in table)]
    fig, axes = plt.subplots(len(estimators), 1, figsize=(11, 3.2 * len(estimators)), sharex=True, squeeze=False)
    for ax, est in zip(axes[:, 0], estimators):
        rows = [r for r in table if r["estimator"] == est]
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r["pct_copy"] for r in rows], 0.4, label="puffadv")
        ax.bar(x + 0.2, [r.get("rl_pct_copy", 0) for r in rows], 0.4, label="rl-triton 0.1.3")
        ax.axhline(90, color="k", ls="--", lw=1)
        ax.set_ylabel("% of copy BW")
        ax.set_title(f"{est}, float32 (device time; copy {copy:.0f} GB/s)", fontsize=9)
        ax.set_xticks(x, [r["shape"] for r in rows], rotation=35, ha="right")
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
