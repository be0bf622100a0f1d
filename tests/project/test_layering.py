"""The wing order in pyproject.toml ([tool.importlinter]) holds, and holds for lazy imports too: a
copy of the package with one function-level import that runs backwards is refused."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("importlinter", reason="[import-linter-missing] pip install -r requirements/test.txt "
                    "(import-linter checks the declared layering)")

ROOT = Path(__file__).resolve().parents[2]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo"], cwd=tree,
                          capture_output=True, text=True, timeout=120)


def _installed_layout() -> object:
    spec = importlib.util.spec_from_file_location("installed_layout", ROOT / "scripts" / "installed_layout.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The package as lint-imports sees it in scripts/env.sh test: laid out as an install has it
    (mocks/ and contracts/ copied inside dsakit/ by scripts/installed_layout.py)."""
    layout: Any = _installed_layout()
    return Path(layout.lay_out(tmp_path))


def test_the_declared_layering_holds(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(("module", "target"), [
    ("reasons.py", "dsakit.cli"),  # a leaf reaching the top
    ("gates/table.py", "dsakit.sglang_facts.scope"),  # gates below sglang_facts
    ("stack/sglang_release.py", "dsakit.gates.marks"),  # the release table below the gates
    ("active.py", "dsakit.session"),  # the leaf of active runs below the session that pushes itself
    ("mocks/read_log.py", "dsakit.topk.cases"),  # a folder package-dir maps into dsakit
])
def test_a_lazy_import_against_the_order_is_refused(tree: Path, module: str, target: str) -> None:
    path = tree / "dsakit" / module
    path.write_text(path.read_text(encoding="utf-8")
                    + f"\n\ndef _backwards() -> None:\n    import {target}  # noqa: F401\n", encoding="utf-8")
    result = _lint(tree)
    assert result.returncode == 1
    importer = "dsakit." + module.removesuffix(".py").replace("/", ".")
    assert f"- {importer} -> {target} (l." in result.stdout, result.stdout


@pytest.mark.parametrize("target", ["dsakit.sglang_facts.runner_source", "dsakit.sglang_facts.backend_reads", "dsakit.sglang_facts.runner_site_scan"])
def test_an_import_of_a_source_scan_from_the_mock_is_refused(tree: Path, target: str) -> None:
    """The layers allow mocks -> sglang_facts; the mock's wording of where the real ModelRunner sets an
    attribute reads the declared table (dsakit.contracts.runner_sites), never the source scan."""
    mock = tree / "dsakit" / "mocks" / "strict_node.py"
    mock.write_text(mock.read_text(encoding="utf-8")
                    + f"\n\ndef _scan() -> None:\n    import {target}  # noqa: F401\n", encoding="utf-8")
    result = _lint(tree)
    assert result.returncode == 1, result.stdout
    assert "the mock words its errors from declared data, not from the SGLang source scan BROKEN" in result.stdout
    assert f"dsakit.mocks.strict_node -> {target} (l." in result.stdout, result.stdout


def test_the_top_level_keeps_entry_points_and_leaves() -> None:
    """At most 12 top-level modules (CONTRIBUTING, Architecture: entry points and leaves); a concept
    with modules of its own is a wing."""
    modules = sorted(path.name for path in (ROOT / "dsakit").glob("*.py"))
    assert len(modules) <= 12, modules


def test_run_state_is_the_sessions() -> None:
    """One pytest run's state sits on one stash key, the DsakitSession's (dsakit/session.py): no other
    module keeps its own."""
    holders = sorted(str(path.relative_to(ROOT)) for folder in ("dsakit", "mocks", "contracts")
                     for path in (ROOT / folder).rglob("*.py")
                     if "StashKey[" in path.read_text(encoding="utf-8") and not path.name.startswith("test_"))
    assert holders == ["dsakit/session.py"], holders
