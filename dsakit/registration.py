"""How the plugin module is registered with pytest: once, under its entry-point name `dsakit`.

Owns one fact: `-p dsakit.plugin` (a checkout's form) where the wheel's pytest11 entry point also
loads the module must not abort with pluggy's "Plugin already registered under a different name".
Must not import anything heavy (it runs while pytest registers plugins).
"""

from __future__ import annotations

import sys

import pytest

ENTRY_POINT_NAME = "dsakit"  # [project.entry-points.pytest11] in pyproject.toml; `-p no:dsakit` blocks it


def claim_entry_point_name(pluginmanager: pytest.PytestPluginManager) -> None:
    """Called from the plugin's pytest_addhooks, i.e. while the module is being registered.

    `-p dsakit.plugin` registers the module as "dsakit.plugin" before pytest loads entry points;
    the entry point would then register the same module again as "dsakit" and pluggy refuses. The
    module is already in, so the entry point's name is marked taken (blocked) and pytest skips
    it. A bare checkout without the entry point is unaffected (nothing else uses the name)."""
    module = sys.modules["dsakit.plugin"]
    name = pluginmanager.get_name(module)
    if name is not None and name != ENTRY_POINT_NAME and pluginmanager.get_plugin(ENTRY_POINT_NAME) is None:
        pluginmanager.set_blocked(ENTRY_POINT_NAME)
