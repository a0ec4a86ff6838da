"""puffadv.pufferlib_compat against stand-in PufferLib packages written here (the
real trainers run in tests/pufferlib, in an environment of their own): which
kernel serves torch.ops.pufferlib.compute_puff_advantage, what puffadv says, the
import hook and its install command, and the fallback warning under PufferLib's
warning filters. puffadv decides once per process, so each case is a fresh one."""
from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import puffadv  # noqa: E402
import puffadv.pufferlib_compat as compat  # noqa: E402

EXTENSION_SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # this Python's tag, e.g. .cpython-311-x86_64-linux-gnu.so

HERE = Path(__file__).resolve().parent
CORE_STYLE_INIT = textwrap.dedent("""
    try:  # as pufferlib-core's __init__ does
        from . import _C
    except ImportError:
        pass
    """)
CALL_AND_COMPARE = textwrap.dedent("""
    import torch
    x, d = torch.rand(6, 9, dtype=torch.float64), (torch.rand(6, 9) < 0.2).double()
    out, expected = torch.full((6, 9), float("nan"), dtype=torch.float64), torch.zeros(6, 9, dtype=torch.float64)
    torch.ops.pufferlib.compute_puff_advantage(x, x.flip(1), d, x + 0.5, out, 0.9, 0.8, 1.0, 1.0)
    torch.ops.puffadv.compute_puff_advantage(x, x.flip(1), d, x + 0.5, expected, 0.9, 0.8, 1.0, 1.0)
    print("same", torch.equal(out, expected), "first", float(out[0, 0]))
    """)


def fake_pufferlib(root: Path, init: str = "", files: dict | None = None) -> Path:
    package = root / "pufferlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    for name, content in (files or {}).items():
        path = package / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return root


def run(*parts: str, paths=(), cwd=None):
    """A fresh interpreter running the parts (each dedented) with `paths` on sys.path."""
    code = "".join(textwrap.dedent(part) for part in parts)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, paths), *sys.path]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=env, timeout=180, cwd=cwd or HERE)


def said(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("puffadv: ")]


def test_unloadable_extension_is_replaced_and_named_once(tmp_path):
    root = fake_pufferlib(tmp_path, CORE_STYLE_INIT, {"_C" + EXTENSION_SUFFIX: b"not ELF"})
    done = run("""
        import puffadv.pufferlib_compat as compat
        import pufferlib, pufferlib._C
        from pufferlib import _C
        import importlib; importlib.import_module("pufferlib._C")
        print(compat.kernel()["kernel"], compat.registered_here, _C is pufferlib._C, _C)
        """, CALL_AND_COMPARE, paths=[root])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "puffadv True True <module 'pufferlib._C' (puffadv)>"
    assert lines[1].startswith("same True ")
    path = root / "pufferlib" / ("_C" + EXTENSION_SUFFIX)
    [message] = said(done.stderr)  # once, however often it is imported
    prefix, suffix = compat.MESSAGES["replaced"].split("{error}")
    assert message.startswith(prefix.format(path=path) + "ImportError: ")
    assert message.endswith(suffix.format(devices=compat._devices()))


def test_pufferlib_imported_first_then_compat(tmp_path):
    """pufferlib-core style: its __init__ swallowed the extension's ImportError."""
    root = fake_pufferlib(tmp_path, CORE_STYLE_INIT, {"_C.so": b"not ELF"})
    done = run("""
        import pufferlib
        assert not hasattr(pufferlib, "_C")
        import puffadv.pufferlib_compat
        from pufferlib import _C
        print(pufferlib._C is _C, _C)
        """, CALL_AND_COMPARE, paths=[root])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "True <module 'pufferlib._C' (puffadv)>" and lines[1].startswith("same True ")
    assert len(said(done.stderr)) == 1


