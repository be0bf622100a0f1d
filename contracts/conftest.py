"""The contract suites run against SGLang's real modules: where the release's own import chain
does not load in this environment, the tests that import it skip behind `sglang:import-chain`
(naming the release and the import error) instead of failing as dsakit failures."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

import dsakit


def _gate_sglang_import_errors() -> Generator[None, Any, Any]:
    try:
        return (yield)
    except Exception as error:
        from dsakit.stack.import_chain import raised_importing_sglang

        if raised_importing_sglang(error):
            dsakit.require("sglang:import-chain")  # skips where the chain does not load here
        raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _gate_sglang_import_errors())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _gate_sglang_import_errors())
