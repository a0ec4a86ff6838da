"""PufferLib's trainer on puffadv, with no change to PufferLib's code.

PufferLib's trainer imports its C++/CUDA extension (``from pufferlib import _C``)
and calls ``torch.ops.pufferlib.compute_puff_advantage``, which that extension
registers. Where the extension is missing (PufferLib 3.0.0 from its sdist, whose
setup.py could not run) or cannot load (pufferlib-core's wheel without
libcudart.so.12, a build for another torch), puffadv takes its place. One step
per environment:

    python -m puffadv.pufferlib_compat install

installs an import hook (a ``.pth`` file and a small standard-library module in
site-packages) that acts the first time ``pufferlib._C`` is imported; in a
script, ``import puffadv.pufferlib_compat`` before PufferLib's trainer does the
same at once. Either way puffadv decides once per process, before it registers
anything:

- PufferLib's own extension is already imported, or loads: it stays, its kernel
  serves ``torch.ops.pufferlib.compute_puff_advantage``, and puffadv says so.
- It is missing or cannot load: puffadv registers that operator (PufferLib's
  schema; puffadv's kernels underneath: CPU, and CUDA/HIP when this build has
  that backend) and a stand-in ``pufferlib._C`` module, and says so, once.

Never both. The extension registers its operator in a static initialiser, and a
second registration aborts the process (a C++ error Python cannot catch), so the
extension is loaded before puffadv registers anything, and never after.
Messages go to the ``puffadv`` logger at WARNING level (stderr by default).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import logging
import sys
import threading
import types
from dataclasses import dataclass

import torch

from . import _torch_refusals
from . import torch as _puffadv_ops  # loads torch.ops.puffadv
from ._pufferlib_hook import EXTENSION, install_finder

PACKAGE = "pufferlib"
OPERATOR = "pufferlib::compute_puff_advantage"
SCHEMA = ("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
          "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
          "float rho_clip, float c_clip) -> ()")
_SERVED = "torch.ops.pufferlib.compute_puff_advantage"

MESSAGES = {
    "own": "puffadv: PufferLib's own extension {path} is loaded; its kernel serves "
           + _SERVED + " ({keys}), not puffadv's.",
    "replaced": "puffadv: PufferLib's extension {path} cannot be loaded here ({error}); "
                "puffadv's kernel serves " + _SERVED + " in its place ({devices}).",
    "absent": "puffadv: no PufferLib extension (pufferlib._C) was found; "
              "puffadv's kernel serves " + _SERVED + " ({devices}).",
    "elsewhere": "puffadv: " + _SERVED + " was registered by other code before PufferLib's "
                 "extension was imported; that kernel serves it, and pufferlib._C is "
                 "puffadv's stand-in (loading the extension now would register the operator "
                 "twice, which aborts the process).",
    "late": "puffadv: PufferLib's extension {path} was not loaded: puffadv had already "
            "registered " + _SERVED + " (no loadable extension was found then), and a second "
            "registration would abort the process. puffadv's kernel goes on serving it; "
            "import puffadv.pufferlib_compat after PufferLib is on sys.path to give its "
            "extension the first try.",
}

registered_here = False
"""True once this module has registered the operator (PufferLib's extension did not)."""


@dataclass(frozen=True)
class Resolution:
    kernel: str  # "pufferlib" (PufferLib's extension), "puffadv", or "elsewhere"
    module: types.ModuleType  # what `import pufferlib._C` gives
    extension: str | None  # PufferLib's extension file, where there is one
    message: str


_log = logging.getLogger("puffadv")
_lock = threading.RLock()
_resolution: Resolution | None = None
_late_reported = False
_library = None  # keeps the registration alive


def kernel() -> dict:
    """Which kernel serves torch.ops.pufferlib.compute_puff_advantage in this process,
    deciding now if nothing has yet: {'kernel', 'extension', 'message'}."""
    r = resolve()
    return {"kernel": r.kernel, "extension": r.extension, "message": r.message}


def resolve() -> Resolution:
    """Decides, once per process, whether PufferLib's extension or puffadv serves
    the operator (see the module docstring), says so once, and returns the decision."""
    global _resolution
    with _lock:
        if _resolution is None:
            _resolution = _decide()
            _log.warning(_resolution.message)
            if _resolution.kernel == "puffadv":
                _refresh_trainer_flags()
            _bind(_resolution.module)
        return _resolution


def extension_spec(name: str = EXTENSION):
    """The module spec that answers `import pufferlib._C` (called by the import hook)."""
    global _late_reported
    resolution = resolve()
    # The import of pufferlib._C that called this found nothing in sys.modules; if deciding just
    # bound the module there (_bind: pufferlib was mid-import), the import system would take that
    # module's own spec and execute PufferLib's file a second time (a Python _C.py defining a
    # torch Library then fails: "Only a single TORCH_LIBRARY ..."). It binds our spec's module.
    if sys.modules.get(name) is resolution.module:
        del sys.modules[name]
    if resolution.kernel == "puffadv" and not _late_reported:
        found = _find_extension()
        if found is not None and found.origin != resolution.extension:  # came onto sys.path since
            _late_reported = True
            _log.warning(MESSAGES["late"].format(path=found.origin))
    origin = resolution.extension if resolution.kernel == "pufferlib" else "puffadv"
    spec = importlib.machinery.ModuleSpec(name, _Handover(resolution.module), origin=origin)
    spec.has_location = resolution.kernel == "pufferlib" and origin is not None
    return spec


def _decide() -> Resolution:
    existing = sys.modules.get(EXTENSION)
    if existing is not None and _operator_registered():  # PufferLib's extension came first
        path = getattr(existing, "__file__", None)
        return Resolution("pufferlib", existing, path, MESSAGES["own"].format(
            path=path, keys=_real_keys()))
    if _operator_registered():
        return Resolution("elsewhere", _stand_in(), None, MESSAGES["elsewhere"])
    spec = _find_extension()
    if spec is None:
        _register()
        return Resolution("puffadv", _stand_in(), None,
                          MESSAGES["absent"].format(devices=_devices()))
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - any failure to load means it cannot serve
        if _operator_registered():  # its static initialisers ran before the failure
            return Resolution("pufferlib", _stand_in(), spec.origin, MESSAGES["own"].format(
                path=spec.origin, keys=_real_keys()))
        error = " ".join(f"{type(e).__name__}: {e}".split())
        _register()
        return Resolution("puffadv", _stand_in(), spec.origin, MESSAGES["replaced"].format(
            path=spec.origin, error=error, devices=_devices()))
    if not _operator_registered():  # it loaded but registers no such operator
        _register()
        return Resolution("puffadv", module, spec.origin, MESSAGES["replaced"].format(
            path=spec.origin, error="it registers no " + OPERATOR, devices=_devices()))
    return Resolution("pufferlib", module, spec.origin,
                      MESSAGES["own"].format(path=spec.origin, keys=_real_keys()))


def _find_extension():
    """The spec of PufferLib's extension file, found without importing pufferlib
    (importing PufferLib 3.0.0 has side effects) and without this hook."""
    package = sys.modules.get(PACKAGE)
    locations = getattr(package, "__path__", None)
    if locations is None:
        try:
            spec = importlib.util.find_spec(PACKAGE)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        locations = spec.submodule_search_locations
    return importlib.machinery.PathFinder.find_spec(EXTENSION, list(locations))


def _operator_registered() -> bool:
    return hasattr(torch.ops.pufferlib, "compute_puff_advantage")


def _register():
    """torch.ops.pufferlib.compute_puff_advantage on top of torch.ops.puffadv's."""
    global registered_here, _library
    lib = torch.library.Library(PACKAGE, "FRAGMENT")
    lib.define(SCHEMA)
    # Its float arguments warn of a derivative they read as a constant, as puffadv's op does.
    from ._torch_kernels import ConstantInputWarning
    _torch_refusals.check_calls(torch.ops.pufferlib.compute_puff_advantage, ConstantInputWarning,
                                unrecorded_warned_below=True)
    op = _puffadv_ops.compute_puff_advantage.default
    # Composite: autograd, torch.compile and every device see puffadv's operator underneath.
    lib.impl("compute_puff_advantage", op, "CompositeImplicitAutograd")
    eager = _eager_kernel(op)
    lib.impl("compute_puff_advantage", eager, "AutogradCPU", with_keyset=True)
    if _gpu_backend() is not None:
        # A CUDA kernel of its own, because pufferlib-core keeps tensors on the GPU
        # only when the dispatcher has one (_has_advantage_cuda_kernel); the
        # autograd key then routes through puffadv's operator as the composite does.
        lib.impl("compute_puff_advantage", op, "CUDA")
        lib.impl("compute_puff_advantage", eager, "AutogradCUDA", with_keyset=True)
    _library, registered_here = lib, True


def _eager_kernel(op):
    """The eager call on plain CPU or CUDA tensors: puffadv's operator's own BackendSelect
    rules and kernel, reached without dispatching that operator from the top again (a
    second Python kernel per call). Tensors with keys of their own below autograd (fake,
    functional, negative, conjugate) take puffadv's operator from the top, as the composite."""
    from ._torch_op_autograd import KEYS_BETWEEN_AUTOGRAD_AND_BACKEND_SELECT as between
    from ._torch_kernels import compute_puff_advantage_writes

    def kernel(keyset, *args):
        if keyset.raw_repr() & between:
            return op(*args)
        return compute_puff_advantage_writes(keyset, *args)

    return kernel


def _gpu_backend():
    from ._report import backend
    report = backend()
    return next((kind for kind in ("cuda", "hip") if report[kind]["compiled"]), None)


def _devices() -> str:
    kind = _gpu_backend()
    if kind is not None:
        return f"CPU and {'CUDA' if kind == 'cuda' else 'ROCm'} tensors"
    return ("CPU tensors; this build of puffadv has no GPU backend, so GPU tensors are "
            "computed on the host, with puffadv's fallback warning")


def _real_keys() -> str:
    keys = [key for key in ("CPU", "CUDA")
            if torch._C._dispatch_has_kernel_for_dispatch_key(OPERATOR, key)]
    return " and ".join(keys) + " tensors" if keys else "no CPU or CUDA kernel"


def _stand_in() -> types.ModuleType:
    module = types.ModuleType(EXTENSION, "puffadv's stand-in for PufferLib's extension: "
                              "torch.ops.pufferlib.compute_puff_advantage runs puffadv's kernel.")
    module.__spec__ = importlib.machinery.ModuleSpec(EXTENSION, _Handover(module), origin="puffadv")
    module.__loader__ = module.__spec__.loader
    return module


def _bind(module):
    """sys.modules and the package attribute, where pufferlib is already imported;
    otherwise the import hook hands the module over when pufferlib._C is imported."""
    package = sys.modules.get(PACKAGE)
    if package is not None and sys.modules.get(EXTENSION) is None:
        sys.modules[EXTENSION] = module
        setattr(package, "_C", module)


def _refresh_trainer_flags():
    """pufferlib-core's trainer records at its import whether `_C` loaded and whether the
    operator has a CUDA kernel. Imported before puffadv decided, it recorded 'no': update
    those two flags (PufferLib's code is unchanged; 3.0.0 raises at import instead)."""
    trainer = sys.modules.get(PACKAGE + ".pufferl")
    if trainer is None:
        return
    if getattr(trainer, "_C_AVAILABLE", None) is False:
        trainer._C_AVAILABLE = True
    has_cuda_kernel = getattr(trainer, "_has_advantage_cuda_kernel", None)
    if callable(has_cuda_kernel) and isinstance(getattr(trainer, "ADVANTAGE_CUDA", None), bool):
        trainer.ADVANTAGE_CUDA = bool(has_cuda_kernel())


class _Handover(importlib.abc.Loader):
    """Hands the import system a module that is already loaded."""

    def __init__(self, module):
        self.module = module

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        pass


if __name__ == "__main__":  # python -m puffadv.pufferlib_compat install|uninstall|status
    from puffadv._pufferlib_install import main

    def _status() -> str:
        from puffadv import pufferlib_compat  # the package's module (this file runs as __main__)
        return pufferlib_compat.kernel()["message"]

    sys.exit(main(status=_status))
else:
    install_finder()
    resolve()
