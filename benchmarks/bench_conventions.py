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
   `--estimators per_step` times issue 29's per-step forms (per-step gamma and
   lambda, next_values), puffadv alone, each checked against the same call on
   the CPU, against the 90 % bar with the extra arrays' bytes counted; their
   peer, rl-triton's generic scan with a per-step decay, is linear_recurrence's
   row of the default grid.
3. Dtypes: float32 against bfloat16 inputs at large sizes. Two times per case:
   the GPU time of one call (graph replay, as above) and the eager time of one
   call (CUDA events around a single Python call: host overhead included). The
   bar, on GPU time: bf16 inputs take <= 0.65x the float32 time (puff
   advantage; GAE with float flags).
The copy bandwidth is measured in the same run (an eager 1 GiB device-to-device copy).

    python benchmarks/bench_conventions.py [--json out.json] [--quick] [--sections check,peers,dtypes]
        [--rl-triton PATH] [--estimators family|per_step|NAME,...] [--shapes RxH,...] [--markdown out.md] [--plot out.png]
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys

import numpy as np
import torch

import puffadv

sys.path.insert(0, "tests/python")
import reference as ref  # noqa: E402
from bench_gpu import GRID, eager_time_us, median_time_us  # noqa: E402  (this folder is on sys.path)
import peer_rl_triton as peer  # noqa: E402
from peer_table import peer_bars, peer_benchmark, peer_markdown, peer_plot  # noqa: E402

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
        return tuple(puffadv.gae(*arrays, **sums, **{"time_axis": -1, **kw}))
    if kind == "td_lambda":
        kw["lambda_"] = kw.pop("gae_lambda")
        return tuple(puffadv.td_lambda_returns(*arrays, advantages=True, **sums, **{"time_axis": -1, **kw}))
    kw["lambda_"] = kw.pop("gae_lambda")
    kw["rho_pg_clip"] = RHO_PG
    out = puffadv.vtrace(*arrays, **sums, **{"time_axis": -1, **kw})
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
            "gae f32, f32 flags": (lambda: puffadv.gae(r, v, df, last_value=last, advantages=out32, returns=False, time_axis=-1), 16),
            "gae bf16, bf16 flags, f32 out": (lambda: puffadv.gae(bf["r"], bf["v"], bf["d"], last_value=bf["last"], advantages=out32, returns=False, time_axis=-1), 10),
            "gae bf16, bf16 flags, bf16 out": (lambda: puffadv.gae(bf["r"], bf["v"], bf["d"], last_value=bf["last"], advantages=out16, returns=False, time_axis=-1), 8),
            "gae f32, bool flags": (lambda: puffadv.gae(r, v, d, last_value=last, advantages=out32, returns=False, time_axis=-1), 13),
            "gae bf16, bool flags, f32 out": (lambda: puffadv.gae(bf["r"], bf["v"], d, last_value=bf["last"], advantages=out32, returns=False, time_axis=-1), 9),
            "gae bf16, bool flags, bf16 out": (lambda: puffadv.gae(bf["r"], bf["v"], d, last_value=bf["last"], advantages=out16, returns=False, time_axis=-1), 7),
            # scan 17 bytes (r, v, flags, A, returns), then the sums re-read A (4)
            "gae f32 + returns + 3 sums": (lambda: puffadv.gae(r, v, d, last_value=last, advantages=out32, returns=vs32, abs_sums=True, sums=True, square_sums=True, time_axis=-1), 21),
            # one pass: r, v, bool flags, ratio read; vs, pg written
            "vtrace f32 (vs + pg)": (lambda: puffadv.vtrace(r, v, d, last_value=last, importance=imp, vs=vs32, pg_advantages=out32, time_axis=-1), 21),
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--markdown", help="write the peer table here")
    parser.add_argument("--plot", help="chart of puffadv vs rl-triton per estimator")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sections", default="check,peers,dtypes")
    parser.add_argument("--shapes", help="comma-separated RxH subset of the SPEC grid (peers)")
    parser.add_argument("--estimators", help="'family' (issue 20's), 'per_step' (issue 29's), or comma-separated names of "
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
            estimators = {"family": peer.FAMILY, "per_step": peer.PER_STEP}.get(
                args.estimators, tuple(args.estimators.split(",")))
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
