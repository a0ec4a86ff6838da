"""The installed package as a release ships it: one version everywhere (wheel
metadata, puffadv.__version__, the CMake package, CMakeLists.txt), the licence
and the typing files, and test requirements that agree with the [test] extra."""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest

import puffadv

SOURCE = Path(__file__).resolve().parents[2]  # the checkout, when the tests run from one
PACKAGE = Path(puffadv.__file__).resolve().parent


def _cmake_project_version() -> str | None:
    cmakelists = SOURCE / "CMakeLists.txt"
    if not cmakelists.is_file():
        return None  # the tests were copied out of the checkout (cibuildwheel's test-sources)
    match = re.search(r"project\(puffadv\s+VERSION\s+([0-9.]+)", cmakelists.read_text())
    assert match, "CMakeLists.txt has no project(puffadv VERSION x.y.z)"
    return match.group(1)


def _cmake_package_version() -> str:
    config = Path(puffadv.cmake_dir()) / "puffadvConfigVersion.cmake"
    match = re.search(r'set\(PACKAGE_VERSION "([^"]+)"\)', config.read_text())
    assert match, f"no PACKAGE_VERSION in {config}"
    return match.group(1)


def test_one_version_everywhere():
    versions = {
        "wheel metadata": metadata.version("puffadv"),
        "puffadv.__version__": puffadv.__version__,
        "CMake package (puffadvConfigVersion.cmake)": _cmake_package_version(),
    }
    source_version = _cmake_project_version()
    if source_version is not None:
        versions["CMakeLists.txt project(VERSION)"] = source_version
    assert len(set(versions.values())) == 1, versions
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", puffadv.__version__)


def test_licence_in_metadata():
    meta = metadata.metadata("puffadv")
    assert meta["License-Expression"] == "MIT"
    files = {str(f) for f in (metadata.files("puffadv") or [])}
    licence = [f for f in files if f.endswith(".dist-info/licenses/LICENSE")]
    assert licence, sorted(files)
    text = metadata.distribution("puffadv").locate_file(licence[0]).read_text()
    assert text.startswith("MIT License")


def test_typing_files_installed():
    assert (PACKAGE / "py.typed").is_file()
    if puffadv.backend()["sanitizers"]:
        pytest.skip("sanitizer builds skip the stubs (stubgen would have to import the ASan build)")
    stub = PACKAGE / "_core.pyi"
    assert stub.is_file(), "no _core.pyi beside the compiled module"
    # Every function the compiled module exposes is in its stub, with a signature.
    from puffadv import _core
    names = {n for n in dir(_core) if not n.startswith("_") and callable(getattr(_core, n))}
    text = stub.read_text()
    missing = {n for n in names if not re.search(rf"^(def|class) {n}\b", text, re.M)}
    assert not missing, missing


def _requirement_name(line: str) -> str:
    return re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_test_extra_matches_requirements_file():
    """Each [test] extra entry appears, with the same specifier, in requirements-test.txt
    (which adds build tools and the frameworks the suite also covers); no duplicates."""
    pyproject = SOURCE / "pyproject.toml"
    requirements = SOURCE / "requirements-test.txt"
    if not (pyproject.is_file() and requirements.is_file()):
        pytest.skip("not run from a checkout")
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["test"]
    lines = [ln.split("#", 1)[0].strip() for ln in requirements.read_text().splitlines()]
    lines = [ln for ln in lines if ln]
    for listing in (extra, lines):
        names = [_requirement_name(r) for r in listing]
        assert len(names) == len(set(names)), f"duplicates in {listing}"
    assert set(extra) <= set(lines), set(extra) - set(lines)


def test_documentation_links_point_at_files_the_repository_has():
    """README.md, CHANGELOG.md and docs/*.md link only to files that exist (a
    link to a file outside the repository, like the old SPEC.md, is a dead end)."""
    pages = [SOURCE / "README.md", SOURCE / "CHANGELOG.md", *sorted((SOURCE / "docs").glob("*.md"))]
    if not pages[0].is_file():
        pytest.skip("not run from a checkout")
    link = re.compile(r"\]\(([^)\s]+)\)")
    dead = []
    for page in pages:
        for target in link.findall(page.read_text()):
            path = target.split("#", 1)[0]
            if not path or re.match(r"[a-z]+:", path):  # an anchor on the same page, or a URL
                continue
            if not (page.parent / path).exists():
                dead.append(f"{page.relative_to(SOURCE)}: {target}")
    assert not dead, dead
