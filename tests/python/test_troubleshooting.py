"""docs/troubleshooting.md quotes puffadv's messages; this file produces each of
them from the code and compares. A message block in the page is

    <!-- message: ID -->
    ```text
    ...
    ```

where `{anything}` stands for a varying part. Every ID needs a producer below
and every producer an ID, so neither side can drift or go stale."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import puffadv
from puffadv import _core, _fallback, _report
from fake_device import DLPACK_CUDA, DLPACK_ROCM, FakeGpuArray

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "troubleshooting.md"
BLOCK = re.compile(r"<!-- message: (\S+) -->\s*```text\n(.*?)\n```", re.S)
PLACEHOLDER = re.compile(r"\{[^{}\n]+\}")


def quoted_messages() -> dict:
    found = BLOCK.findall(DOC.read_text())
    messages = dict(found)
    assert len(messages) == len(found), "duplicate message IDs in troubleshooting.md"
    return messages


def normalise(text: str) -> str:
    return " ".join(text.split())


def matches(template: str, actual: str) -> bool:
    literal = PLACEHOLDER.split(normalise(template))
    pattern = "(.+?)".join(re.escape(part) for part in literal)
    return re.fullmatch(pattern, normalise(actual)) is not None


# ---- runtime messages -------------------------------------------------------

def reason_for(state: str):
    """The core's BackendUnavailableError text for a fake GPU array whose backend
    is missing ('no-backend') or compiled without a device ('no-device'), and the
    kind it used ('cuda' or 'hip'). The page quotes the CUDA wording; the HIP one
    differs only in the names, which for_kind() translates."""
    for dlpack_type, kind in ((DLPACK_CUDA, "cuda"), (DLPACK_ROCM, "hip")):
        status = _core.gpu_status(kind)
        if (state == "no-backend") != (not status["compiled"]) or status["device_count"] > 0:
            continue
        arrays = [FakeGpuArray(np.ones((2, 3), np.float32), dlpack_type) for _ in range(5)]
        with pytest.raises(puffadv.BackendUnavailableError) as info:
            _core.puff_advantage(*arrays, 0.99, 0.95, 1.0, 1.0, 0)
        return str(info.value), kind
    pytest.skip(f"this build has no GPU backend in state {state!r}: both are "
                f"{'compiled' if state == 'no-backend' else 'missing or usable'}; a "
                f"single-backend build produces it (scripts/test.d/30-gpu-builds.sh)")


def for_kind(template: str, kind: str) -> str:
    return template if kind == "cuda" else template.replace("cuda", "rocm").replace("PUFF_CUDA",
                                                                                    "PUFF_HIP")


def any_reason():
    try:
        return reason_for("no-backend")
    except pytest.skip.Exception:
        return reason_for("no-device")


def produce_reason_no_backend(template):
    message, kind = reason_for("no-backend")
    return message, for_kind(template, kind)


def produce_reason_no_device(template):
    message, kind = reason_for("no-device")
    return message, for_kind(template, kind)


def produce_fallback_warning(template):
    # The exact text run_on_host() warns with (test_fallback checks the emitted warning equals it).
    reason, _ = any_reason()
    return _core.fallback_warning_message(reason, 20000), template


def produce_fallback_error(template, monkeypatch):
    reason, kind = any_reason()
    monkeypatch.setenv("PUFFADV_FALLBACK", "error")
    dlpack_type = DLPACK_CUDA if kind == "cuda" else DLPACK_ROCM
    arrays = [FakeGpuArray(np.ones((2, 3), np.float32), dlpack_type) for _ in range(5)]
    with pytest.raises(puffadv.BackendUnavailableError) as info:
        puffadv.compute_puff_advantage(*arrays)
    assert isinstance(info.value, RuntimeError) and str(info.value).startswith(reason)
    return str(info.value), template


def produce_fallback_bad_setting(template, monkeypatch):
    reason, kind = any_reason()
    monkeypatch.setenv("PUFFADV_FALLBACK", "silent")
    dlpack_type = DLPACK_CUDA if kind == "cuda" else DLPACK_ROCM
    arrays = [FakeGpuArray(np.ones((2, 3), np.float32), dlpack_type) for _ in range(5)]
    with pytest.raises(ValueError) as info:
        puffadv.compute_puff_advantage(*arrays)
    return str(info.value), template


def produce_report_fallback_line(template, monkeypatch):
    _, kind = any_reason()
    monkeypatch.delenv("PUFFADV_FALLBACK", raising=False)
    monkeypatch.setattr(_fallback, "_writer",
                        lambda fw, out, name: ((lambda d, h: np.copyto(d.host, h)), out))
    dlpack_type = DLPACK_CUDA if kind == "cuda" else DLPACK_ROCM
    arrays = [FakeGpuArray(np.ones((2, 3), np.float32), dlpack_type) for _ in range(5)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", puffadv.FallbackWarning)
        puffadv.compute_puff_advantage(*arrays)
    return _line(str(puffadv.backend()), "  CPU fallback"), template


def _line(report: str, prefix: str) -> str:
    return next(line for line in report.splitlines() if line.startswith(prefix))


def _report_with_cuda(**status) -> str:
    report = puffadv.backend()
    report["cuda"] = dict(compiled=True, device_count=0, runtime_version=13000,
                          driver_version=12080, device_names=[],
                          error="CUDA driver version is insufficient for CUDA runtime version")
    report["cuda"].update(status)
    report["gpu_architectures"] = "cuda sm_90 +PTX compute_90 (nvcc 13.0.88)"
    return str(report)


def produce_report_no_device(template):
    return _line(_report_with_cuda(error="no CUDA-capable device is detected"),
                 "  cuda devices"), template


def produce_report_runtime_driver(template):
    line = _line(_report_with_cuda(), "  cuda   ")
    assert "runtime 13.0, driver supports 12.8" in line
    return line, template


# ---- torch operator library ---------------------------------------------------

def _torch_status():
    from puffadv import _torch_status
    return _torch_status


class _FakeTorch:
    __version__ = "2.13.0"


class _OldTorch:
    __version__ = "2.9.1+cu128"


def produce_torch_too_old(template, monkeypatch):
    status = _torch_status()

    class Facts:
        TORCH_FLOOR = "2.10"
        TORCH_VERSION = "2.13.0+cpu"
        LIBRARY = "libpuffadv_torch.so"

    monkeypatch.setattr(status, "build_facts", lambda: Facts)
    monkeypatch.setattr(status, "_loaded", False)
    monkeypatch.setattr(status, "_load_error", status._load_error)  # load() records its failure
    with pytest.raises(ImportError) as info:  # what `import puffadv.torch` raises
        status.load(_OldTorch)
    return str(info.value), template


def produce_torch_not_built(template, monkeypatch):
    status = _torch_status()
    monkeypatch.setattr(status, "build_facts", lambda: None)
    monkeypatch.setattr(status, "_loaded", False)
    monkeypatch.setattr(status, "_load_error", status._load_error)  # load() records its failure
    with pytest.raises(ImportError) as info:
        status.load(_FakeTorch)
    return str(info.value), template


# ---- configure-time messages (a CPU-only configure takes a few seconds) -------

def _cmake() -> str:
    """The cmake that builds puffadv: the environment's (pip's, >= 3.28), else PATH's."""
    beside_python = Path(sys.executable).parent / "cmake"
    found = str(beside_python) if beside_python.exists() else shutil.which("cmake")
    if found is None:
        pytest.skip("cmake is not installed")
    return found


