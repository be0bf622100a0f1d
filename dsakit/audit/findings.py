"""Findings of the audit as data: per mock, each entry it lacks that its backend reads, and where.

Owns the comparison of a mock's `AttrTree` with the reads `source_scan` finds for the backends the
mock is used with, and the per-device verdict of each read's guard (`guard_eval`). A missing entry
fails when a read of it fires on a selected device in the default configuration; reads that need
a non-default configuration and soft reads (getattr with a default, hasattr) are notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsakit.audit.guard_eval import verdicts
from dsakit.audit.mock_finder import MockValue
from dsakit.audit.usage import ASSUMED, BACKENDS, Backend, BackendCall
from dsakit.contracts.schema import Contract
from dsakit.gates.device_model import DeviceModel
from dsakit.upstream.contract_check import coverage
from dsakit.sglang_release import SGLangRelease
from dsakit.upstream.source_scan import RunnerFlow, RunnerRead

_SHORT_PREFIX = "sglang/srt/layers/attention/"


def short_site(site: str) -> str:
    return site[len(_SHORT_PREFIX):] if site.startswith(_SHORT_PREFIX) else site


@dataclass(frozen=True)
class ReadFinding:
    """One read of an entry the mock lacks, and the selected devices it fires on.

    fails_on   devices on which it fires in the default configuration
    only_with  (configuration it needs, devices) where it fires only with that configuration
    """

    read: RunnerRead
    backends: tuple[str, ...]
    fails_on: tuple[str, ...]
    only_with: tuple[tuple[str, tuple[str, ...]], ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": str(self.read.site),
            "function": self.read.function,
            "guard": self.read.guard,
            "soft": self.read.soft,
            "via": list(self.read.via),
            "backends": list(self.backends),
            "fails_on": list(self.fails_on),
            "only_with": [{"condition": c, "devices": list(d)} for c, d in self.only_with],
        }


@dataclass(frozen=True)
class MissingEntry:
    """An attribute path the mock lacks (the shortest missing prefix of what is read)."""

    path: str
    contract_entry: str | None
    reads: tuple[ReadFinding, ...]

    @property
    def fails_on(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(d for r in self.reads if not r.read.soft for d in r.fails_on))

    @property
    def failing(self) -> bool:
        return bool(self.fails_on)

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "contract_entry": self.contract_entry, "failing": self.failing,
                "fails_on": list(self.fails_on), "reads": [r.as_dict() for r in self.reads]}


@dataclass
class MockFinding:
    """One mock: how it is used, what it lacks, and notes (soft reads, what the audit cannot see)."""

    mock: MockValue
    calls: list[BackendCall]
    backends: tuple[str, ...]
    missing: list[MissingEntry] = field(default_factory=list)
    soft: list[MissingEntry] = field(default_factory=list)

    @property
    def use_known(self) -> bool:
        return bool(self.calls)

    @property
    def failing(self) -> bool:
        return any(m.failing for m in self.missing)

    def as_dict(self) -> dict[str, Any]:
        mock = self.mock
        return {
            "label": mock.label, "kind": mock.kind, "site": mock.site, "name": mock.name,
            "added_after_construction": mock.added,
            "used_with": list(self.backends) if self.use_known else None,
            "assumed_backends": None if self.use_known else list(self.backends),
            "calls": [{"backend": c.backend.name, "site": c.site, "argument": c.argument} for c in self.calls],
            "open": mock.tree.open,
            "provides": mock.tree.names(),
            "failing": self.failing,
            "missing": [m.as_dict() for m in self.missing],
            "soft_reads_missing": [m.as_dict() for m in self.soft],
        }


def backend_reads(flow: RunnerFlow, release: SGLangRelease, backend: Backend) -> list[RunnerRead]:
    return flow.reads_from(f"{release.package_dir.name}/{backend.file}", backend.qualname)


def audit_mock(
    mock: MockValue,
    calls: list[BackendCall],
    flow: RunnerFlow,
    release: SGLangRelease,
    contract: Contract,
    devices: dict[str, DeviceModel],
) -> MockFinding:
    names = tuple(dict.fromkeys(c.backend.name for c in calls)) or ASSUMED
    by_read: dict[RunnerRead, list[str]] = {}
    for backend in (b for b in BACKENDS if b.name in names):
        for read in backend_reads(flow, release, backend):
            by_read.setdefault(read, []).append(backend.name)
    hard: dict[str, list[ReadFinding]] = {}
    soft: dict[str, list[ReadFinding]] = {}
    for read, backends in sorted(by_read.items(), key=lambda item: (item[0].site.file, item[0].site.line)):
        missing = mock.tree.missing(read.path)
        if missing is None or (read.soft and missing != read.path):
            continue  # a soft read below a missing object: the object's own (hard) read reports it
        finding = _read_finding(read, tuple(backends), devices)
        if finding is None:
            continue
        (soft if read.soft else hard).setdefault(missing, []).append(finding)
    result = MockFinding(mock, calls, names)
    for path, reads in sorted(hard.items()):
        entry = coverage(contract, path)
        result.missing.append(MissingEntry(path, entry.path if entry else None, tuple(reads)))
    for path, reads in sorted(soft.items()):
        entry = coverage(contract, path)
        result.soft.append(MissingEntry(path, entry.path if entry else None, tuple(reads)))
    return result


def _read_finding(read: RunnerRead, backends: tuple[str, ...], devices: dict[str, DeviceModel]) -> ReadFinding | None:
    """The read's verdict on the selected devices; None when it fires on none of them in any config."""
    fails_on: list[str] = []
    conditions: dict[str, list[str]] = {}
    for v in verdicts(read.guard, devices):
        if v.fires:
            fails_on.append(v.device)
        elif v.condition:
            conditions.setdefault(v.condition, []).append(v.device)
    if not fails_on and not conditions:
        return None
    return ReadFinding(read, backends, tuple(fails_on),
                       tuple((c, tuple(d)) for c, d in conditions.items()))
