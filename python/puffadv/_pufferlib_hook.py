"""The import hook behind ``puffadv.pufferlib_compat``: a meta-path finder that
answers the import of ``pufferlib._C`` (PufferLib's C++/CUDA extension).

Standard library only, and nothing happens until ``pufferlib._C`` is imported:
``python -m puffadv.pufferlib_compat install`` copies this file next to a
``.pth`` file in site-packages, so every Python start of that environment
installs the finder at the cost of this file's import, and the processes that
never import PufferLib never import torch or puffadv because of it. The finder
then hands the import to ``puffadv.pufferlib_compat``, which loads PufferLib's
own extension when it can and puffadv's stand-in when it cannot.

If puffadv is no longer importable (uninstalled, another environment), the
finder steps aside and the import goes on as if it were not there; if puffadv
is there but cannot serve (no torch, no torch operator library), it says why,
once, and steps aside too.
"""
import importlib
import logging
import sys

EXTENSION = "pufferlib._C"
MARK = "_puffadv_pufferlib_finder"  # one finder per process, whichever copy installed it
UNAVAILABLE = ("puffadv: cannot serve torch.ops.pufferlib.compute_puff_advantage ({error}); "
               "the import of pufferlib._C goes on without puffadv.")
_reported = []


class PufferLibExtensionFinder:
    """A sys.meta_path finder for ``pufferlib._C`` only."""

    _puffadv_pufferlib_finder = True

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != EXTENSION:
            return None
        try:
            # By name, as any module outside puffadv would: this file also runs as a copy in
            # site-packages (_puffadv_pufferlib_hook.py), and pufferlib_compat imports it.
            pufferlib_compat = importlib.import_module("puffadv.pufferlib_compat")
        except ImportError as e:
            if e.name != "puffadv" and not _reported:  # installed, but cannot serve: say why
                _reported.append(e)
                logging.getLogger("puffadv").warning(
                    UNAVAILABLE.format(error=" ".join(f"{type(e).__name__}: {e}".split())))
            return None
        return pufferlib_compat.extension_spec(name)

    def __repr__(self):
        return "<puffadv's finder for pufferlib._C>"


def install_finder():
    """Puts the finder first on sys.meta_path, once per process."""
    if not any(getattr(finder, MARK, False) for finder in sys.meta_path):
        sys.meta_path.insert(0, PufferLibExtensionFinder())

