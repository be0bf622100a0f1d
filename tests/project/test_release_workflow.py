"""The release, as a dry run: the sdist is complete (a user can build the wheel and run dsakit's own
tests from it), the wheel built from that sdist is the one PyPI would get, and
.github/workflows/release.yml parses, triggers on tags, checks the tag against the version and
publishes through trusted publishing (no stored token)."""

from __future__ import annotations

import os
import subprocess
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest

import dsakit
from dsakit.stack.sglang_release import PINNED_RELEASE

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
SDIST_MUST_HAVE = (
    "pyproject.toml", "setup.py", "README.md", "CONTRIBUTING.md", "CHANGELOG.md", "LICENSE", "MANIFEST.in", "conftest.py",
    "tests/conftest.py", "tests/project/test_release_workflow.py",
    "tests/downstream_project/pyproject.toml", "tests/downstream_project/my_backend/__init__.py",
    "tests/downstream_project/tests/conftest.py", "tests/downstream_project/tests/test_my_backend.py",
    "requirements/cpu-torch.txt", f"requirements/cpu-sglang-{PINNED_RELEASE}.txt", "requirements/test.txt",
    "dsakit/recipes/cpu-torch.txt", f"dsakit/recipes/cpu-sglang-{PINNED_RELEASE}.txt",
    "dsakit/plugin.py", "mocks/model_runner.py", "contracts/model_runner_contract.py",
    ".github/workflows/release.yml", "scripts/env.sh",
    "docs/reference/contract.md", "docs/reference/simulated-probes.md",  # the README's tests read them
)


def _step(job: dict[str, Any], name_start: str) -> dict[str, Any]:
    return next(step for step in job["steps"] if str(step.get("name", "")).startswith(name_start))


@pytest.fixture(scope="module")
def workflow() -> dict[Any, Any]:
    yaml = pytest.importorskip("yaml", reason="[no-pyyaml] PyYAML parses the workflow file")
    data: dict[Any, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def release(built_release: dict[str, Path]) -> dict[str, Path]:
    """sdist from a copy of the checkout, then the wheel from the unpacked sdist (what
    `python -m build` does): tests/conftest.py builds them once per run."""
    return built_release


def test_sdist_is_complete(release: dict[str, Path]) -> None:
    with tarfile.open(release["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = [path for path in SDIST_MUST_HAVE if path not in names]
    assert not missing, missing
    junk = sorted(n for n in names if "__pycache__" in n or n.startswith((".venv/", ".git/", ".device/")))
    assert not junk, junk


def test_wheel_from_the_sdist_ships_the_recipe(release: dict[str, Path]) -> None:
    assert release["wheel"].name.startswith(f"pytest_dsakit-{dsakit.__version__}-py3-none-any")
    archive = zipfile.ZipFile(release["wheel"])
    names = set(archive.namelist())
    assert {"dsakit/recipes/cpu-torch.txt", f"dsakit/recipes/cpu-sglang-{PINNED_RELEASE}.txt",
            "dsakit/recipes/__init__.py", "dsakit/plugin.py", "dsakit/py.typed"} <= names
    assert not any(n.startswith(("tests/", "requirements/", "bench/")) for n in names)  # sdist only
    meta = Parser().parsestr(archive.read(f"pytest_dsakit-{dsakit.__version__}.dist-info/METADATA").decode())
    assert (meta["Name"], meta["Version"]) == ("pytest-dsakit", dsakit.__version__)
    assert meta["Description-Content-Type"] == "text/markdown"
    assert "dsakit env" in meta.get_payload()  # the README (long description) names the recipe command


def test_recipe_matches_the_checkouts_requirements() -> None:
    """Until requirements/ is retired, the shipped recipe pins exactly what the checkout installs."""
    def pins(path: Path) -> list[str]:
        return [line.split("#", 1)[0].strip() for line in path.read_text().splitlines()
                if line.split("#", 1)[0].strip()]

    from dsakit.recipes import STEPS

    for step in STEPS:
        assert pins(step.path) == pins(ROOT / "requirements" / step.file), step.file


def test_workflow_publishes_from_a_tag_by_trusted_publishing(workflow: dict[Any, Any]) -> None:
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers == {"push": {"tags": ["v*"]}}
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    uses = [step.get("uses", "") for step in publish["steps"]]
    assert uses[-1] == "pypa/gh-action-pypi-publish@release/v1"
    text = WORKFLOW.read_text()
    assert "secrets." not in text and "password" not in text  # no stored token
    assert "python -m build" in _step(build, "Build")["run"]
    assert "twine check --strict" in _step(build, "Check the metadata")["run"]


@pytest.mark.parametrize(("tag", "rc"), [(f"v{dsakit.__version__}", 0), ("v9.9.9", 1)])
def test_workflow_tag_check(workflow: dict[Any, Any], release: dict[str, Path], tag: str, rc: int) -> None:
    script = _step(workflow["jobs"]["build"], "Check the tag")["run"]
    env = {**os.environ, "GITHUB_REF_NAME": tag}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=release["unpacked"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == rc, done.stderr
    if rc:
        assert f"expected v{dsakit.__version__}" in done.stderr
