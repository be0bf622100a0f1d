"""One import name for the top-level mocks/ and contracts/: `dsakit.mocks` and `dsakit.contracts`
(pyproject's package-dir), the same in an editable install, a wheel and an sdist: no links in the
checkout, no top-level `mocks` / `contracts` module, each file loaded under one name."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
import tarfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest depends on tomli below 3.11
    import tomli as tomllib

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAPPED = {name: folder for name, folder in
          tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"].items()
          if name != folder}  # {"dsakit.mocks": "mocks", "dsakit.contracts": "contracts"}
TOP_LEVEL = set(MAPPED.values())
CODE = ("dsakit", "mocks", "contracts", "tests", "bench", "scripts")


def test_mocks_and_contracts_are_mapped_folders() -> None:
    assert MAPPED == {"dsakit.mocks": "mocks", "dsakit.contracts": "contracts"}


def test_the_checkout_holds_each_file_once() -> None:
    links = sorted(str(p.relative_to(ROOT)) for top in CODE for p in (ROOT / top).rglob("*") if p.is_symlink())
    assert not links, f"links in the checkout (a second path to the same files): {links}"
    for name in MAPPED:
        inside = ROOT.joinpath(*name.split("."))
        assert not inside.exists(), f"{inside.relative_to(ROOT)} exists: {name} is {MAPPED[name]}/ (package-dir)"


def _top_level_imports(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.split(".", 1)[0] in TOP_LEVEL and "." in node.value \
                and node.value.replace(".", "").replace("_", "").isalnum() else []  # import_module("mocks.x")
        else:
            continue
        found += [f"{path.relative_to(root)}:{node.lineno}: {name}" for name in names
                  if name.split(".", 1)[0] in TOP_LEVEL]
    return found


def test_no_code_imports_the_folders_by_their_top_level_names() -> None:
    files = [ROOT / "conftest.py", *(p for top in CODE for p in (ROOT / top).rglob("*.py"))]
    found = [hit for path in files for hit in _top_level_imports(path)]
    assert not found, "imports of the top-level spelling (import dsakit.mocks / dsakit.contracts):\n" + "\n".join(found)


def test_the_scan_sees_a_top_level_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nfrom mocks import read_log\nimport contracts.schema\n"
                     "from dsakit.mocks import strict_node\nname = 'mocks.model_runner'\n", encoding="utf-8")
    assert [hit.split(": ", 1)[1] for hit in _top_level_imports(probe, tmp_path)] == \
        ["mocks", ".".join(("contracts", "schema")), ".".join(("mocks", "model_runner"))]  # not literals: scanned


def test_the_sdist_carries_the_folders_once(built_sdist: Path) -> None:
    with tarfile.open(built_sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"mocks/strict_node.py", "contracts/schema.py"} <= names
    doubled = sorted(n for n in names if n.startswith(tuple(f"{name.replace('.', '/')}/" for name in MAPPED)))
    assert not doubled, doubled


# what the editable install's interpreter reports: the modules of mocks/ and contracts/ by file,
# after the contract suite ran from the checkout (`pytest contracts/...`, as scripts/env.sh main)
PROBE = """
import json, os, sys
import pytest
rc = pytest.main(["contracts/test_model_runner_contract.py", "-q", "-p", "no:cacheprovider", "-k", "role_fixes"])
import dsakit.mocks.strict_node, dsakit.contracts.schema
names = {}
for name, module in list(sys.modules.items()):
    file = getattr(module, "__file__", None) or ""
    real = os.path.realpath(file)
    if any(real.startswith(os.path.join(os.getcwd(), top) + os.sep) for top in ("mocks", "contracts")):
        names.setdefault(os.path.relpath(real), []).append([name, file == real])
