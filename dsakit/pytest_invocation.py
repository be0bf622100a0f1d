"""How dsakit starts pytest in a child process (warm, rerun-test, compare, self-tests).

Owns one fact: whether a pytest gets the dsakit plugin by itself (the pytest11 entry point of an
installed dsakit) or needs `-p dsakit.plugin` (a bare checkout on PYTHONPATH, the offline GPU
node); and that `-p dsakit.plugin` where the entry point exists too registers the plugin once.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_NAME = "dsakit"  # [project.entry-points.pytest11] in pyproject.toml; `-p no:dsakit` blocks it


def plugin_autoloads() -> bool:
    """Does a pytest started with this interpreter and environment load dsakit on its own?"""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.name == ENTRY_POINT_NAME for ep in entry_points(group="pytest11"))


def plugin_args() -> list[str]:
    """Arguments that make a child pytest load the dsakit plugin exactly once."""
    return [] if plugin_autoloads() else ["-p", "dsakit.plugin"]


def claim_entry_point_name(pluginmanager: Any) -> None:
    """Called from the plugin's pytest_addhooks, i.e. while pytest registers the plugin module.

    `-p dsakit.plugin` registers the module as "dsakit.plugin" before pytest loads entry points;
    the entry point would then register the same module again as "dsakit", and pluggy aborts with
    "Plugin already registered under a different name". The module is already in, so the entry
    point's name is marked taken (blocked) and pytest skips it. A bare checkout without the entry
    point is unaffected (nothing else uses the name)."""
    module = sys.modules["dsakit.plugin"]
    name = pluginmanager.get_name(module)
    if name is not None and name != ENTRY_POINT_NAME and pluginmanager.get_plugin(ENTRY_POINT_NAME) is None:
        pluginmanager.set_blocked(ENTRY_POINT_NAME)
