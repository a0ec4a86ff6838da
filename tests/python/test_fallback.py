"""The automatic CPU fallback (SPEC section 3), on machines without a usable GPU:
fake GPU arrays (fake_device.py) stand in for CUDA and ROCm arrays. The real
path, CUDA torch tensors and CuPy arrays with a CPU-only build, runs on the GPU
machine in scripts/gpu/70-fallback.sh."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import puffadv
from puffadv import _core, _fallback
from fake_device import DLPACK_CUDA, DLPACK_ROCM, FakeGpuArray
from reference import puff_advantage as reference_puff_advantage

PARAMS = dict(gamma=0.99, gae_lambda=0.95, rho_clip=5.0, c_clip=1.0)
KINDS = {DLPACK_CUDA: ("cuda", "PUFF_CUDA"), DLPACK_ROCM: ("hip", "PUFF_HIP")}


def _usable(kind: str) -> bool:
    return _core.gpu_status(kind)["device_count"] > 0


# A fake array's memory is host memory: a build that can really launch on that
# device would read it as device memory.
device_types = pytest.mark.parametrize("device_type", [
    pytest.param(t, marks=pytest.mark.skipif(_usable(KINDS[t][0]),
                                             reason=f"{KINDS[t][0]} is usable here"))
    for t in KINDS])


def expected_reason(device_type: int) -> str:
    kind, option = KINDS[device_type]
    name = "cuda" if kind == "cuda" else "rocm"
    if not _core.build_info()[kind]:
        return (f"values is on {name}:0 but this build of puffadv has no {name} backend; "
                f"rebuild with: pip install . -C cmake.define.{option}=ON")
    return f"values is on {name}:0 but puffadv's {name} backend finds no usable device: "


def random_inputs(rng, rows=37, horizon=29, dtype=np.float32):
    return (rng.standard_normal((rows, horizon)).astype(dtype),
            rng.standard_normal((rows, horizon)).astype(dtype),
            (rng.random((rows, horizon)) < 0.2).astype(dtype),
            rng.uniform(0.1, 3.0, (rows, horizon)).astype(dtype))


@pytest.fixture(autouse=True)
def default_mode(monkeypatch):
    # setenv first, so that teardown restores the variable even after set_fallback() wrote it.
    monkeypatch.setenv(_fallback.ENV, "warn")
    monkeypatch.delenv(_fallback.ENV)


@pytest.fixture
def writable_fakes(monkeypatch):
    """Lets the fallback copy results back into a FakeGpuArray (for a real GPU
    array that is torch's copy_ or CuPy's assignment)."""
    real_writer = _fallback._writer

    def writer(framework, out, name):
        if isinstance(out, FakeGpuArray):
            return (lambda dst, host: np.copyto(dst.host, np.asarray(host))), out
        return real_writer(framework, out, name)

    monkeypatch.setattr(_fallback, "_writer", writer)


@device_types
@pytest.mark.parametrize("how", ["env", "set_fallback"])
def test_error_mode_raises_backend_unavailable(rng, device_type, how, monkeypatch):
    if how == "env":
        monkeypatch.setenv("PUFFADV_FALLBACK", "error")
    else:
        assert puffadv.set_fallback("error") == "warn"
        assert os.environ["PUFFADV_FALLBACK"] == "error"  # what the torch ops read
    arrays = [FakeGpuArray(a, device_type) for a in random_inputs(rng)]
    out = FakeGpuArray(np.full(arrays[0].shape, np.nan, np.float32), device_type)
    before = _core.fallback_stats()["calls"]
    with pytest.raises(puffadv.BackendUnavailableError) as info:
        puffadv.compute_puff_advantage(*arrays, out, **PARAMS)
    assert isinstance(info.value, RuntimeError)
    message = str(info.value)
    assert message.startswith(expected_reason(device_type))
    assert "PUFFADV_FALLBACK=error" in message and "set_fallback('warn')" in message
    assert np.isnan(out.host).all(), "error mode must not compute"
    assert _core.fallback_stats()["calls"] == before


@device_types
def test_warn_mode_computes_on_host_and_counts(rng, device_type, writable_fakes):
    for dtype, tol in ((np.float32, 1e-5), (np.float64, 1e-12)):
        host = random_inputs(rng, dtype=dtype)
        out = FakeGpuArray(np.full(host[0].shape, np.nan, dtype), device_type)
        before = _core.fallback_stats()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", puffadv.FallbackWarning)  # once per process: see below
            result = puffadv.compute_puff_advantage(*(FakeGpuArray(a, device_type) for a in host),
                                                    out, **PARAMS)
        assert result is out
        ref = reference_puff_advantage(*host, **PARAMS)
        assert np.linalg.norm(out.host - ref) <= tol * np.linalg.norm(ref)
        after = _core.fallback_stats()
        assert after["calls"] == before["calls"] + 1
        assert after["bytes"] == before["bytes"] + 5 * host[0].nbytes  # 4 down, 1 back
        assert after["last_reason"].startswith(expected_reason(device_type))
    report = puffadv.backend()["fallback"]
    assert report["setting"] == "warn" and report["happened"]
    assert "CPU fallback      : warn (PUFFADV_FALLBACK); used" in str(puffadv.backend())


def test_warning_once_per_process_names_cost_and_fix():
    """In a fresh process: the first fallback warns, naming the cost and the fix;
    the second does not; the warning points at the caller's line."""
    if _usable("cuda"):
        pytest.skip("cuda is usable here")
    script = textwrap.dedent("""
        import warnings, numpy as np, puffadv
        from puffadv import _fallback
        from fake_device import FakeGpuArray
        _fallback._writer = lambda fw, out, name: ((lambda d, h: np.copyto(d.host, h)), out)
        a = [FakeGpuArray(np.ones((100, 10), np.float32)) for _ in range(5)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                puffadv.compute_puff_advantage(*a)  # CALL
        for w in caught:
            print(w.category.__name__, w.filename, w.lineno, "|", w.message)
        stats = puffadv.backend()["fallback"]
        print("expected |", puffadv._core.fallback_warning_message(stats["last_reason"], 20000))
        print("calls", stats["calls"])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.pop("PUFFADV_FALLBACK", None)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120, cwd=str(Path(__file__).parent))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "calls 3"
    expected = lines[-2].split(" | ", 1)[1]
    warned = lines[:-2]
    assert len(warned) == 1, proc.stdout
    category, filename, lineno, rest = warned[0].split(" ", 3)
    assert category == "FallbackWarning" and filename == "<string>"
    assert script.splitlines()[int(lineno) - 1].strip().endswith("# CALL")
    message = rest.lstrip("| ")
    assert message == expected  # the core's wording, shared with the torch ops
    assert message.startswith("puffadv computed on the CPU instead: " + expected_reason(DLPACK_CUDA))
    assert "two host round trips, 20.0 KB in this call" in message  # 5 x 100 x 10 x 4 bytes
    assert "PUFFADV_FALLBACK=error" in message


@device_types
def test_argument_errors_come_first(rng, device_type):
    """The core checks the caller's own arrays before any fallback: a bad call
    gets the same message on a GPU array as on a CPU one, in either mode."""
    host = list(random_inputs(rng))
    out = np.empty((host[0].shape[0], host[0].shape[1] + 1), np.float32)
    with pytest.raises(ValueError) as on_cpu:
        puffadv.compute_puff_advantage(*host, out)
    fakes = [FakeGpuArray(a, device_type) for a in (*host, out)]
    with pytest.raises(ValueError) as on_gpu:
        puffadv.compute_puff_advantage(*fakes)
    assert str(on_gpu.value) == str(on_cpu.value)

    # The output aliases an input: the host copies would hide it; the core sees it first.
    values = FakeGpuArray(host[0], device_type)
    with pytest.raises(ValueError, match="advantages"):
        puffadv.compute_puff_advantage(values, *fakes[1:4], values)

    # Mixed devices are never "fixed" by copying to the host.
    with pytest.raises((TypeError, ValueError), match="rewards is on cpu but values is on"):
        puffadv.compute_puff_advantage(fakes[0], FakeGpuArray(host[1], 1), *fakes[2:])


@device_types
def test_output_that_cannot_be_written_back_is_named(rng, device_type):
    """A bare DLPack producer cannot receive the result (no CuPy, no CUDA torch here)."""
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy can write into any CUDA DLPack array")
    except ImportError:
        pass
    fakes = [FakeGpuArray(a, device_type) for a in random_inputs(rng)]
    out = FakeGpuArray(np.full(fakes[0].shape, np.nan, np.float32), device_type)
    with pytest.raises(TypeError, match="^advantages is a fake_device.FakeGpuArray on a GPU"):
        puffadv.compute_puff_advantage(*fakes, out)


@device_types
def test_empty_call_needs_no_fallback(device_type):
    before = _core.fallback_stats()["calls"]
    fakes = [FakeGpuArray(np.empty((0, 8), np.float32), device_type) for _ in range(5)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        puffadv.compute_puff_advantage(*fakes)
    assert _core.fallback_stats()["calls"] == before


def test_set_fallback_validates_and_returns_previous(monkeypatch):
    assert puffadv.set_fallback("error") == "warn"
    assert puffadv.set_fallback("WARN") == "error"
    assert os.environ["PUFFADV_FALLBACK"] == "warn"
    for bad in ("off", "", None, 1):
        with pytest.raises(ValueError, match="mode must be 'warn' or 'error'"):
            puffadv.set_fallback(bad)
    monkeypatch.setenv("PUFFADV_FALLBACK", "silent")
    with pytest.raises(ValueError, match="PUFFADV_FALLBACK='silent': expected 'warn' or 'error'"):
        _fallback.fallback_mode()
    assert puffadv.backend()["fallback"]["setting"].startswith("invalid")


def test_set_fallback_replaces_a_bad_setting(monkeypatch):
    """Found by issue 31's probe: set_fallback() read the bad value first and raised, so the
    one call meant to repair the setting could not."""
    monkeypatch.setenv("PUFFADV_FALLBACK", "silent")
    assert puffadv.set_fallback("error") == "silent"  # the bad value, as it was
    assert os.environ["PUFFADV_FALLBACK"] == "error" and _fallback.fallback_mode() == "error"
    monkeypatch.setenv("PUFFADV_FALLBACK", "on")
    assert puffadv.set_fallback("Warn") == "on" and _fallback.fallback_mode() == "warn"


def test_cpu_arrays_never_touch_the_fallback(rng, monkeypatch):
    monkeypatch.setenv("PUFFADV_FALLBACK", "error")
    host = random_inputs(rng)
    out = puffadv.compute_puff_advantage(*host, **PARAMS)
    ref = reference_puff_advantage(*host, **PARAMS)
    assert np.linalg.norm(out - ref) <= 1e-5 * np.linalg.norm(ref)

