"""A tiny pytest plugin for the benchmarks: per-test setup / call / teardown durations as JSON.

Load with `-p phase_timing` (bench/ on PYTHONPATH) and set `DSAKIT_BENCH_PHASES=<path>`; at the end
of the run it writes `{"tests": {nodeid: {"setup": s, "call": s, "teardown": s, "outcome": ...}}}`.
`setup` / `call` / `teardown` are pytest's own wall durations (`TestReport.duration`); `setup_cpu` /
`teardown_cpu` are this thread's CPU time around the setup / teardown hooks (fixture work and every
plugin's hooks), which a busy shared box disturbs much less than wall time. Never imports
torch, SGLang or dsakit: it must cost the same in every variant it measures.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from typing import Any

import pytest

ENV = "DSAKIT_BENCH_PHASES"

_TESTS: dict[str, dict[str, Any]] = {}


def _cpu(item: pytest.Item, key: str) -> Generator[None, Any, Any]:
    start = time.thread_time()
    try:
        return (yield)
    finally:
        _TESTS.setdefault(item.nodeid, {})[key] = time.thread_time() - start


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, Any, Any]:
    return (yield from _cpu(item, "setup_cpu"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    return (yield from _cpu(item, "teardown_cpu"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _TESTS.setdefault(report.nodeid, {})
    entry[report.when] = report.duration
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        entry["outcome"] = report.outcome


def pytest_unconfigure(config: pytest.Config) -> None:
    path = os.environ.get(ENV)
    if path and not hasattr(config, "workerinput"):
        with open(path, "w", encoding="utf-8") as fh:
            json.dump({"tests": _TESTS}, fh)
