"""What downstream suites get: only the `dsakit` name, its entry points, a light import."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

import dsakit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(built_wheel: Path) -> Path:
    return built_wheel


def _metadata(wheel: Path) -> Message:
    archive = zipfile.ZipFile(wheel)
    name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    return Parser().parsestr(archive.read(name).decode())


def test_wheel_installs_only_the_dsakit_name(wheel: Path) -> None:
    assert wheel.name.startswith(f"pytest_dsakit-{dsakit.__version__}-")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    assert top_level == {"dsakit", f"pytest_dsakit-{dsakit.__version__}.dist-info"}
    assert "dsakit/mocks/model_runner.py" in names and "dsakit/contracts/model_runner_contract.py" in names
    assert any(n.startswith("dsakit/contracts/__snapshots__/") for n in names)
    assert "dsakit/py.typed" in names  # mypy reads dsakit's hints downstream
    assert f"pytest_dsakit-{dsakit.__version__}.dist-info/licenses/LICENSE" in names
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[pytest11]\ndsakit = dsakit.plugin" in entry_points
    assert "dsakit = dsakit.cli:main" in entry_points


def test_wheel_metadata(wheel: Path) -> None:
    meta = _metadata(wheel)
    assert meta["Name"] == "pytest-dsakit"  # `dsakit` on PyPI is someone else's package
    assert meta["Version"] == dsakit.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Framework :: Pytest" in meta.get_all("Classifier")
    assert "Typing :: Typed" in meta.get_all("Classifier")
    requires = sorted(meta.get_all("Requires-Dist"))
    assert requires == sorted([
        "pytest>=8.0", "filelock>=3.12",
        'syrupy<8,>=7; extra == "snapshot"', 'numpy>=1.24; extra == "snapshot"',
        'pytest-xdist>=3.5; extra == "test"', 'pytest-split>=0.9; extra == "test"',
        'pytest-dsakit[snapshot]; extra == "test"',
    ]), requires
    assert sorted(meta.get_all("Provides-Extra")) == ["snapshot", "test"]
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Source", "Issues", "Changelog"}
    assert "pip install pytest-dsakit" in meta.get_payload()  # the README is the long description


def test_syrupy_floor_matches_the_fixture_error() -> None:
    from dsakit.topk.snapshot_requirements import SYRUPY_MAJOR

    text = (ROOT / "pyproject.toml").read_text()
    assert f'"syrupy>={SYRUPY_MAJOR},<{SYRUPY_MAJOR + 1}"' in text
    pinned = (ROOT / "requirements" / "test.txt").read_text()
    assert f"syrupy=={SYRUPY_MAJOR}." in pinned


def test_changelog_has_this_version() -> None:
    assert f"## {dsakit.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_version_command() -> None:
    result = subprocess.run([sys.executable, "-m", "dsakit", "--version"], capture_output=True, text=True, check=True)
    assert result.stdout == f"dsakit {dsakit.__version__} (distribution pytest-dsakit) at {Path(dsakit.__file__).parent}\n"


def test_import_and_plugin_load_import_no_torch_or_sglang() -> None:
    code = (
        "import sys, dsakit, dsakit.plugin, dsakit.cli\n"
        "heavy = [m for m in ('torch', 'sglang', 'triton', 'flashinfer', 'sgl_kernel') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_every_public_name_resolves_and_is_not_shadowed_by_a_module() -> None:
    for module in pkgutil.iter_modules(dsakit.__path__, "dsakit."):
        if module.name.startswith("dsakit.test") or module.name in ("dsakit.__main__", "dsakit.bench"):
            continue
        importlib.import_module(module.name)
    for name in dsakit.__all__:
        value = getattr(dsakit, name)
        assert not isinstance(value, types.ModuleType), f"dsakit.{name} is shadowed by the module {value.__name__}"
