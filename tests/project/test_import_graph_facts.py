"""scripts/import_graph_facts.py reads a tree's imports from its source: layering breaks (lazy ones
too), cycles hidden in functions, an old tree judged where its modules live today."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_graph_facts.py"

PYPROJECT = """
[[tool.importlinter.contracts]]
name = "layers"
type = "layers"
containers = ["dsakit"]
layers = ["top", "low_a | low_b", "base"]
ignore_imports = ["dsakit.contracts.* -> dsakit.**"]

[[tool.importlinter.contracts]]
name = "acyclic"
type = "acyclic_siblings"
ancestors = ["dsakit"]
ignore_imports = ["dsakit.contracts.* -> dsakit.**"]
"""


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("import_graph_facts", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"pyproject.toml": PYPROJECT, "dsakit/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


def test_a_lazy_import_up_the_layers_and_its_cycle_are_counted(script: ModuleType, tmp_path: Path) -> None:
    tree = _tree(tmp_path, {
        "dsakit/top.py": "from dsakit import base\nfrom dsakit.low_a import x\n",
        "dsakit/low_a/__init__.py": "",
        "dsakit/low_a/x.py": "import dsakit.base\n",
        "dsakit/base.py": "def f():\n    from dsakit.low_a import x  # lazy, upwards\n    from . import top\n",
        "dsakit/low_b.py": "from dsakit.low_a.x import name  # independent siblings\n",
    })
    facts = script.facts(tree, tree / "pyproject.toml")
    assert facts["modules"] == 6 and facts["biggest_module"].startswith("dsakit/base.py")
    assert facts["against_layering"] == 3 and facts["against_layering_lazy"] == 2
    assert any("dsakit.low_b imports its independent sibling dsakit.low_a" in w
               for w in facts["against_layering_list"])
    assert facts["wing_cycles"] == [["dsakit.base", "dsakit.low_a", "dsakit.top"]]
    assert facts["wing_cycles_module_level_only"] == []  # the cycle exists only through the lazy imports
    assert ["dsakit.base", "dsakit.low_a.x", "dsakit.top"] in facts["module_cycles"]


def test_an_old_tree_is_placed_by_its_renames_and_mapped_folders_count(script: ModuleType, tmp_path: Path) -> None:
    tree = _tree(tmp_path, {
        "dsakit/old_base.py": "from dsakit.old_top import y\n",
        "dsakit/old_top.py": "",
        "mocks/__init__.py": "", "mocks/m.py": "from mocks import __init__\nfrom dsakit.old_base import z\n",
    })
    unplaced = script.facts(tree, tree / "pyproject.toml")
    assert unplaced["against_layering"] == 0 and "dsakit.old_top" in unplaced["unplaced_modules"]
    assert "dsakit.mocks.m" in unplaced["unplaced_modules"]  # mocks/ is dsakit.mocks, as installed
    renames = script.read_renames("R080\tdsakit/old_base.py\tdsakit/base.py\ndsakit/old_top.py dsakit/top.py\n")
    placed = script.facts(tree, tree / "pyproject.toml", renames)
    assert placed["against_layering_list"] == [
        "dsakit.base:1 -> dsakit.top: dsakit.base (layer 2) imports dsakit.top (layer 0, above)"]


def test_a_folder_that_is_no_checkout_is_a_usage_error(script: ModuleType, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        script.main([str(tmp_path)])
    assert raised.value.code == 2
    assert "is not a dsakit checkout (no dsakit/__init__.py)" in capsys.readouterr().err