def configure(tmp_path, *defines, env=None):
    args = [_cmake(), "-S", str(ROOT), "-B", str(tmp_path / "build"), "-DPUFF_PYTHON=OFF",
            "-DPUFF_TESTS=OFF", "-DPUFF_TORCH=OFF", "-DPUFF_JAX=OFF",
            "-DCMAKE_BUILD_TYPE=Debug", *defines]  # Debug: no LTO probe, faster
    env = dict(env if env is not None else os.environ)
    env.pop("LD_PRELOAD", None)  # under 40-sanitize.sh: cmake and the compilers need no ASan
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)


def cmake_error(result) -> str:
    """The text of the first `CMake Error ... (message):` block."""
    assert result.returncode != 0, result.stdout
    match = re.search(r"CMake Error at [^\n]*\(message\):\n(.*?)(?:\nCall Stack|\n\n|\Z)",
                      result.stderr, re.S)
    assert match, result.stderr
    return match.group(1)


def produce_cmake_no_nvcc(template, tmp_path):
    # An empty compiler is what CMake's probe leaves when it finds no nvcc.
    result = configure(tmp_path, "-DPUFF_CUDA=ON", "-DCMAKE_CUDA_COMPILER=", "-DPUFF_HIP=OFF")
    return cmake_error(result), template


def produce_cmake_no_hip(template, tmp_path):
    result = configure(tmp_path, "-DPUFF_HIP=ON", "-DCMAKE_HIP_COMPILER=", "-DPUFF_CUDA=OFF")
    return cmake_error(result), template


def _core_compile_command(tmp_path, env=None, source="advantage_cpu.cpp") -> str:
    result = configure(tmp_path, "-DPUFF_SANITIZE=ON", "-DPUFF_CUDA=OFF", "-DPUFF_HIP=OFF",
                       "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", env=env)
    assert result.returncode == 0, result.stderr
    import json
    commands = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    return next(c["command"] for c in commands if c["file"].endswith(source))


