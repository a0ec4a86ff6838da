"""``python -m puffadv.pufferlib_compat install | uninstall | status``.

``install`` writes two files into the environment's site-packages: the import
hook (a copy of ``puffadv/_pufferlib_hook.py``, standard library only) and a
``.pth`` file that installs it at every Python start. Python processes that
never import ``pufferlib._C`` pay only for reading that small file.
"""
from __future__ import annotations

import argparse
import logging
import sys
import sysconfig
from pathlib import Path

HOOK_MODULE = "_puffadv_pufferlib_hook"
PTH_NAME = "puffadv-pufferlib.pth"
# A .pth line that starts with `import` is executed at startup; a missing hook
# file (removed by hand) must not print a traceback at every start.
PTH_LINE = (f"import importlib.util; importlib.util.find_spec('{HOOK_MODULE}') and "
            f"__import__('{HOOK_MODULE}').install_finder()\n")


def site_packages() -> Path:
    """This environment's site-packages: the folder whose .pth files Python reads."""
    return Path(sysconfig.get_path("purelib"))


def install(target: Path | None = None) -> list[Path]:
    target = Path(target) if target is not None else site_packages()
    hook_source = Path(__file__).with_name("_pufferlib_hook.py").read_text()
    written = [target / f"{HOOK_MODULE}.py", target / PTH_NAME]
    written[0].write_text(hook_source)
    written[1].write_text(PTH_LINE)
    return written


def uninstall(target: Path | None = None) -> list[Path]:
    target = Path(target) if target is not None else site_packages()
    removed = []
    for path in (target / PTH_NAME, target / f"{HOOK_MODULE}.py"):
        if path.exists():
            path.unlink()
            removed.append(path)
    return removed


def installed(target: Path | None = None) -> bool:
    target = Path(target) if target is not None else site_packages()
    return (target / PTH_NAME).exists() and (target / f"{HOOK_MODULE}.py").exists()


def main(argv=None, status=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m puffadv.pufferlib_compat",
        description="Let PufferLib's trainer run on puffadv where PufferLib's own "
                    "extension is missing or cannot load.")
    parser.add_argument("command", choices=("install", "uninstall", "status"))
    parser.add_argument("--site-packages", type=Path, default=None,
                        help="where to write the hook (default: this environment's, "
                             f"{site_packages()})")
    args = parser.parse_args(argv)
    target = args.site_packages
    if args.command == "install":
        try:
            written = install(target)
        except OSError as e:
            print(f"puffadv: cannot write the hook: {e}", file=sys.stderr)
            return 1
        print("puffadv: wrote " + " and ".join(str(p) for p in written) + ". Every Python "
              "started in this environment now lets puffadv serve PufferLib's advantage "
              "operator when PufferLib's own extension is missing or cannot load; "
              "`python -m puffadv.pufferlib_compat uninstall` removes it.")
        return 0
    if args.command == "uninstall":
        try:
            removed = uninstall(target)
        except OSError as e:
            print(f"puffadv: cannot remove the hook: {e}", file=sys.stderr)
            return 1
        print("puffadv: removed " + (" and ".join(str(p) for p in removed) or "nothing") + ".")
        return 0
    hook = "installed" if installed(target) else "not installed"
    print(f"import hook: {hook} in {target or site_packages()}")
    logging.getLogger("puffadv").setLevel(logging.ERROR)  # printed below instead
    print(status())  # pufferlib_compat's: it decides now, as the trainer's import would
    return 0
