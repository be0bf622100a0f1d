"""A test's outcome record, from pytest's phase reports: what `dsakit compare` records and
`--dsakit-report` writes per test, and a failure's signature across runs.

Owns: the outcome names, the record, the one recorder (`OutcomeRecorder`: every test's record so
far), the signature. Must not write files or import torch / SGLang (who writes the records:
dsakit.compare.recorder, one JSON line each; dsakit.gates.inventory, the report).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

FAILING = ("failed", "error", "crashed", "xpassed")

_TMP = r"(?:/tmp|/var/tmp|/private/var)/"
_NORMALISERS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\.py:\d+"), ".py"),
    # a path inside compare's overlay of a tree reads as its path in the tree ("sglang/srt/...")
    (re.compile(_TMP + r"[^\s'\":]*?-overlay/"), ""),
    # any other temp path keeps its file name ("<tmp>/test_x.py"), so the reading site stays named
    (re.compile(_TMP + r"(?:[^\s'\":]+/)?([^\s'\":/]+)"), r"<tmp>/\1"),
    (re.compile(r"\bline \d+"), "line ?"),
    (re.compile(r"\b(pid|id|port)[ =]\d+", re.IGNORECASE), r"\1 ?"),
    (re.compile(r"\s+"), " "),
)


def signature(outcome: dict[str, Any]) -> str:
    """A failure's identity across runs: message (with its exception type) and crash frame file,
    without line numbers, addresses, pids or temp paths."""
    text = str(outcome.get("message", "")).strip().splitlines()[0] if outcome.get("message") else ""
    for pattern, repl in _NORMALISERS:
        text = pattern.sub(repl, text)
    frame = re.sub(r":\d+", "", str(outcome.get("frame", "")))
    text = _whole_sentences(text.strip())
    return f"{text} @ {frame}" if frame else text


_SIGNATURE_CHARS = 400


def _whole_sentences(text: str) -> str:
    """`text`, or when longer than _SIGNATURE_CHARS its leading whole sentences (never a cut word)."""
    if len(text) <= _SIGNATURE_CHARS:
        return text
    head = text[:_SIGNATURE_CHARS]
    cut = max(head.rfind(mark) for mark in (". ", "; ", ": "))
    if cut <= 0:
        cut = head.rfind(" ")
    return head[:cut + 1].rstrip() + " [...]" if cut > 0 else head + " [...]"


def _failure(report: pytest.TestReport) -> dict[str, Any]:
    crash = getattr(report.longrepr, "reprcrash", None)
    traceback = getattr(report.longrepr, "reprtraceback", None)
    chain = getattr(report.longrepr, "chain", None) or []
    if len(chain) > 1 and chain[0][1] is not None:
        # raised from another error (SGLang's CustomTestCase re-raises "retry() exceed maximum
        # number of retries" from the test's own): the signature is the original error's
        traceback, crash = chain[0][0], chain[0][1]
    message = str(getattr(crash, "message", "") or "")
    frame = ""
    if crash is not None:
        frame = f"{Path(str(crash.path)).name}"
        entries = getattr(traceback, "reprentries", None) or []
        if entries:
            loc = getattr(entries[-1], "reprfileloc", None)
            if loc is not None:
                frame = f"{Path(str(loc.path)).name}"
    if not message:
        lines = str(report.longrepr or "").strip().splitlines()
        message = lines[-1] if lines else ""
    failure = {"message": message, "frame": frame}
    explained = dict(report.sections).get("dsakit model_runner read")  # dsakit.simulation.whole_run
    if explained:
        failure["explained"] = explained
    return failure


# A test report's user property under a portable simulation (dsakit.simulation.whole_run): the
# kernels that ran for real on this GPU, {"arch": "sm90", "kernels": ["Triton x", "JIT y"]}.
RAN_ON_THIS_GPU = "dsakit_ran_on_this_gpu"
# ... the arch-only kernels a reference stood in for ({"kernels": [...]}): the result came through a
# stand-in (the report marks it), and the kernels refused ({"kernels": [...]})
THROUGH_STAND_IN = "dsakit_through_stand_in"
REFUSED_HERE = "dsakit_refused"


def next_outcome(current: dict[str, Any] | None, report: pytest.TestReport) -> dict[str, Any] | None:
    """A test's outcome record after one more phase report (`current`: the record so far), or None
    when the phase changes nothing. Also the per-test outcome of `--dsakit-report`."""
    detail: dict[str, Any] = {}
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
        detail = {"reason": str(report.wasxfail)}
    elif report.skipped:
        outcome = "skipped"
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        detail = {"reason": str(reason).removeprefix("Skipped: ")}
    elif report.failed:
        outcome = "failed" if report.when == "call" else "error"
        detail = _failure(report)
    elif report.when == "call":
        outcome = "passed"
    else:
        return None
    if current is not None and current["outcome"] in ("failed", "error"):
        return None  # a teardown pass never hides an earlier failure
    for name, value in report.user_properties:
        if name == RAN_ON_THIS_GPU:  # a portable simulation: the kernels the test ran for real, and on what
            detail = {**detail, "ran_on_this_gpu": value}
        elif name == THROUGH_STAND_IN:  # its result came (in part) from a reference stand-in
            detail = {**detail, "through_stand_in": value}
    return {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
            "duration": round(report.duration, 4), **detail}


def subtest_description(context: Any) -> str:
    """A subtest's part of its id, as pytest prints it: `[msg] (key=value, ...)`, or `(<subtest>)`."""
    parts = [f"[{context.msg}]"] if context.msg is not None else []
    if context.kwargs:
        parts.append("(" + ", ".join(f"{k}={v}" for k, v in context.kwargs.items()) + ")")
    return " ".join(parts) or "(<subtest>)"


