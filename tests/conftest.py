"""Shared scaffolding of dsakit's own tests (pytester comes from the root conftest)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# a separate project's suite, run from the built wheel by test_downstream_wheel.py, not collected here
collect_ignore = ["downstream_project", "suites"]


@pytest.fixture
def no_kernel_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs see no kernel modules, so gate outcomes match on this box and on a GPU node."""
    from dsakit.gates import table as gates

    monkeypatch.setattr(gates, "_importable", lambda name: False)
    monkeypatch.setattr(gates, "_package_dir", lambda name: None)


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pytest-dsakit wheel, built from a copy of the checkout: setuptools leaves build/ and
    *.egg-info in the source tree, and a stale build/lib would put deleted modules in the wheel."""
    root = Path(__file__).resolve().parent.parent
    work = tmp_path_factory.mktemp("wheel-build")
    source = work / "src"
    shutil.copytree(root, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".device", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(work / "dist"), str(source)], check=True, timeout=300)
    (wheel,) = (work / "dist").glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def built_sdist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pytest-dsakit sdist, built from a copy of the checkout (as `built_wheel`)."""
    root = Path(__file__).resolve().parent.parent
    work = tmp_path_factory.mktemp("sdist-build")
    source = work / "src"
    shutil.copytree(root, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".device", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    (work / "dist").mkdir()
    subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
                    "b.build_sdist(sys.argv[1])", str(work / "dist")], cwd=source, check=True, timeout=300,
                   capture_output=True)
    (sdist,) = (work / "dist").glob("*.tar.gz")
    return sdist
