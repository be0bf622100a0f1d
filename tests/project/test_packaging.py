"""What downstream suites get: only the `dsakit` name, its entry points, a light import."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
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


# ---------------------------------------------------------------- every package ships, by discovery


def _package_dirs() -> dict[str, str]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pytest depends on tomli below 3.11
        import tomli as tomllib
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    mapping: dict[str, str] = tomllib.loads(text)["tool"]["setuptools"]["package-dir"]
    return mapping


def _checkout_packages() -> dict[str, str]:
    """import name -> checkout folder (`dsakit.simulation` -> `dsakit/simulation/`) of every folder
    with an `__init__.py` that an install lays out under dsakit/ (mocks/ and contracts/ included)."""
    found: dict[str, str] = {}
    for name, folder in _package_dirs().items():
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(ROOT / folder).parts
            found[".".join((name, *parts))] = "/".join((folder, *parts)) + "/"
    return found


def _folder_table() -> str:
    """CONTRIBUTING.md's folder table (Architecture): its `| folder | concern |` rows."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    start = text.index("| folder | concern |")
    return text[start:text.index("\n\n", start)]


def test_every_package_is_discovered_and_ships_in_the_wheel_and_the_sdist(built_release: dict[str, Path]) -> None:
    """No package list to keep: setup.py discovers the packages, so every folder with an
    `__init__.py` is a package of the wheel and the sdist, and none ships only through setuptools'
    "Package would be ignored" fallback (as package data of its parent)."""
    import tarfile

    spec = importlib.util.spec_from_file_location("dsakit_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # its setup() call runs only as __main__ (the build backend's run)
    packages = _checkout_packages()
    assert {"dsakit", "dsakit.simulation", "dsakit.mocks", "dsakit.contracts", "dsakit.recipes"} <= set(packages)
    assert sorted(setup.discovered_packages()) == sorted(packages)
    wheel = set(zipfile.ZipFile(built_release["wheel"]).namelist())
    with tarfile.open(built_release["sdist"]) as archive:
        sdist = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    log = built_release["wheel_log"].read_text(encoding="utf-8")
    for name, folder in packages.items():
        assert name.replace(".", "/") + "/__init__.py" in wheel, f"{name} is not in the wheel"
        assert folder + "__init__.py" in sdist, f"{folder} is not in the sdist"
        assert f"Package '{name}' is absent from the `packages` configuration" not in log, (
            f"{name} ships only as package data (setuptools' fallback), not as a package")


def test_contributing_s_folder_table_names_every_package_and_top_level_module() -> None:
    """The map a newcomer reads: every package folder has its row, every top-level module of
    dsakit/ is named in the `dsakit/` row."""
    table = _folder_table()
    folders = {cell for row in table.splitlines()[2:] for cell in re.findall(r"`([^`]+)`", row.split("|")[1])}
    missing = sorted(folder for name, folder in _checkout_packages().items() if folder not in folders)
    assert not missing, f"CONTRIBUTING.md's folder table has no row for {missing}"
    top_row = next(row for row in table.splitlines() if row.split("|")[1].strip() == "`dsakit/`")
    named = set(re.findall(r"`([^`]+)`", top_row.split("|")[2]))
    modules = sorted(p.stem for p in (ROOT / "dsakit").glob("*.py"))
    unnamed = [m for m in modules if m not in named]
    assert not unnamed, f"CONTRIBUTING.md's `dsakit/` row does not name the top-level modules {unnamed}"
