"""A tiny pytest plugin for the benchmarks: when each process (the controller, each xdist worker)
started, finished collecting, and ran each test, on one clock, as JSON.

Load with `-p worker_timeline` (bench/ on PYTHONPATH) and set `DSAKIT_BENCH_TIMELINE=<dir>`; each
process writes `<dir>/<worker or main>.json`:
`{"start": t, "collected": t, "tests": [[nodeid, t_start, t_stop, outcome], ...], "end": t}` with
`time.time()` stamps (one host, one clock). `python bench/worker_timeline.py <dir>` prints where a
run's wall time went per worker: start-up to collection, collection to the first test, the busy
time in tests, the slowest tests, the idle tail before the last worker finished. Never imports
torch, SGLang or dsakit.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

ENV = "DSAKIT_BENCH_TIMELINE"
_STATE: dict[str, Any] = {"start": time.time(), "tests": []}


def _name(config: pytest.Config) -> str:
    workerinput = getattr(config, "workerinput", None)
    return str(workerinput["workerid"]) if workerinput else "main"


def pytest_collection_finish(session: pytest.Session) -> None:
    _STATE["collected"] = time.time()
    _STATE["count"] = len(session.items)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, Any]:
    start = time.time()
    try:
        return (yield)
    finally:
        _STATE["tests"].append([item.nodeid, start, time.time(), _STATE.pop("outcome", "")])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        _STATE["outcome"] = report.outcome


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    _STATE["end"] = time.time()
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"{_name(config)}.json").write_text(json.dumps(_STATE))


def summary(folder: Path) -> str:
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    t0 = min(r["start"] for r in runs.values())
    end = max(r["end"] for r in runs.values())
    lines = [f"wall {end - t0:.1f} s from the first process's start to the last one's end", "",
             "| process | start | collected | first test | busy in tests | tests | last test ends | end |",
             "|---|---|---|---|---|---|---|---|"]
    slow: list[tuple[float, str, str]] = []
    for name, r in runs.items():
        tests = r["tests"]
        busy = sum(b - a for _, a, b, _ in tests)
        first = f"{tests[0][1] - t0:.1f}" if tests else "-"
        last = f"{tests[-1][2] - t0:.1f}" if tests else "-"
        collected = f"{r['collected'] - t0:.1f}" if "collected" in r else "-"
        lines.append(f"| {name} | {r['start'] - t0:.1f} | {collected} | {first} | {busy:.1f} | {len(tests)} | {last} | {r['end'] - t0:.1f} |")
        slow.extend((b - a, name, nodeid) for nodeid, a, b, _ in tests)
    lines += ["", "slowest tests (s, process, test):"]
    lines += [f"  {d:6.2f} {name} {nodeid}" for d, name, nodeid in sorted(slow, reverse=True)[:25]]
    by_file: dict[str, float] = {}
    for d, _, nodeid in slow:
        key = nodeid.split("::", 1)[0]
        by_file[key] = by_file.get(key, 0.0) + d
    lines += ["", "time in tests per file (s, all processes):"]
    lines += [f"  {d:6.1f} {f}" for f, d in sorted(by_file.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1])))
