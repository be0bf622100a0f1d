"""How dsakit starts pytest in a child process (warm, rerun-test, compare, self-tests).

Owns one fact: whether a child pytest gets the dsakit plugin by itself (the pytest11 entry point
of an installed dsakit) or needs `-p dsakit.plugin` (a bare checkout on PYTHONPATH, the offline
GPU node), and that the plugin loads once under either name (`load_once`).
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


PLUGIN_NAMES = ("dsakit", "dsakit.plugin")  # the entry point's name, the module's


def load_once(pluginmanager: Any, plugin: object) -> None:
    """The plugin module was just registered under one of its two names: block the other, so
    `pytest_plugins = ["dsakit.plugin"]` in a conftest or `-p dsakit.plugin` next to the installed
    entry point is the plugin already loaded, not pluggy's "already registered" ValueError."""
    name = pluginmanager.get_name(plugin)
    for other in PLUGIN_NAMES:
        if other != name and pluginmanager.get_plugin(other) is None and not pluginmanager.is_blocked(other):
            pluginmanager.set_blocked(other)
