"""GPU check and benchmark of the standard conventions and the reduced-precision
puff advantage (issue 6), run by scripts/gpu/60-conventions.sh.

1. GPU == CPU: every estimator (gae, td_lambda_returns, vtrace, the puff
   advantage) on the same random episodes, computed on the GPU and on the host,
   over dtypes (float32, float64, bfloat16, float16 inputs; bool/uint8/float
   flags), layouts ([B, T], time-major [T, B], sliced), bootstraps, ratios and
   fused outputs. Exits non-zero on a mismatch.
2. Peers: every estimator (GAE with last_value, GAE with truncations and
   bootstrap_values, TD(lambda) returns, V-trace vs + pg; float32) on every
   SPEC section 5 grid shape, puffadv beside rl-triton on the same inputs and
   semantics (peer_rl_triton.py), checked equal before timing. Per cell: device
   time (median of CUDA-graph replays, inputs cycling past the L2), eager time
   (triton.testing.do_bench: one call at a time, L2 flushed before each), % of
   the copy bandwidth (bytes each side really moves) and rl-triton's time over
   puffadv's. rl-triton is found by --rl-triton PATH or PUFFADV_RL_TRITON.
   `--estimators family` times issue 20's estimators instead (discounted
   returns, Retrace, Q(lambda), episodic sums, eligibility traces beside
   rl-triton; n-step returns alone), against an 80 % bandwidth bar.
3. Dtypes: float32 against bfloat16 inputs at large sizes. Two times per case:
   the GPU time of one call (graph replay, as above) and the eager time of one
   call (CUDA events around a single Python call: host overhead included). The
   bar, on GPU time: bf16 inputs take <= 0.65x the float32 time (puff
   advantage; GAE with float flags).
The copy bandwidth is measured in the same run (an eager 1 GiB device-to-device copy).

    python benchmarks/bench_conventions.py [--json out.json] [--quick] [--sections check,peers,dtypes]
        [--rl-triton PATH] [--estimators family|NAME,...] [--shapes RxH,...] [--markdown out.md] [--plot out.png]
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys

import numpy as np
import torch

import puffadv

sys.path.insert(0, "tests/python")
import reference as ref  # noqa: E402
from bench_gpu import GRID, eager_time_us, median_time_us  # noqa: E402  (this folder is on sys.path)
import peer_rl_triton as peer  # noqa: E402

DEV = "cuda"
GAMMA, LAM, RHO, C, RHO_PG = 0.97, 0.9, 1.5, 0.8, 1.2


def rel(a, b):
    a = a.double().cpu().numpy() if torch.is_tensor(a) else np.asarray(a, np.float64)
    b = b.double().cpu().numpy() if torch.is_tensor(b) else np.asarray(b, np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    a, b = np.where(both_nan, 0, a), np.where(both_nan, 0, b)
    return ref.relative_error(a, b)


def estimate(kind, arrays, **kw):
    sums = dict(abs_sums=True, sums=True, square_sums=True)
    if kind == "gae":
        return tuple(puffadv.gae(*arrays, **sums, **kw))
    if kind == "td_lambda":
        kw["lambda_"] = kw.pop("gae_lambda")
        return tuple(puffadv.td_lambda_returns(*arrays, advantages=True, **sums, **kw))
    kw["lambda_"] = kw.pop("gae_lambda")
    kw["rho_pg_clip"] = RHO_PG
    out = puffadv.vtrace(*arrays, **sums, **kw)
    return (out.pg_advantages, out.vs, *out[2:])


def check_gpu_matches_cpu(rng, quick):
    failures, checks = [], 0
    # (2, 40000): split rows (segments) for every dtype; 37: no vectorised access.
    shapes = [(7, 37), (64, 1024), (3, 5000), (4096, 64), (2, 40000)] if not quick else [(7, 37), (64, 1024)]
    for rows, horizon in shapes:
        e = ref.random_episodes(rng, rows, horizon, np.float32)
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            for flags in ("bool", "uint8", "float"):
                for layout in ("batch", "time", "sliced"):
                    for kind in ("gae", "td_lambda", "vtrace"):
                        for extra in ("last", "trunc+ratio"):
                            def put(x, device, flag=False):
                                t = torch.from_numpy(np.ascontiguousarray(x))
                                t = t.to({"bool": torch.bool, "uint8": torch.uint8, "float": dtype}[flags]) \
                                    if flag else t.to(dtype)
                                t = t.to(device)
                                if layout == "time":
                                    return t.T.contiguous() if t.ndim == 2 else t
                                if layout == "sliced" and t.ndim == 2:
                                    return torch.repeat_interleave(t, 2, dim=1)[:, ::2]
                                return t
                            axis = 0 if layout == "time" else -1
                            results = []
                            for device in ("cpu", DEV):
                                if extra == "last":
                                    term = e["terminated"] | e["truncated"]
                                    arrays = (put(e["rewards"], device), put(e["values"], device), put(term, device, True))
                                    kw = dict(last_value=put(e["last_value"], device))
                                else:
                                    arrays = (put(e["rewards"], device), put(e["values"], device),
                                              put(e["terminated"], device, True), put(e["truncated"], device, True))
                                    kw = dict(bootstrap_values=put(e["bootstrap_values"], device),
                                              importance=put(e["importance"], device))
                                results.append(estimate(kind, arrays, gamma=GAMMA, gae_lambda=LAM, rho_clip=RHO,
                                                        c_clip=C, time_axis=axis, **kw))
                            torch.cuda.synchronize()
                            tol = 1e-12 if dtype == torch.float64 else 1e-5
                            for name, cpu, gpu in zip(("advantages", "returns", "abs_sums", "sums", "square_sums"),
                                                      *results):
                                checks += 1
                                err = rel(gpu, cpu)
                                if not err <= tol * (10 if "sums" in name else 1):
                                    failures.append(f"{kind} {rows}x{horizon} {dtype} flags={flags} {layout} "
                                                    f"{extra} {name}: rel err {err:.2e}")
        # The puff advantage: reduced precision, byte dones, fused outputs, own-dtype outputs.
        v, r, d, i = ref.random_puff_inputs(rng, rows, horizon)
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            for dones in ("float", "uint8"):
                for own in (False, True):
                    results = []
                    for device in ("cpu", DEV):
                        t = lambda x: torch.from_numpy(x).to(dtype).to(device)
                        dd = t(d) if dones == "float" else torch.from_numpy(d).to(torch.uint8).to(device)
                        out = torch.empty(rows, horizon, dtype=dtype, device=device) if own else None
                        results.append(tuple(puffadv.compute_puff_advantage(
                            t(v), t(r), dd, t(i), out, GAMMA, LAM, RHO, C, returns=True, abs_sums=True,
                            sums=True, square_sums=True)))
                    torch.cuda.synchronize()
                    tol = 1e-12 if dtype == torch.float64 else (1e-5 if not own else 1e-2)
                    for name, cpu, gpu in zip(("advantages", "returns", "abs_sums", "sums", "square_sums"),
                                              *results):
                        checks += 1
                        err = rel(gpu, cpu)
                        # Own-dtype outputs: the GPU sums read the rounded advantages, the CPU's do not.
                        if not err <= tol * (10 if "sums" in name else 1):
                            failures.append(f"puff {rows}x{horizon} {dtype} dones={dones} own={own} {name}: "
                                            f"rel err {err:.2e}")
    return checks, failures


def time_ms(fn):
    """Eager time of one call, host overhead included (bench_gpu.py's timing)."""
    return eager_time_us(fn, repeats=20) / 1000.0


def graph_time_ms(fn):
    """GPU time of one call: replays of a CUDA graph of 20 calls (bench_gpu.py's timing)."""
    return median_time_us(lambda i: fn(), calls=20, repeats=15) / 1000.0


def copy_bandwidth():
    n = 1 << 28  # 1 GiB of float32
    src, dst = torch.empty(n, device=DEV), torch.empty(n, device=DEV)
    # Eager: five of these copies captured in one graph measured 2.76 TB/s on the
    # H200 (2026-11-30), against ~4.2 eager; the cause was not established.
    ms = time_ms(lambda: dst.copy_(src))
    return 2 * n * 4 / (ms * 1e-3) / 1e9  # GB/s, bytes read + written


# (reduced precision, float32) pairs: "fewer bytes must mean less time".
RATIOS = [("puff bf16 in, f32 out", "puff f32 (fast path)"),
          ("puff bf16 in, bf16 out", "puff f32 (fast path)"),
          ("puff bf16 in, bool dones, f32 out", "puff f32 (fast path)"),
          ("puff bf16 in, bool dones, bf16 out", "puff f32 (fast path)"),
          ("puff f16 in, f32 out", "puff f32 (fast path)"),
          ("gae bf16, bf16 flags, f32 out", "gae f32, f32 flags"),
          ("gae bf16, bf16 flags, bf16 out", "gae f32, f32 flags"),
          ("gae bf16, bool flags, f32 out", "gae f32, bool flags"),
          ("gae bf16, bool flags, bf16 out", "gae f32, bool flags")]


def benchmark(quick, copy=None):
    rows_list = [(262144, 128), (65536, 128), (4096, 1024), (8, 131072)] if not quick else [(65536, 128)]
    copy = copy or copy_bandwidth()
    table = []
    for rows, horizon in rows_list:
        g = torch.Generator(device=DEV).manual_seed(0)
        f32 = lambda: torch.randn(rows, horizon, device=DEV, generator=g)
        v, r, imp = f32(), f32(), torch.rand(rows, horizon, device=DEV, generator=g) * 2
        d = (torch.rand(rows, horizon, device=DEV, generator=g) < 0.05)
        last = torch.randn(rows, device=DEV, generator=g)
        bf = {k: x.to(torch.bfloat16) for k, x in dict(v=v, r=r, imp=imp, d=d.float(), last=last).items()}
        hf = {k: x.to(torch.float16) for k, x in dict(v=v, r=r, imp=imp, d=d.float()).items()}
        df, du = d.float(), d.to(torch.uint8)
        out32, vs32 = torch.empty(rows, horizon, device=DEV), torch.empty(rows, horizon, device=DEV)
        out16 = torch.empty(rows, horizon, device=DEV, dtype=torch.bfloat16)
        cases = {
            "puff f32 (fast path)": (lambda: puffadv.compute_puff_advantage(v, r, df, imp, out32, 0.99, 0.95, 5.0, 1.0), 20),
            "puff bf16 in, f32 out": (lambda: puffadv.compute_puff_advantage(bf["v"], bf["r"], bf["d"], bf["imp"], out32, 0.99, 0.95, 5.0, 1.0), 12),
            "puff bf16 in, bf16 out": (lambda: puffadv.compute_puff_advantage(bf["v"], bf["r"], bf["d"], bf["imp"], out16, 0.99, 0.95, 5.0, 1.0), 10),
            "puff bf16 in, bool dones, f32 out": (lambda: puffadv.compute_puff_advantage(bf["v"], bf["r"], d, bf["imp"], out32, 0.99, 0.95, 5.0, 1.0), 11),
            "puff bf16 in, bool dones, bf16 out": (lambda: puffadv.compute_puff_advantage(bf["v"], bf["r"], d, bf["imp"], out16, 0.99, 0.95, 5.0, 1.0), 9),
            "puff f16 in, f32 out": (lambda: puffadv.compute_puff_advantage(hf["v"], hf["r"], hf["d"], hf["imp"], out32, 0.99, 0.95, 5.0, 1.0), 12),
            "puff f32, uint8 dones": (lambda: puffadv.compute_puff_advantage(v, r, du, imp, out32, 0.99, 0.95, 5.0, 1.0), 17),
            "puff f32 + returns": (lambda: puffadv.compute_puff_advantage(v, r, df, imp, out32, 0.99, 0.95, 5.0, 1.0, returns=vs32), 24),
            "gae f32, f32 flags": (lambda: puffadv.gae(r, v, df, last_value=last, advantages=out32, returns=False), 16),
            "gae bf16, bf16 flags, f32 out": (lambda: puffadv.gae(bf["r"], bf["v"], bf["d"], last_value=bf["last"], advantages=out32, returns=False), 10),
            "gae bf16, bf16 flags, bf16 out": (lambda: puffadv.gae(bf["r"], bf["v"], bf["d"], last_value=bf["last"], advantages=out16, returns=False), 8),
            "gae f32, bool flags": (lambda: puffadv.gae(r, v, d, last_value=last, advantages=out32, returns=False), 13),
            "gae bf16, bool flags, f32 out": (lambda: puffadv.gae(bf["r"], bf["v"], d, last_value=bf["last"], advantages=out32, returns=False), 9),
            "gae bf16, bool flags, bf16 out": (lambda: puffadv.gae(bf["r"], bf["v"], d, last_value=bf["last"], advantages=out16, returns=False), 7),
            # scan 17 bytes (r, v, flags, A, returns), then the sums re-read A (4)
            "gae f32 + returns + 3 sums": (lambda: puffadv.gae(r, v, d, last_value=last, advantages=out32, returns=vs32, abs_sums=True, sums=True, square_sums=True), 21),
            # one pass: r, v, bool flags, ratio read; vs, pg written
            "vtrace f32 (vs + pg)": (lambda: puffadv.vtrace(r, v, d, last_value=last, importance=imp, vs=vs32, pg_advantages=out32), 21),
        }
        times = {}
        for name, (fn, bytes_per) in cases.items():
            eager = time_ms(fn)
            ms = graph_time_ms(fn)
            times[name] = ms
            gbs = rows * horizon * bytes_per / (ms * 1e-3) / 1e9
            table.append(dict(shape=f"{rows}x{horizon}", case=name, ms=ms, eager_ms=eager,
                              bytes_per_element=bytes_per, gb_s=gbs, copy_fraction=gbs / copy))
        for reduced, full in RATIOS:
            table.append(dict(shape=f"{rows}x{horizon}", case=f"ratio {reduced} / {full}",
                              ratio=times[reduced] / times[full], barred=rows * horizon * 20 >= 64e6,
                              ideal=cases[reduced][1] / cases[full][1]))
    return copy, table


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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--markdown", help="write the peer table here")
    parser.add_argument("--plot", help="chart of puffadv vs rl-triton per estimator")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", default="check,peers,dtypes")
    parser.add_argument("--shapes", help="comma-separated RxH subset of the SPEC grid (peers)")
    parser.add_argument("--estimators", help="'family' (issue 20's), or comma-separated names of "
                        "peer_rl_triton.ESTIMATORS (peers; default all)")
    parser.add_argument("--rl-triton", help="the rl_triton package folder (or PUFFADV_RL_TRITON)")
    parser.add_argument("--bench-only", action="store_true", help="skip the GPU == CPU check")
    parser.add_argument("--check-only", action="store_true", help="skip the timings")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    if args.bench_only:
        sections.discard("check")
    if args.check_only:
        sections &= {"check"}
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, puffadv {puffadv.__version__}")
    checks, failures = check_gpu_matches_cpu(np.random.default_rng(0), args.quick) if "check" in sections else (0, [])
    if "check" in sections:
        print(f"GPU == CPU: {checks - len(failures)}/{checks} comparisons within tolerance")
    for f in failures[:40]:
        print("  MISMATCH", f)
    if not sections - {"check"}:
        sys.exit(1 if failures else 0)
    copy = copy_bandwidth()
    print(f"copy bandwidth: {copy:.0f} GB/s (read + write)")
    result = dict(copy_gb_s=copy, checks=checks, failures=failures)
    bar_ok = True
    if "peers" in sections:
        rl, why = peer.load(args.rl_triton)
        print(why)
        shapes = GRID if not args.quick else [(65536, 128), (8, 131072)]
        if args.shapes:
            shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
        estimators = peer.ESTIMATORS
        if args.estimators:
            estimators = peer.FAMILY if args.estimators == "family" else tuple(args.estimators.split(","))
        meta = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    device=torch.cuda.get_device_name(), torch=torch.__version__, peer=why, copy=copy)

        def write_markdown(rows, partial=True):
            if args.markdown:
                text = peer_markdown(rows, peer_bars(rows), meta)
                note = "\n\n(partial: written after each shape; the run may stop before its last)" if partial else ""
                open(args.markdown, "w").write(text + note + "\n")

        table = peer_benchmark(rl, shapes, copy, estimators, after_shape=write_markdown)
        bars = peer_bars(table)
        text = peer_markdown(table, bars, meta)
        print(text)
        write_markdown(table, partial=False)
        if args.plot:
            peer_plot(table, args.plot, copy)
        result.update(peers=table, peer_bars=bars, meta=meta)
        bar_ok = all(ok for _, ok, _ in bars)
    if "dtypes" in sections:
        _, table = benchmark(args.quick, copy)
        print("| shape | case | GPU ms (graph) | eager ms | bytes/elem | GB/s | of copy | ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for row in table:
            if "ratio" in row:
                ok = row["ratio"] <= 0.65
                barred = row["barred"]
                bar_ok = bar_ok and (ok or not barred)
                print(f"| {row['shape']} | {row['case']} | | | {row['ideal']:.2f} (bytes) | | | {row['ratio']:.3f}"
                      f"{' (no bar: < 64 MB)' if not barred else (' (bar met)' if ok else ' (BAR MISSED)')} |")
            else:
                print(f"| {row['shape']} | {row['case']} | {row['ms']:.4f} | {row['eager_ms']:.3f} | "
                      f"{row['bytes_per_element']} | {row['gb_s']:.0f} | {100 * row['copy_fraction']:.0f}% | |")
        result["table"] = table
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    sys.exit(1 if failures or not bar_ok else 0)


if __name__ == "__main__":
    main()
