"""pytest plugin (bench only): seconds from the controller's configure to each xdist worker's first
test, written as JSON to $DSAKIT_BENCH_FIRST_TEST_DIR/<worker>.json.

Load with `-p first_test_timing` and bench/ on PYTHONPATH. The controller passes its start time
to the workers through workerinput (one clock: time.time() on the same host)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

_KEY = "dsakit_bench_t0"
_STATE: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _STATE["t0"] = time.time()


@pytest.hookimpl(optionalhook=True, trylast=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: Any) -> None:
    _STATE["nodes"] = time.time()  # after every setupnodes hook (dsakit's preload wait included)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    node.workerinput[_KEY] = [_STATE["t0"], _STATE.get("nodes", _STATE["t0"])]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None or _KEY not in workerinput or "done" in _STATE:
        return
    _STATE["done"] = 1.0
    t0, nodes = workerinput[_KEY]
    now = time.time()
    out = os.environ.get("DSAKIT_BENCH_FIRST_TEST_DIR")
    if out:
        worker = workerinput.get("workerid", "gw?")
        with open(os.path.join(out, f"{worker}.json"), "w", encoding="utf-8") as handle:
            json.dump({"worker": worker, "first_test_s": round(now - t0, 2),
                       "after_setupnodes_s": round(now - nodes, 2), "ppid": os.getppid()}, handle)
