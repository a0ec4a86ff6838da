"""backend(): what this build of puffadv contains and what it can use now."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from . import _core, _fallback
from . import _torch_status


def _version_string(encoded: int) -> str:
    """CUDA/HIP encode versions as 1000 * major + 10 * minor (13000 -> 13.0)."""
    if not encoded:
        return "unknown"
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


class BackendReport(dict):
    """A plain dict of facts, printed as a readable report."""

    def __str__(self) -> str:
        lines = [f"puffadv {self['version']} ({self['build_type']} build, {self['compiler']})"]
        lines.append(f"  compiled backends : {', '.join(self['compiled'])}")
        lines.append(f"  usable now        : {', '.join(self['usable'])}")
        lines.append(f"  CPU threads       : {self['cpu_threads']}"
                     f" (puffadv's own pool, fork-safe;"
                     f" PUFFADV_NUM_THREADS={os.environ.get('PUFFADV_NUM_THREADS', 'unset')})")
        for kind in ("cuda", "hip"):
            gpu = self[kind]
            if not gpu["compiled"]:
                lines.append(f"  {kind:<18}: not compiled")
                continue
            devices = ", ".join(gpu["device_names"]) or f"no device ({gpu['error'] or 'none found'})"
            lines.append(f"  {kind:<18}: compiled for {self['gpu_architectures'] or '?'};"
                         f" runtime {_version_string(gpu['runtime_version'])},"
                         f" driver supports {_version_string(gpu['driver_version'])}")
            lines.append(f"  {kind + ' devices':<18}: {devices}")
        lines.append(f"  C++ flags         : {self['cxx_flags'] or '(none)'}"
                     f"{' + ASan/UBSan' if self['sanitizers'] else ''}")
        fb = self["fallback"]
        used = (f"used {fb['calls']} time(s), {fb['bytes']} bytes copied; last: {fb['last_reason']}"
                if fb["happened"] else "not used")
        lines.append(f"  CPU fallback      : {fb['setting']} (PUFFADV_FALLBACK); {used}")
        lines.append(f"  torch operators   : {_torch_status.describe(self['torch_ops'])}")
        jax = self["jax_handlers"]
        lines.append("  JAX handlers      : not compiled (no jax at build time, or PUFF_JAX=OFF)"
                     if jax is None else
                     f"  JAX handlers      : {', '.join(jax['platforms'])}; XLA FFI API "
                     f"{jax['api_version'][0]}.{jax['api_version'][1]} (headers of jaxlib "
                     f"{jax['jaxlib_version']}; a jaxlib with an older FFI API refuses them)")
        lines.append(f"  CMake package     : {self['cmake_dir']}")
        lines.append(f"  Python            : {sys.version.split()[0]}")
        return "\n".join(lines)


def cmake_dir() -> str:
    """Folder holding puffadvConfig.cmake: put it on CMAKE_PREFIX_PATH (or pass it as puffadv_DIR)."""
    return str(Path(__file__).resolve().parent / "lib" / "cmake" / "puffadv")


def _jax_handlers():
    """XLA FFI handlers in this build (puffadv.jax), or None; reading them needs no jax."""
    if not hasattr(_core, "jax_ffi_build"):
        return None
    info = dict(_core.jax_ffi_build())
    info["platforms"] = list(dict.fromkeys(platform for _, platform, _ in _core.jax_ffi_targets()))
    return info


def backend() -> BackendReport:
    """What was compiled (cpu, cuda, hip), what is usable now, versions and build flags."""
    info = _core.build_info()
    report = BackendReport(info)
    report["cuda"] = _core.gpu_status("cuda")
    report["hip"] = _core.gpu_status("hip")
    report["compiled"] = ["cpu"] + [k for k in ("cuda", "hip") if report[k]["compiled"]]
    report["usable"] = ["cpu"] + [k for k in ("cuda", "hip") if report[k]["device_count"] > 0]
    report["cpu_threads"] = _core.cpu_thread_count()
    report["cmake_dir"] = cmake_dir()
    report["torch_ops"] = _torch_status.status()  # built, against which torch, loaded
    report["fallback"] = _fallback.report()  # setting, and whether a fallback happened
    report["jax_handlers"] = _jax_handlers()
    return report
