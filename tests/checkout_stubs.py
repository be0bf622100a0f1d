"""A copy of the checkout's shell entry points whose heavy steps only record what they were asked.

Owns: a folder holding the real `.ci/run`, `scripts/env.sh`, `scripts/releases.py`, `requirements/`,
`pyproject.toml` and `dsakit/` (the release table), where `.venv/bin/python` and `.venv/bin/dsakit`
(and, for `.ci/run`, `scripts/env.sh`) are stubs that append their arguments to `calls.jsonl`: the
stub python runs `scripts/*.py` for real and records everything else (pip installs, pytest,
bench/releases_table.py). Nothing is installed or downloaded. Imported by test files as
`tests.checkout_stubs`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = (".ci/run", "scripts/env.sh", "scripts/releases.py", "pyproject.toml")

_RECORD = """import json, os, sys
with open(os.environ["STUB_CALLS"], "a", encoding="utf-8") as out:
    out.write(json.dumps([sys.argv[1], sys.argv[2:]]) + "\\n")
"""


def _stub(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(0o755)


def stub_checkout(folder: Path, *, stub_env_sh: bool = False) -> Path:
    """The copy in `folder`; with `stub_env_sh`, scripts/env.sh records its arguments too (for `.ci/run`)."""
    for relative in COPIED:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, folder / relative)
    shutil.copytree(ROOT / "requirements", folder / "requirements")
    shutil.copytree(ROOT / "dsakit", folder / "dsakit", ignore=shutil.ignore_patterns("__pycache__"))
    (folder / ".stubs").mkdir()
    (folder / ".stubs" / "record.py").write_text(_RECORD, encoding="utf-8")
    record = f'exec "{sys.executable}" "{folder}/.stubs/record.py"'
    _stub(folder / ".venv" / "bin" / "python",
          f'case "$1" in scripts/*.py) exec "{sys.executable}" "$@" ;; esac\n{record} python "$@"\n')
    _stub(folder / ".venv" / "bin" / "dsakit", f'{record} dsakit "$@"\n')
    if stub_env_sh:
        _stub(folder / "scripts" / "env.sh", f'{record} env.sh "$@"\n')
    return folder


def set_release_table(folder: Path, supported: tuple[str, ...], pinned: str) -> None:
    """Rewrite the copy's release table (dsakit/stack/sglang_release.py) as a contributor adding a release would."""
    path = folder / "dsakit" / "stack" / "sglang_release.py"
    text = path.read_text(encoding="utf-8")
    text, n = re.subn(r"^SUPPORTED_RELEASES = \(.*\)$", f"SUPPORTED_RELEASES = {supported!r}", text, flags=re.M)
    text, m = re.subn(r'^PINNED_RELEASE = ".*"$', f"PINNED_RELEASE = {pinned!r}", text, flags=re.M)
    assert (n, m) == (1, 1), "the release table's two lines moved: update tests/checkout_stubs.py"
    path.write_text(text, encoding="utf-8")


def run(folder: Path, *command: str) -> tuple[subprocess.CompletedProcess[str], list[tuple[str, list[str]]]]:
    """`bash COMMAND...` in the copy (PYTHON: this interpreter, for env.sh's first steps); the
    process and the stubs' calls in order."""
    calls = folder / "calls.jsonl"
    calls.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "VIRTUAL_ENV", "PYTHON"))}
    env.update(STUB_CALLS=str(calls), PYTHON=sys.executable)
    done = subprocess.run(["bash", *command], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    found = [tuple(json.loads(line)) for line in calls.read_text(encoding="utf-8").splitlines()] if calls.exists() else []
    return done, [(str(name), list(args)) for name, args in found]
