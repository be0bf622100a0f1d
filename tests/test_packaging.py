"""What downstream suites get: only the `dsakit` name, its entry points, a light import."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import dsakit

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_installs_only_the_dsakit_name(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        check=True,
    )
    (wheel,) = tmp_path.glob("dsakit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {name.split("/", 1)[0] for name in names}
    assert top_level == {"dsakit", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    assert "dsakit/mocks/model_runner.py" in names and "dsakit/contracts/model_runner_contract.py" in names
    assert any(n.startswith("dsakit/contracts/__snapshots__/") for n in names)
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "[pytest11]\ndsakit = dsakit.plugin" in entry_points
    assert "dsakit = dsakit.cli:main" in entry_points


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
