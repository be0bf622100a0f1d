"""Fixtures of the gates wing."""

from __future__ import annotations

import pytest


@pytest.fixture
def as_its_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gates evaluated in this test answer as in a process that is no pytest session (`dsakit
    capabilities` on the command line): the sglang:import-chain gate then answers without importing
    SGLang (dsakit.stack.import_chain.gate_check), which inside this test would cost ~12 CPU-s."""
    from dsakit import active

    monkeypatch.setattr(active, "run_in_this_process", lambda: None)
