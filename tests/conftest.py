"""Shared scaffolding of dsakit's own tests (pytester comes from the root conftest)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from dsakit.sglang_release import SGLangRelease

# a separate project's suite, run from the built wheel by test_downstream_wheel.py, not collected here
collect_ignore = ["downstream_project", "suites"]


@pytest.fixture
def no_kernel_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs see no kernel modules, so gate outcomes match on this box and on a GPU node."""
    from dsakit.gates import table as gates

    monkeypatch.setattr(gates, "_importable", lambda name: False)
    monkeypatch.setattr(gates, "_package_dir", lambda name: None)


@pytest.fixture
def installed_sglang() -> SGLangRelease:
    """The SGLang installed here, whose source audits and scans read; skips with
    [sglang-not-installed] where there is none."""
    from dsakit.errors import UsageError
    from dsakit.sglang_release import installed_release

    try:
        return installed_release()
    except UsageError as error:
        pytest.skip(f"[sglang-not-installed] needs the installed SGLang source: {error}")


@pytest.fixture
def write_files(tmp_path: Path) -> Callable[[dict[str, str]], Path]:
    """`write_files({"pkg/test_x.py": source, ...})`: each source dedented into tmp_path (folders
    made as needed); returns tmp_path."""
    def write(files: dict[str, str]) -> Path:
        for name, text in files.items():
            path = tmp_path / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
        return tmp_path

    return write


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


@pytest.fixture(scope="session")
def sglang_release_tree(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """`tree("0.5.21")`: an unpacked SGLang wheel of that release (the folder holding `sglang/`),
    downloaded once with `pip download --no-deps` into the pytest cache (a session temp dir under
    -p no:cacheprovider); skips with [sglang-wheel-unavailable] where pip cannot fetch it (offline)."""
    import zipfile

    cache = getattr(request.config, "cache", None)

    def tree(version: str) -> Path:
        where = Path(cache.mkdir(f"dsakit-sglang-{version}")) if cache is not None else \
            tmp_path_factory.mktemp(f"sglang-{version}")
        unpacked = where / "tree"
        if (unpacked / "sglang" / "__init__.py").is_file():
            return unpacked
        wheels = where / "wheels"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
             "--disable-pip-version-check", f"sglang=={version}", "-d", str(wheels)],
            capture_output=True, text=True, timeout=600, check=False)
        found = sorted(wheels.glob(f"sglang-{version}-*.whl")) if done.returncode == 0 else []
        if not found:
            pytest.skip(f"[sglang-wheel-unavailable] no SGLang {version} wheel: `pip download --no-deps "
                        f"sglang=={version}` failed (offline?): "
                        + (done.stderr.strip().splitlines() or ["pip found no wheel"])[-1])
        partial = where / f"tree.partial-{os.getpid()}"  # one per xdist worker
        try:
            with zipfile.ZipFile(found[0]) as wheel:
                wheel.extractall(partial, [n for n in wheel.namelist() if n.startswith("sglang/")])
            partial.rename(unpacked)  # whole or absent: a worker killed mid-unpack leaves no half tree
        except OSError:
            if not (unpacked / "sglang" / "__init__.py").is_file():  # not another worker's rename
                raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return unpacked

    return tree