print(json.dumps({"rc": int(rc), "names": names}))
"""


@pytest.fixture(scope="module")
def editable(tmp_path_factory: pytest.TempPathFactory,
             venv_over_this_interpreter: Callable[[Path], Path]) -> tuple[Path, Path]:
    """`pip install -e` of a copy of the checkout into a fresh venv (this interpreter's packages
    through a .pth: venv_over_this_interpreter): (the venv's python, the copy)."""
    work = tmp_path_factory.mktemp("editable")
    source = work / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".device", ".cache", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    python = venv_over_this_interpreter(work)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                    "--no-deps", "--ignore-installed", "--no-build-isolation", "-e", str(source)],
                   check=True, timeout=300, capture_output=True)
    return python, source


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "COV_"))}


def test_an_editable_install_imports_only_the_dsakit_names(editable: tuple[Path, Path], tmp_path: Path) -> None:
    python, source = editable
    code = ("import importlib.util, json, dsakit.mocks, dsakit.contracts\n"
            "print(json.dumps([dsakit.mocks.__file__, dsakit.contracts.__file__,\n"
            "                  importlib.util.find_spec('mocks') is None, importlib.util.find_spec('contracts') is None]))")
    done = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    mocks, contracts, no_mocks, no_contracts = json.loads(done.stdout)
    assert (mocks, contracts) == (str(source / "mocks" / "__init__.py"), str(source / "contracts" / "__init__.py"))
    assert no_mocks and no_contracts, "a top-level `mocks` / `contracts` is importable from the install"


def test_the_contract_suite_runs_from_the_checkout_loading_each_file_once(editable: tuple[Path, Path]) -> None:
    python, source = editable
    done = subprocess.run([str(python), "-c", PROBE], cwd=source, env=_env(), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["rc"] == 0, done.stdout[-3000:]
    names = report["names"]
    assert {"mocks/strict_node.py", "contracts/schema.py", "contracts/model_runner_contract.py"} <= set(names)
    # pytest names the suite's own modules by folder (contracts.test_*, contracts.conftest and their
    # package); the library's modules are loaded once, as dsakit.*, through no link
    library = {file: entries for file, entries in names.items()
               if not Path(file).name.startswith(("test_", "conftest")) and file != "contracts/__init__.py"}
    wrong = {file: entries for file, entries in library.items()
             if len(entries) != 1 or not entries[0][0].startswith("dsakit.") or not entries[0][1]}
    assert not wrong, f"loaded under another name, twice, or through a link: {wrong}"
    assert not [n for entries in names.values() for n, _ in entries if n.split(".", 1)[0] == "mocks"]


def test_a_checkout_on_pythonpath_maps_mocks_and_contracts_as_an_install_does(tmp_path: Path) -> None:
    """A GPU node runs the checkout from PYTHONPATH, with no install: `dsakit.mocks` and
    `dsakit.contracts` are still the checkout's mocks/ and contracts/ (no site-packages here, so no
    editable finder answers)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import dsakit.mocks, dsakit.contracts.schema; "
            "print(dsakit.mocks.__file__); print(dsakit.contracts.schema.__file__)")
    result = subprocess.run([sys.executable, "-S", "-c", code, str(ROOT)], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(ROOT / "mocks" / "__init__.py"), str(ROOT / "contracts" / "schema.py")]


def test_an_installed_layout_is_left_to_its_own_files(tmp_path: Path) -> None:
    from dsakit import _checkout_root as checkout_root

    for leaf in ("mocks", "contracts"):  # a wheel: the folders inside dsakit/ (and a stray copy beside)
        (tmp_path / "dsakit" / leaf).mkdir(parents=True)
        (tmp_path / leaf).mkdir()
        (tmp_path / leaf / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    assert checkout_root(str(tmp_path / "dsakit")) is None
    for leaf in ("mocks", "contracts"):
        (tmp_path / "dsakit" / leaf).rmdir()
    assert checkout_root(str(tmp_path / "dsakit")) == str(tmp_path)


def test_an_install_that_maps_the_folders_gets_no_extra_finder() -> None:
    """Where the editable install (or a wheel) maps dsakit.mocks, importing dsakit leaves
    sys.meta_path as it was (a whole run checks that nothing it touched stays changed)."""
    code = ("import sys; before = list(sys.meta_path); import dsakit, dsakit.mocks; "
            "print(before == list(sys.meta_path))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
