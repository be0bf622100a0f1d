"""Shared scaffolding of dsakit's own tests (pytester comes from the root conftest)."""

from __future__ import annotations

import pytest

# a separate project's suite, run from the built wheel by test_downstream_wheel.py, not collected here
collect_ignore = ["downstream_project"]


@pytest.fixture
def no_kernel_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs see no kernel modules, so gate outcomes match on this box and on a GPU node."""
    from dsakit.gates import table as gates

    monkeypatch.setattr(gates, "_importable", lambda name: False)
    monkeypatch.setattr(gates, "_package_dir", lambda name: None)