def subtest_id(nodeid: str, context: Any) -> str:
    """The id of one subtest (unittest's `self.subTest(...)`, pytest's `subtests` fixture): its
    test's node id and its description, e.g. `t.py::T::test_x (impl='fa3')`."""
    return f"{nodeid} {subtest_description(context)}"


class OutcomeRecorder:
    """Every test's outcome record so far, by pytest node id, from the phase reports as they arrive
    (the one recorder: `dsakit compare`'s record file and `--dsakit-report` both read it); each
    subtest's record by its `subtest_id` (a second subtest of one test with the same description
    gets ` #2`), which carries `subtest_of`. A failed subtest also fails its test, as pytest does."""

    def __init__(self) -> None:
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.subtests: dict[str, dict[str, Any]] = {}
        self._seen: dict[str, Counter[str]] = {}  # test id -> subtest descriptions of its current run

    def record(self, report: pytest.TestReport) -> list[dict[str, Any]]:
        """The records this phase report changed: the test's, or the subtest's and, when it failed,
        its test's (empty when the phase changed nothing)."""
        context = getattr(report, "context", None)  # pytest's SubtestReport
        if context is not None:
            return self._subtest(report, context)
        if report.when == "setup":
            self._seen.pop(report.nodeid, None)  # a rerun of the test numbers its subtests afresh
        record = next_outcome(self.outcomes.get(report.nodeid), report)
        if record is None:
            return []
        self.outcomes[report.nodeid] = record
        return [record]

    def _subtest(self, report: pytest.TestReport, context: Any) -> list[dict[str, Any]]:
        base = subtest_id(report.nodeid, context)
        seen = self._seen.setdefault(report.nodeid, Counter())
        seen[base] += 1
        key = base if seen[base] == 1 else f"{base} #{seen[base]}"
        record = next_outcome(None, report)
        if record is None:
            return []
        record = {**record, "nodeid": key, "subtest_of": report.nodeid}
        self.subtests[key] = record
        if record["outcome"] not in FAILING:
            return [record]
        parent = next_outcome(self.outcomes.get(report.nodeid), report)
        if parent is None:
            return [record]
        self.outcomes[report.nodeid] = parent
        return [record, parent]
