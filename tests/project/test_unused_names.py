"""No dead names: every function, class, method and module-level constant dsakit defines is used
somewhere in the repository (scripts/unused_names.py counts each identifier's occurrences as a
word across the tracked files), or is listed as called by another library, with its caller."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "unused_names.py"


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unused_names", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_name_dsakit_defines_is_used(script: ModuleType) -> None:
    unused = script.unused_names()
    assert unused == [], "\n".join(f"{file}:{line} {name}: unused anywhere; delete it" for file, line, name in unused)


def test_a_name_defined_and_never_used_is_found(script: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "dsakit").mkdir()
    (tmp_path / "dsakit" / "m.py").write_text(
        "USED = 1\nLONELY = 2\n\n\ndef helper():\n    return USED\n\n\ndef pytest_configure(config):\n    pass\n",
        encoding="utf-8")
    (tmp_path / "tests.py").write_text("from dsakit.m import helper\n", encoding="utf-8")
    assert script.unused_names(tmp_path) == [("dsakit/m.py", 2, "LONELY")]  # no git here: the tree is read


def test_each_outside_caller_row_names_a_definition(script: ModuleType) -> None:
    for file, name in script.CALLED_FROM_OUTSIDE:
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        assert any(getattr(node, "name", None) == name for node in ast.walk(tree)), f"{file} no longer defines {name}"
