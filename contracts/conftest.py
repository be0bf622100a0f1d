"""The contract suites' one shared rule: they run against SGLang's real modules, so each test first
needs this environment to import the release under test (the `sglang:import-chain` gate)."""

from __future__ import annotations

import pytest

import dsakit


@pytest.fixture(autouse=True)
def _sglang_import_chain() -> None:
    # At test time, not in a mark: the gate imports SGLang, and collection must stay fast.
    dsakit.require("sglang:import-chain")