def test_loadable_extension_stays_and_is_named(tmp_path):
    """An extension that loads (a Python one here, registering the operator as
    PufferLib's C++ one does) keeps serving the operator; puffadv registers nothing."""
    extension = textwrap.dedent(f"""
        import torch
        _lib = torch.library.Library("pufferlib", "DEF")
        _lib.define({compat.SCHEMA!r})
        _lib.impl("compute_puff_advantage", lambda *a: [a[4].fill_(7.0), None][1], "CPU")
        """)
    root = fake_pufferlib(tmp_path, files={"_C.py": extension})
    done = run("""
        import puffadv.pufferlib_compat as compat
        from pufferlib import _C
        print(compat.kernel()["kernel"], compat.registered_here, _C.__name__, _C._lib is not None)
        """, CALL_AND_COMPARE, paths=[root])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "pufferlib False pufferlib._C True"
    assert lines[1] == "same False first 7.0"  # the extension's kernel ran, not puffadv's
    assert said(done.stderr) == [compat.MESSAGES["own"].format(
        path=root / "pufferlib" / "_C.py", keys="CPU tensors")]


def test_no_pufferlib_at_all():
    done = run("import puffadv.pufferlib_compat as c\nprint(c.kernel()['extension'])\n",
               CALL_AND_COMPARE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "None"
    assert done.stdout.splitlines()[1].startswith("same True ")
    assert said(done.stderr) == [compat.MESSAGES["absent"].format(devices=compat._devices())]


def test_schema_op_eagerly_compiled_and_on_views_it_refuses():
    """puffadv's eager kernel under PufferLib's schema (its autograd keys) keeps what the
    operator underneath does: torch.compile(fullgraph=True) traces it and equals eager, a
    negative view is refused by name, an input that requires grad is read as a constant
    with a warning, and the output's version counter is bumped."""
    done = run("import puffadv.pufferlib_compat\n", CALL_AND_COMPARE, """
        import warnings
        op = torch.ops.pufferlib.compute_puff_advantage

        def step(x, d):
            adv = torch.zeros_like(x)
            op(x, x.flip(1), d, x + 0.5, adv, 0.9, 0.8, 1.0, 1.0)
            return adv * 2

        print("compiled", torch.equal(torch.compile(step, fullgraph=True)(x, d), step(x, d)))
        neg = torch.randn(6, 9, dtype=torch.complex128).conj().imag
        try:
            op(x, neg, d, x + 0.5, out, 0.9, 0.8, 1.0, 1.0)
        except ValueError as e:
            print("refused", str(e).split(" (")[0])
        version = out._version
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            op(x.clone().requires_grad_(), x.flip(1), d, x + 0.5, out, 0.9, 0.8, 1.0, 1.0)
        print("warned", [type(w.message).__name__ for w in caught], out._version > version)
        """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("same True ")
    assert lines[1:] == ["compiled True", "refused rewards is a negative view",
                         "warned ['ConstantInputWarning'] True"], done.stdout


def test_schema_ops_float_arguments_warn_of_what_they_drop():
    """Its float arguments (gamma, lambda, the clips) given as tensors carrying a derivative:
    the derivative is dropped with puffadv's ConstantInputWarning naming the argument, as
    torch.ops.puffadv.compute_puff_advantage does (before, a dual gamma or a clip that
    requires grad was read as its number without a word), and a torch.func transform's
    gamma is refused by name."""
    done = run("import puffadv.pufferlib_compat\n", CALL_AND_COMPARE, """
        import warnings
        import torch.autograd.forward_ad as fw
        op = torch.ops.pufferlib.compute_puff_advantage
        g = torch.tensor(0.9, dtype=torch.float64)
        with fw.dual_level():
            for name, args in (("dual gamma", (fw.make_dual(g, torch.ones_like(g)), 0.8, 1.0, 1.0)),
                               ("rho_clip", (0.9, 0.8, torch.tensor(1.0, requires_grad=True), 1.0))):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    op.default(x, x.flip(1), d, x + 0.5, out, *args)
                print(name, [str(w.message).split(" is a float")[0] for w in caught
                             if type(w.message).__name__ == "ConstantInputWarning"])
        try:
            torch.func.grad(lambda g: (op(x, x.flip(1), d, x + 0.5, out, g, 0.8, 1.0, 1.0), g)[1])(g)
        except TypeError as e:
            print("refused", str(e).split(" is a float")[0])
        with warnings.catch_warnings(record=True) as caught:  # once, not again by puffadv's op beneath
            warnings.simplefilter("always")
            torch.func.grad(lambda v: (op(v, x.flip(1), d, x + 0.5, out, 0.9, 0.8, 1.0, 1.0), v.sum())[1])(x)
        print("transformed values", [str(w.message).split(", but")[0] for w in caught
                                     if type(w.message).__name__ == "ConstantInputWarning"])
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "dual gamma ['gamma of torch.ops.pufferlib.compute_puff_advantage']",
        "rho_clip ['rho_clip of torch.ops.pufferlib.compute_puff_advantage']",
        "refused gamma of torch.ops.pufferlib.compute_puff_advantage",
        "transformed values [\"values is a torch.func transform's tensor\"]"], done.stdout


def test_install_hook_acts_at_import_of_the_extension_only(tmp_path):
    """The .pth installs the finder at startup without importing torch or puffadv;
    importing pufferlib._C then decides. uninstall removes both files."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    root = fake_pufferlib(tmp_path / "pkg", CORE_STYLE_INIT, {"_C.so": b"not ELF"})
    done = subprocess.run([sys.executable, "-m", "puffadv.pufferlib_compat", "install",
                           "--site-packages", str(site_dir)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=180)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in site_dir.iterdir()) == ["_puffadv_pufferlib_hook.py",
                                                          "puffadv-pufferlib.pth"]
    assert said(done.stderr) == []  # installing decides nothing
    (root / "pufferlib" / "pufferl_like_trainer.py").write_text(
        "from pufferlib import _C\nimport torch\n" + CALL_AND_COMPARE)
    done = run(f"""
        import site, sys
        site.addsitedir({str(site_dir)!r})  # what Python does with site-packages at startup
        print("torch" in sys.modules, "puffadv" in sys.modules)
        import pufferlib.pufferl_like_trainer
        """, paths=[root], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "False False"
    assert done.stdout.splitlines()[1].startswith("same True ")
    assert len(said(done.stderr)) == 1 and " cannot be loaded here (ImportError: " in said(done.stderr)[0]
    done = subprocess.run([sys.executable, "-m", "puffadv.pufferlib_compat", "uninstall",
                           "--site-packages", str(site_dir)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=180)
    assert done.returncode == 0 and list(site_dir.iterdir()) == [], done.stderr


def test_fallback_warning_survives_pufferlibs_warning_filter():
    """PufferLib's trainer turns every RuntimeWarning into an error at its import; the
    fallback warning must still be shown, not raised, and the result still written."""
    done = run("""
        import warnings, numpy as np, puffadv
        warnings.filterwarnings("error", category=RuntimeWarning)  # pufferl.py, line 6 / 8
        from puffadv import _fallback
        from fake_device import FakeGpuArray
        if puffadv.backend()["cuda"]["device_count"]:
            raise SystemExit("skip: cuda is usable here")
        _fallback._writer = lambda fw, out, name: ((lambda d, h: np.copyto(d.host, h)), out)
        arrays = [FakeGpuArray(np.ones((4, 5), np.float32)) for _ in range(4)]
        out = FakeGpuArray(np.full((4, 5), np.nan, np.float32))
        with warnings.catch_warnings(record=True) as caught:  # PufferLib's filter stays in force
            puffadv.compute_puff_advantage(*arrays, out)
        print([w.category.__name__ for w in caught], issubclass(puffadv.FallbackWarning, UserWarning),
              bool(np.isfinite(out.host).all()))
        """)
    if "skip:" in done.stderr:
        pytest.skip("cuda is usable here")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "['FallbackWarning'] True True"


def test_hook_steps_aside_silently_without_puffadv(tmp_path):
    """puffadv uninstalled but the hook left behind: imports go on as without it."""
    from puffadv import _pufferlib_install
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    _pufferlib_install.install(site_dir)
    root = fake_pufferlib(tmp_path / "pkg", files={"_C.so": b"not ELF"})
    code = textwrap.dedent(f"""
        import site, sys
        site.addsitedir({str(site_dir)!r})
        print(any(getattr(f, "_puffadv_pufferlib_finder", False) for f in sys.meta_path))
        try:
            import puffadv
        except ImportError:
            print("no puffadv")
        try:
            import pufferlib._C
        except ImportError as e:
            print("ImportError", "_C.so: file too short" in str(e))  # the loader's own error
        """)
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(root)), timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["True", "no puffadv", "ImportError True"]
    assert said(done.stderr) == []


def test_gpu_build_registers_a_cuda_kernel_for_pufferlib_cores_check():
    """pufferlib-core keeps tensors on the GPU only when the dispatcher has a CUDA kernel
    for the operator: a build with a GPU backend registers one (and its autograd key);
    a CPU-only build does not, so that trainer moves tensors to the CPU itself."""
    done = run("""
        import torch, puffadv._report as report
        real = report.backend
        def with_cuda():
            r = real()
            r["cuda"] = dict(r["cuda"], compiled=True)
            return r
        report.backend = with_cuda
        import puffadv.pufferlib_compat as compat
        has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(compat.OPERATOR, key)
        print(has("CUDA"), has("AutogradCUDA"), has("CompositeImplicitAutograd"), compat._devices())
        """, CALL_AND_COMPARE)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "True True True CPU and CUDA tensors"
    assert lines[1].startswith("same True ")
    done = run("import torch, puffadv.pufferlib_compat as c\n"
               "print(torch._C._dispatch_has_kernel_for_dispatch_key(c.OPERATOR, 'CUDA'))\n")
    report = puffadv.backend()
    gpu_build = report["cuda"]["compiled"] or report["hip"]["compiled"]
    assert done.stdout.strip() == str(gpu_build), done.stderr


PYTHON_EXTENSION = textwrap.dedent("""
    import torch
    print("executing pufferlib/_C.py")
    _lib = torch.library.Library("pufferlib", "DEF")  # a second execution fails here
    _lib.define("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
                "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
                "float rho_clip, float c_clip) -> ()")


    def _kernel(values, rewards, dones, importance, advantages, *params):
        advantages.fill_(7.0)


    _lib.impl("compute_puff_advantage", _kernel, "CPU")
    """)


@pytest.mark.parametrize("how", ["import hook", "pufferlib_compat first"])
def test_a_python_extension_module_is_executed_once(tmp_path, how):
    """Found by issue 31's probe: with the hook, deciding bound PufferLib's module in sys.modules
    while pufferlib was mid-import, so the import system took that module's own spec and executed
    pufferlib/_C.py again ("Only a single TORCH_LIBRARY can be used ...")."""
    root = fake_pufferlib(tmp_path / "pkg", CORE_STYLE_INIT, {"_C.py": PYTHON_EXTENSION})
    first = ("from puffadv import _pufferlib_hook; _pufferlib_hook.install_finder()" if how == "import hook"
             else "import puffadv.pufferlib_compat")
    done = run(first, """
        import sys, torch
        import pufferlib
        out = torch.zeros(2, 3)
        x = torch.ones(2, 3)
        torch.ops.pufferlib.compute_puff_advantage(x, x, x, x, out, 0.9, 0.9, 1.0, 1.0)
        import puffadv.pufferlib_compat as compat
        print(compat.kernel()["kernel"], sys.modules["pufferlib._C"] is pufferlib._C, float(out[0, 0]))
        """, paths=[root])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["executing pufferlib/_C.py", "pufferlib True 7.0"], done.stdout


def test_uninstall_that_cannot_remove_prints_one_line(tmp_path, monkeypatch, capsys):
    """Found by issue 31's probe: uninstall on a read-only site-packages printed a traceback,
    where install prints one line and returns 1."""
    from puffadv import _pufferlib_install
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    _pufferlib_install.install(site_dir)

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)  # as a read-only folder does, for root too
    assert _pufferlib_install.main(["uninstall", "--site-packages", str(site_dir)], status=None) == 1
    err = capsys.readouterr().err
    assert err.startswith("puffadv: cannot remove the hook: [Errno 13] Permission denied") and \
        err.count("\n") == 1, err
    monkeypatch.undo()
    assert _pufferlib_install.main(["uninstall", "--site-packages", str(site_dir)], status=None) == 0
    assert list(site_dir.iterdir()) == []
