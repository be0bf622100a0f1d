"""The proof for downstream suites: a separate project (tests/downstream_project: a contract
extension, ini keys, a conftest, fixtures, gates, must-run, top-k checks, selection_snapshot)
installs the BUILT WHEEL into a fresh venv and passes with `pytest` and `-n 2`; the SDIST, installed
into a second venv, installs exactly the wheel's files (the wheel is built from the sdist the way
pip builds it), so the project's runs are not repeated there.

The venv sees this interpreter's site-packages through a .pth file (torch, SGLang and the test
tools are not reinstalled), but `dsakit` must come from the wheel: the checkout is not on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "downstream_project"


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def venv(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
         venv_over_this_interpreter: Callable[[Path], Path]) -> Path:
    # the sdist builds its wheel inside pip (setuptools from this interpreter, no download)
    built = request.getfixturevalue(f"built_{request.param}")
    work = tmp_path_factory.mktemp(f"downstream-{request.param}")
    # this interpreter's packages (torch, SGLang, pytest, syrupy, numpy, xdist), after the venv's own
    python = venv_over_this_interpreter(work)
    # the wheel itself, also where this interpreter has pytest-dsakit installed (editable, as in a
    # checkout's .venv: pip would call it satisfied and install nothing); its dependencies and the
    # `snapshot` extra come from this interpreter's packages
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index",
                    "--no-deps", "--ignore-installed", "--no-build-isolation", str(built)],
                   check=True, timeout=300, env=_env())
    return work


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "DSAKIT_DEVICE") and not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # -P: the working directory is not put on sys.path, as with the `pytest` and `dsakit` commands
    # the README tells a user to type (`python -m pytest` would import my_backend from there)
    return subprocess.run([str(venv / "venv" / "bin" / "python"), "-P", *args], cwd=cwd, env=_env(),
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("venv", ["wheel"], indirect=True)
def test_downstream_project_passes_from_the_wheel(venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)

    where = _run(venv, project, "-c", "import dsakit, sys; print(dsakit.__file__)")
    assert where.stdout.strip().startswith(str(venv / "venv")), where.stdout + where.stderr
    version = _run(venv, project, "-m", "dsakit", "--version")
    assert version.stdout.startswith("dsakit 0.1.0 (distribution pytest-dsakit) at " + str(venv / "venv"))

    # the CPU recipe ships in the package: `dsakit env` names files inside this install
    recipe = _run(venv, project, "-m", "dsakit", "env")
    files = [line.rsplit(" -r ", 1)[1] for line in recipe.stdout.splitlines() if " -r " in line]
    assert recipe.returncode == 0 and len(files) == 2, recipe.stdout + recipe.stderr
    assert all(f.startswith(str(venv / "venv")) and Path(f).is_file() for f in files), files

    # the static check scans the project's own backend against the extended contract
    check = _run(venv, project, "-m", "dsakit", "contract", "check", "--backend-src", "my_backend")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 missing from contract" in check.stdout.splitlines()[-1]

    # no goldens yet: one --snapshot-update run writes them and passes; later runs compare
    update = _run(venv, project, "-m", "pytest", "--snapshot-update")
    assert update.returncode == 0, update.stdout + update.stderr
    assert "2 snapshots generated" in update.stdout
    golden = project / "tests" / "__snapshots__" / "test_my_backend" / "selections.topksel"
    written = golden.read_bytes()
    # a second update compares (the project's path is not the reference) and keeps both goldens
    again = _run(venv, project, "-m", "pytest", "--snapshot-update")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 snapshots passed" in again.stdout and "deleted" not in again.stdout.lower(), again.stdout
    assert golden.read_bytes() == written

    for extra in ((), ("-n", "2")):
        run = _run(venv, project, "-m", "pytest", *extra)
        assert run.returncode == 0, run.stdout + run.stderr
        final = run.stdout.strip().splitlines()[-1]
        assert "7 passed, 1 skipped" in final, final
        assert "dsakit: device NVIDIA B300" in run.stdout or "-n" in extra
        assert "[fa3]" in run.stdout  # the skip inventory names the gate
    report = json.loads((project / "dsakit-report.json").read_text())  # ini path: relative to pyproject
    assert report["must_run"] == {"codes": ["sm~10", "cuda"], "failed": {}, "no_test_behind": [], "strict": False}


# the wheel only: built_wheel is the wheel built from built_sdist (tests/conftest.py), what the sdist
# install builds too; this checks dsakit's verdicts in an install, which the passing run covers per install
@pytest.mark.parametrize("venv", ["wheel"], indirect=True)
def test_a_broken_backend_fails_the_downstream_run(venv: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project)
    backend = project / "my_backend" / "__init__.py"
    backend.write_text(backend.read_text().replace("model_runner.page_size", "model_runner.page_sizes"))
    check = _run(venv, project, "-m", "dsakit", "contract", "check", "--backend-src", "my_backend")
    assert check.returncode == 1 and "model_runner.page_sizes is read at" in check.stdout
    run = _run(venv, project, "-m", "pytest", "-q", "-k", "not goldens")
    assert run.returncode == 1
    assert "model_runner.page_sizes is not in the dsakit role contract" in run.stdout
    # must-run: a device without SM 10.x skips the gated test, and that fails the run
    gated = _run(venv, project, "-m", "pytest", "-q", "-k", "blackwell", "-o", "dsakit_device=sm90")
    assert gated.returncode == 1
    assert "1 --dsakit-must-run gate(s) failed" in gated.stdout.strip().splitlines()[-1]


def _record(lines: str) -> set[tuple[str, str]]:
    """(path, hash) of each RECORD row but the RECORD's own."""
    rows = {tuple(line.split(",")[:2]) for line in lines.splitlines() if line.strip()}
    return {(path, digest) for path, digest in rows if not path.endswith(".dist-info/RECORD")}


@pytest.mark.parametrize("venv", ["sdist"], indirect=True)
def test_the_sdist_installs_the_files_of_the_wheel_the_project_passes_from(venv: Path, built_wheel: Path,
                                                                          tmp_path: Path) -> None:
    """The wheel the project passes from (above) is built from the sdist with this interpreter's
    setuptools, as `pip install SDIST` builds it: the sdist's install holds the same files, byte for
    byte, plus only what pip itself writes (bytecode, the console script, INSTALLER / REQUESTED /
    direct_url.json). A file pip's build of the sdist adds, drops or builds otherwise shows here; a
    file the sdist lacks is missing from the wheel too, and the project's run above fails. (Before,
    this venv repeated all of that run: ~14 CPU-s.)"""
    import zipfile

    with zipfile.ZipFile(built_wheel) as archive:
        wheel = _record(archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))).decode())
    (installed_record,) = (venv / "venv").glob("lib/python*/site-packages/pytest_dsakit-*.dist-info/RECORD")
    installed = _record(installed_record.read_text())
    assert wheel and wheel <= installed, sorted(wheel - installed)[:20]
    by_pip = sorted(path for path, _ in installed - wheel if not (
        "/__pycache__/" in path or path.startswith("../../../bin/")
        or path.rsplit("/", 1)[-1] in ("INSTALLER", "REQUESTED", "direct_url.json")))
    assert by_pip == [], by_pip
    where = _run(venv, tmp_path, "-c", "import dsakit, sys; print(dsakit.__file__)")
    assert where.stdout.strip().startswith(str(venv / "venv")), where.stdout + where.stderr
    version = _run(venv, tmp_path, "-m", "dsakit", "--version")
    assert version.stdout.startswith("dsakit 0.1.0 (distribution pytest-dsakit) at " + str(venv / "venv"))
