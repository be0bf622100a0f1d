"""The environment a test gives the pytest (or dsakit) process it starts.

Owns: this process's environment without what makes a child think it is an xdist worker of the
outer run (`PYTEST_XDIST_*`) or take the outer run's options (`PYTEST_ADDOPTS`), minus the
variables a test names, plus the ones it sets. Imported by test files as `tests.child_env`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

OUTER_RUN_PREFIXES = ("PYTEST_XDIST_", "PYTEST_ADDOPTS")


def child_env(drop: Iterable[str] = (), **extra: str) -> dict[str, str]:
    """`os.environ` for a child run: the outer run's xdist and addopts variables and `drop` left out,
    `extra` set."""
    dropped = set(drop)
    env = {k: v for k, v in os.environ.items() if not k.startswith(OUTER_RUN_PREFIXES) and k not in dropped}
    env.update(extra)
    return env
