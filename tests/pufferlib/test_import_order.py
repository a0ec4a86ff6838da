"""Whatever is imported first, no process aborts and exactly one kernel serves
torch.ops.pufferlib.compute_puff_advantage. PufferLib's extension registers the
operator in a C++ static initialiser: a second registration is a c10::Error
thrown while the library loads, which aborts the process (rc 134)."""
from __future__ import annotations

import textwrap

from conftest import puffadv_lines, run_python

# Each script starts without the environment's import hook, where the order under
# test must be the script's own (`import puffadv.pufferlib_compat` puts it back).
WITHOUT_HOOK = textwrap.dedent("""
    import sys
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "_puffadv_pufferlib_finder", False)]
    import torch
    """)
CALL = textwrap.dedent("""
    from torch.utils._python_dispatch import TorchDispatchMode
    class Seen(TorchDispatchMode):
        names = []
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.name())
            return func(*args, **(kwargs or {}))
    x, zeros, out = torch.rand(4, 8), torch.zeros(4, 8), torch.zeros(4, 8)
    with Seen():
        torch.ops.pufferlib.compute_puff_advantage(x, x, zeros, x, out, 0.9, 0.9, 1.0, 1.0)
    print("ran", *Seen.names)
    """)
SCHEMA_DEF = textwrap.dedent("""
    lib = torch.library.Library("pufferlib", "FRAGMENT")  # as puffadv's compat did before
    lib.define("compute_puff_advantage(Tensor(a!) values, Tensor(b!) rewards, Tensor(c!) dones, "
               "Tensor(d!) importance, Tensor(e!) advantages, float gamma, float lambda, "
               "float rho_clip, float c_clip) -> ()")
    lib.impl("compute_puff_advantage", lambda *a: [a[4].fill_(7.0), None][1], "CPU")
    """)


def run(script, tree):
    return run_python(WITHOUT_HOOK + textwrap.dedent(script), pythonpath=[tree])


def own_message(tree):
    return (f"puffadv: PufferLib's own extension {tree}/pufferlib/_C.so is loaded; its kernel "
            "serves torch.ops.pufferlib.compute_puff_advantage (CPU tensors), not puffadv's.")


def test_a_second_registration_really_aborts(tree_with_extension):
    """The hazard itself, without puffadv: if this stopped aborting, the tests below
    would prove nothing about aborts."""
    done = run(SCHEMA_DEF + "from pufferlib import _C\n", tree_with_extension)
    assert done.returncode == -6, (done.returncode, done.stderr[-2000:])  # SIGABRT
    assert "c10::Error" in done.stderr and "Tried to register an operator" in done.stderr
    assert "multiple times" in done.stderr


def test_extension_first_then_puffadv(tree_with_extension):
    done = run("from pufferlib import _C\nimport puffadv.pufferlib_compat as c\n"
               "print(c.kernel()['kernel'], c.registered_here)\n" + CALL, tree_with_extension)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[0] == "pufferlib False"
    assert "ran pufferlib::compute_puff_advantage\n" in done.stdout  # PufferLib's kernel ran
    assert puffadv_lines(done.stderr) == [own_message(tree_with_extension)]


def test_puffadv_first_then_extension_does_not_abort(tree_with_extension):
    done = run("import puffadv.pufferlib_compat as c\nfrom pufferlib import _C\n"
               "print(c.kernel()['kernel'], _C.__file__)\n" + CALL, tree_with_extension)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert done.stdout.split("\n")[0] == f"pufferlib {tree_with_extension}/pufferlib/_C.so"
    assert "ran pufferlib::compute_puff_advantage\n" in done.stdout
    assert puffadv_lines(done.stderr) == [own_message(tree_with_extension)]


def test_puffadv_before_pufferlib_is_on_the_path(tree_with_extension):
    """puffadv registered when no extension could be loaded; an extension that appears
    on sys.path afterwards is not loaded (it would abort), and puffadv says why."""
    done = run_python(WITHOUT_HOOK + textwrap.dedent(f"""
        import puffadv.pufferlib_compat as c
        sys.path.insert(0, {str(tree_with_extension)!r})
        from pufferlib import _C
        print(c.kernel()['kernel'], _C)
        """) + CALL)
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert done.stdout.split("\n")[0] == "puffadv <module 'pufferlib._C' (puffadv)>"
    assert "ran puffadv::compute_puff_advantage\n" in done.stdout
    said = puffadv_lines(done.stderr)
    # The first line names pufferlib-core's extension, which this environment also has.
    assert len(said) == 2 and " cannot be loaded here (" in said[0], said
    assert said[1].startswith(f"puffadv: PufferLib's extension {tree_with_extension}/pufferlib/_C.so"
                              " was not loaded: puffadv had already registered "), said


def test_operator_registered_elsewhere_then_extension_with_the_hook(tree_with_extension):
    """Another library defined the operator first: with the hook, importing PufferLib's
    extension gives puffadv's stand-in instead of the abort of the first test."""
    done = run_python("import torch\n" + SCHEMA_DEF + "from pufferlib import _C\nprint(_C)\n" + CALL,
                      pythonpath=[tree_with_extension])
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert done.stdout.split("\n")[0] == "<module 'pufferlib._C' (puffadv)>"
    said = puffadv_lines(done.stderr)
    assert len(said) == 1 and said[0].startswith(
        "puffadv: torch.ops.pufferlib.compute_puff_advantage was registered by other code"), said


def test_pufferlib_core_trainer_imported_before_puffadv():
    """pufferlib-core's trainer records at import that its extension is missing; puffadv,
    imported later, updates that record, so the trainer's own wrapper runs."""
    done = run_python(WITHOUT_HOOK + textwrap.dedent("""
        import pufferlib.pufferl as pufferl
        assert pufferl._C_AVAILABLE is False
        import puffadv, puffadv.pufferlib_compat
        x = torch.rand(4, 8)
        out = pufferl.compute_puff_advantage(x, x, x * 0, x, torch.zeros(4, 8), 0.9, 0.9, 1.0, 1.0)
        expected = torch.zeros(4, 8)
        torch.ops.puffadv.compute_puff_advantage(x, x, x * 0, x, expected, 0.9, 0.9, 1.0, 1.0)
        report = puffadv.backend()
        gpu_build = report["cuda"]["compiled"] or report["hip"]["compiled"]
        print(pufferl._C_AVAILABLE, pufferl.ADVANTAGE_CUDA == gpu_build, torch.equal(out, expected))
        """))
    assert done.returncode == 0, done.stderr[-3000:]
    # ADVANTAGE_CUDA: GPU tensors stay on the GPU exactly when puffadv can compute there.
    assert done.stdout.split() == ["True", "True", "True"]
    assert "Could not load pufferlib._C extension" in done.stderr  # its own, at its import
    said = puffadv_lines(done.stderr)
    assert len(said) == 1 and " cannot be loaded here (ImportError: " in said[0], said
