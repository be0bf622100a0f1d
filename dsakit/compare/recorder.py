"""A small plugin (`-p dsakit.compare.recorder --dsakit-record PATH`) recording each test's
outcome for `dsakit compare`, one JSON line as soon as it finishes (a crash keeps what it had).

Owns: the record file and the environment fingerprint (what an outcome is: dsakit.gates.outcomes). Runs
on the xdist controller only, as a part of the run's DsakitSession (`recorder`: dsakit's plugin
loads too, as `dsakit compare` runs it). Never imports torch or SGLang.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import platform
from pathlib import Path
from typing import Any

import pytest

from dsakit.gates.outcomes import OutcomeRecorder
from dsakit.options import RECORDER_OPTIONS, register, value
from dsakit.stack.kernel_libraries import distributions

# torch's version and every kernel library's distributions (dsakit.stack.kernel_libraries)
KERNEL_PACKAGES = ("torch", *distributions())


def pytest_addoption(parser: pytest.Parser) -> None:
    """--dsakit-record, --dsakit-record-only (rows of dsakit's option table)."""
    register(parser, RECORDER_OPTIONS)


def fingerprint() -> dict[str, Any]:
    """What must match between two runs for their outcomes to be comparable (SGLang excluded); the
    device is the run's (--dsakit-device, $DSAKIT_DEVICE or the ini key, as its session resolved it)."""
    from dsakit.gates.marks import active_session

    versions: dict[str, str | None] = {}
    for name in KERNEL_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        device = active_session().device.describe()
    except Exception as error:  # noqa: BLE001 - a device that cannot be read must not lose the run
        device = f"unknown ({error})"
    return {"python": platform.python_version(), "implementation": platform.python_implementation(),
            "device": device, "packages": versions}


def sglang_tree() -> dict[str, Any]:
    from dsakit.stack.sglang_release import _version_from_tree

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return {"path": None, "version": None}
    path = Path(next(iter(spec.submodule_search_locations)))
    return {"path": str(path), "version": _version_from_tree(path)}


def located_nodeid(nodeid: str, location_path: str) -> str:
    """`nodeid`, or for a test file given on the command line outside the rootdir (pytest names
    it '', pytest-dev/pytest#11245: '::TestX::test_y') the id with its location path in front
    ('../upstream/test_x.py::TestX::test_y'), so two such files never share ids."""
    return location_path.replace("\\", "/") + nodeid if nodeid.startswith("::") else nodeid


class Recorder:
    """One JSON line per event: the environment, each test's start and outcome, the end."""

    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.recorder = OutcomeRecorder()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")

    def _write(self, record: dict[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self._write({"kind": "env", "fingerprint": fingerprint(), "sglang": sglang_tree()})

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self._write({"kind": "start", "nodeid": located_nodeid(nodeid, location[0])})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for changed in self.recorder.record(report):  # a test's record, or a subtest's (and its test's)
            record = {"kind": "test", **changed}
            located = located_nodeid(changed["nodeid"], report.location[0])
            if located != changed["nodeid"]:  # pytest's own id stays: --dsakit-report keys by it
                record = {**record, "nodeid": located, "pytest_nodeid": changed["nodeid"]}
                if "subtest_of" in changed:
                    record["subtest_of"] = located_nodeid(changed["subtest_of"], report.location[0])
            self._write(record)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._write({"kind": "end", "exitstatus": int(exitstatus)})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    listed = value(config, "dsakit_record_only")
    if not listed:
        return
    keep = set(Path(listed).read_text(encoding="utf-8").split())

    def listed_here(item: pytest.Item) -> bool:
        return located_nodeid(item.nodeid, item.location[0]) in keep

    deselected = [item for item in items if not listed_here(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if listed_here(item)]


def recorder(config: pytest.Config) -> Recorder | None:
    """The run's recorder where `--dsakit-record PATH` asks for one, on the controller (or a single
    process): a part of the run's DsakitSession, which registers its hooks."""
    path = value(config, "dsakit_record")
    return Recorder(config, Path(path)) if path and not hasattr(config, "workerinput") else None
