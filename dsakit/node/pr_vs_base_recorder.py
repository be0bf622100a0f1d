"""A small plugin (`-p dsakit.node.pr_vs_base_recorder --dsakit-record PATH`) recording each test's
outcome for `dsakit compare`, one JSON line as soon as it finishes (a crash keeps what it had).

Owns: what an outcome is, the raw failure data and the environment fingerprint. Runs on the xdist
controller only. Never imports torch or SGLang.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
import re
from pathlib import Path
from typing import Any

import pytest

FAILING = ("failed", "error", "crashed", "xpassed")

_NORMALISERS = (
    (re.compile(r"0x[0-9a-fA-F]+"), "0x?"),
    (re.compile(r"\.py:\d+"), ".py"),
    (re.compile(r"(?:/tmp|/var/tmp|/private/var)/[^\s'\":]+"), "<tmp>"),
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
    return f"{text.strip()[:200]} @ {frame}" if frame else text.strip()[:200]


KERNEL_PACKAGES = ("torch", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sgl-kernel",
                   "apache-tvm-ffi", "triton", "deep-gemm", "flash-mla", "tilelang", "aiter")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("dsakit").addoption(
        "--dsakit-record", default=None, metavar="PATH",
        help="(dsakit compare) append one JSON line per test outcome, and the environment, to PATH")
    parser.getgroup("dsakit").addoption(
        "--dsakit-record-only", default=None, metavar="PATH",
        help="(dsakit pr-check) run only the test ids listed in PATH, one per line (the rerun of failures)")


def fingerprint() -> dict[str, Any]:
    """What must match between two runs for their outcomes to be comparable (SGLang excluded)."""
    from dsakit.gates.device_model import resolve_device

    versions: dict[str, str | None] = {}
    for name in KERNEL_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        device = resolve_device(None).describe()
    except Exception as error:  # noqa: BLE001 - a bad $DSAKIT_DEVICE must not lose the run
        device = f"unknown ({error})"
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "device": device, "packages": versions}


def sglang_tree() -> dict[str, Any]:
    from dsakit.upstream.release import _version_from_tree

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return {"path": None, "version": None}
    path = Path(next(iter(spec.submodule_search_locations)))
    return {"path": str(path), "version": _version_from_tree(path)}


def _failure(report: pytest.TestReport) -> dict[str, Any]:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    frame = ""
    if crash is not None:
        frame = f"{Path(str(crash.path)).name}"
        entries = getattr(getattr(report.longrepr, "reprtraceback", None), "reprentries", None) or []
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
    return {"nodeid": report.nodeid, "outcome": outcome, "when": report.when,
            "duration": round(report.duration, 4), **detail}


class Recorder:
    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.outcomes: dict[str, dict[str, Any]] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._write({"kind": "env", "fingerprint": fingerprint(), "sglang": sglang_tree()})

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._write({"kind": "start", "nodeid": nodeid})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        record = next_outcome(self.outcomes.get(report.nodeid), report)
        if record is None:
            return
        record = {"kind": "test", **record}
        self.outcomes[report.nodeid] = record
        self._write(record)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._write({"kind": "end", "exitstatus": int(exitstatus)})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = config.getoption("dsakit_record_only")
    if not listed:
        return
    keep = set(Path(listed).read_text(encoding="utf-8").split())
    deselected = [item for item in items if item.nodeid not in keep]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid in keep]


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("dsakit_record")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(config, Path(path)), "dsakit-compare-recorder")
