"""`dsakit contract check|table --project DIR`: a DIR that is not there is a usage error (exit 2).
Before, both exited 0 with dsakit's own contract alone, so a CI gate with a mistyped --project
passed without the project's [tool.dsakit.contract] entries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("command", [["contract", "table"], ["contract", "check"]], ids=["table", "check"])
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_project_that_is_not_a_directory_is_exit_2(tmp_path: Path, command: list[str], kind: str) -> None:
    project = tmp_path / "my-project"
    if kind == "file":
        project.write_text("[tool.dsakit.contract]\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "dsakit", *command, "--project", str(project)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    why = "does not exist" if kind == "missing" else "is a file, not a folder"
    assert f"dsakit: error: --project {project}: {why}; pass the folder that holds your pyproject.toml" \
        in done.stderr, done.stderr


def test_a_project_folder_without_a_declaration_still_prints_the_contract(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dsakit", "contract", "table", "--project", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| `server_args." in done.stdout