def produce_report_debug_build(template, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CXXFLAGS", "CFLAGS")}
    # backend()'s build facts are defined on build_info.cpp alone (src/core/CMakeLists.txt).
    command = _core_compile_command(tmp_path, env, "build_info.cpp")
    flags = command.split()
    for flag in ("-O0", "-g", "-fsanitize=address,undefined", "-fsanitize=bounds"):
        assert flag in flags, command
    # What backend() reports is what CMake passes down as PUFF_CXX_FLAGS / PUFF_BUILD_TYPE.
    reported = re.search(r'-DPUFF_CXX_FLAGS="?\\?"(.*?)\\?""?\s', command).group(1)
    report = puffadv.backend()
    report.update(build_type="Debug", cxx_flags=reported, sanitizers=True)
    lines = str(report).splitlines()
    return "\n".join([lines[0], _line(str(report), "  C++ flags")]), template


# PufferLib: the lines of puffadv.pufferlib_compat. tests/python/test_pufferlib_compat.py
# and tests/pufferlib check that each scenario logs exactly these texts.
def _pufferlib_compat():
    """puffadv.pufferlib_compat, which loads the torch operator library: a build
    without it (PUFF_TORCH=OFF, as CI's GPU-backend builds) has no PufferLib messages."""
    pytest.importorskip("torch")
    if _torch_status().build_facts() is None:
        pytest.skip("this build has no torch operator library (PUFF_TORCH=OFF)")
    from puffadv import pufferlib_compat
    return pufferlib_compat


def _pufferlib_message(name, **values):
    pufferlib_compat = _pufferlib_compat()
    return pufferlib_compat.MESSAGES[name].format(**values)


def produce_pufferlib_own(template):
    return _pufferlib_message("own", path="/venv/site-packages/pufferlib/_C.so",
                              keys="CPU and CUDA tensors"), template


def produce_pufferlib_replaced(template):
    pufferlib_compat = _pufferlib_compat()
    error = ("ImportError: libcudart.so.12: cannot open shared object file: No such file or "
             "directory")
    return _pufferlib_message("replaced", path="/venv/site-packages/pufferlib/_C.so", error=error,
                              devices=pufferlib_compat._devices()), template


def produce_pufferlib_absent(template):
    pufferlib_compat = _pufferlib_compat()
    return _pufferlib_message("absent", devices=pufferlib_compat._devices()), template


def produce_pufferlib_late(template):
    return _pufferlib_message("late", path="/src/PufferLib/pufferlib/_C.so"), template


def produce_pufferlib_elsewhere(template):
    return _pufferlib_message("elsewhere"), template


def produce_pufferlib_unavailable(template, monkeypatch, caplog):
    """The import hook, in a puffadv whose compat module cannot be imported."""
    from puffadv import _pufferlib_hook
    monkeypatch.setattr(_pufferlib_hook, "_reported", [])
    monkeypatch.delattr(puffadv, "pufferlib_compat", raising=False)
    monkeypatch.setitem(sys.modules, "puffadv.pufferlib_compat", None)
    with caplog.at_level("WARNING", logger="puffadv"):
        assert _pufferlib_hook.PufferLibExtensionFinder.find_spec("pufferlib._C") is None
        assert _pufferlib_hook.PufferLibExtensionFinder.find_spec("pufferlib._C") is None
    [record] = caplog.records  # once
    return record.getMessage(), template


PRODUCERS = {
    "fallback-warning": produce_fallback_warning,
    "reason-no-backend": produce_reason_no_backend,
    "reason-no-device": produce_reason_no_device,
    "fallback-error": produce_fallback_error,
    "fallback-bad-setting": produce_fallback_bad_setting,
    "report-fallback-line": produce_report_fallback_line,
    "cmake-no-nvcc": produce_cmake_no_nvcc,
    "cmake-no-hip": produce_cmake_no_hip,
    "report-no-device": produce_report_no_device,
    "report-runtime-driver": produce_report_runtime_driver,
    "torch-too-old": produce_torch_too_old,
    "torch-not-built": produce_torch_not_built,
    "report-debug-build": produce_report_debug_build,
    "pufferlib-own": produce_pufferlib_own,
    "pufferlib-replaced": produce_pufferlib_replaced,
    "pufferlib-absent": produce_pufferlib_absent,
    "pufferlib-late": produce_pufferlib_late,
    "pufferlib-elsewhere": produce_pufferlib_elsewhere,
    "pufferlib-unavailable": produce_pufferlib_unavailable,
}


def test_every_quoted_message_has_a_producer():
    assert set(quoted_messages()) == set(PRODUCERS)


@pytest.mark.parametrize("message_id", sorted(PRODUCERS))
def test_quoted_message_is_what_puffadv_prints(message_id, request):
    template = quoted_messages()[message_id]
    producer = PRODUCERS[message_id]
    names = producer.__code__.co_varnames[1:producer.__code__.co_argcount]
    actual, expected = producer(template, *(request.getfixturevalue(n) for n in names))
    assert matches(expected, actual), f"\npage: {normalise(expected)}\ncode: {normalise(actual)}"


def test_debug_build_is_unoptimised_even_with_optimising_cxxflags(tmp_path):
    """conda exports CXXFLAGS=-O2; the Debug switch must still give -O0 (the last -O wins)."""
    env = dict(os.environ, CXXFLAGS="-O2")
    flags = _core_compile_command(tmp_path, env).split()
    optimisation = [f for f in flags if re.fullmatch(r"-O\w*", f)]
    assert optimisation[-1] == "-O0", optimisation


def test_matcher_can_fail():
    assert matches("a {x} c", "a  bbb\n c")
    assert not matches("a {x} c", "a bbb d")
    assert not matches("exact text", "exact text, and more")
