"""How dsakit starts pytest in a child process (warm, rerun-test, compare, self-tests).

Owns one fact: whether a child pytest gets the dsakit plugin by itself (the pytest11 entry point
of an installed dsakit) or needs `-p dsakit.plugin` (a bare checkout on PYTHONPATH, the offline
GPU node). Passing `-p` where the entry point exists would register the plugin twice.
"""

from __future__ import annotations

import os
from importlib.metadata import entry_points


def plugin_autoloads() -> bool:
    """Does a pytest started with this interpreter and environment load dsakit on its own?"""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.name == "dsakit" for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    """Arguments that make a child pytest load the dsakit plugin exactly once."""
    return [] if plugin_autoloads() else ["-p", "dsakit.plugin"]
