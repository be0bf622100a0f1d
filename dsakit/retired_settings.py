"""Settings dsakit no longer has: each retired ini key with what happened to it and what to do.

Owns the table and the one rule: a retired key still set in an ini file is refused with its
sentence under strict config (`--strict-config`, ini `strict_config` / `strict`) and is a
PytestConfigWarning otherwise, where pytest would only say "Unknown config option". Must not
change what a run does: a retired key is never read.
"""

from __future__ import annotations

import pytest

_FORK_SERVER = (
    "the fork server was removed (it failed on every CUDA node with `CUDA error: initialization error` "
    "and fell back to a plain spawn; the plain xdist spawn met the scaling goals: bench/README.md, "
    "\"Why the fork server was removed\"). xdist workers always spawn plainly; `dsakit warm` makes "
    "their first test fast. Delete the line"
)

RETIRED_INI: dict[str, str] = {
    "dsakit_fork_server": _FORK_SERVER,
    "dsakit_fork_server_keep_s": _FORK_SERVER,
    "dsakit_fork_server_preload": _FORK_SERVER,
}


def register(parser: pytest.Parser) -> None:
    """Known to pytest, so the check below words the message instead of pytest's generic one."""
    for key in RETIRED_INI:
        parser.addini(key, "retired: dsakit no longer reads it (set, it is refused or warned about)",
                      type="string", default=None)


def check(config: pytest.Config) -> None:
    """pytest_configure, controller only: refuse or warn about every retired key the ini sets."""
    if hasattr(config, "workerinput"):
        return  # the controller already said it
    for key, sentence in RETIRED_INI.items():
        raw = config.getini(key)
        if raw is None:
            continue
        message = f"ini key {key} = {str(raw).strip()!r} ({config.inipath or 'an -o override'}): {sentence}"
        if _strict_config(config):
            raise pytest.UsageError(message)
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)


def _strict_config(config: pytest.Config) -> bool:
    """pytest 9: ini `strict_config`, else `strict` (--strict-config sets the first); pytest 8: the flag."""
    for name in ("strict_config", "strict"):
        try:
            value = config.getini(name)
        except ValueError:  # not an ini key in this pytest
            continue
        if value is not None and value != "":
            return bool(value)
    return bool(getattr(config.option, "strict_config", False))
