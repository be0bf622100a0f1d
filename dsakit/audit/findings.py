"""Findings of the audit as data: per mock, each entry it lacks that its backend reads, and where.

Owns the comparison of a mock's `AttrTree` with the reads `backend_reads` finds for the backends the
mock reaches on each device it runs on (`usage` routes, `suite_device`), and the per-device verdict
of each read's guard (`guard_eval`). A missing entry fails when a read of it fires on a judged
device in the default configuration; reads that need a non-default configuration, soft reads
(getattr with a default, hasattr) and constructions expected to raise are notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsakit.audit.guard_eval import verdict
from dsakit.audit.suite_files import Scope, SourceFile
from dsakit.audit.mock_finder import MockValue
from dsakit.audit.suite_device import NOT_SIMULATED, suite_devices
from dsakit.audit.usage import Backend, BackendCall, Route, Routes, evidence_keys
from dsakit.contracts.schema import Contract
from dsakit.gates.device_model import DeviceModel
from dsakit.sglang_facts.contract_check import coverage
from dsakit.stack.sglang_release import SGLangRelease
from dsakit.sglang_facts.backend_reads import RunnerFlow, RunnerRead

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
    """One mock: how it is used, on which devices it is judged, what it lacks, and notes.

    for_dsa    it reaches a DSA / DSv4 backend (directly, through a registry, or, unused, by its
               file's imports); a mock that does not is counted, not listed
    devices    judged device -> why it is judged there ("" = selected and not narrowed)
    expected   every DSA call of it sits in assertRaises* / pytest.raises: findings are notes
    """

    mock: MockValue
    calls: list[BackendCall]
    backends: tuple[str, ...]
    for_dsa: bool = True
    assumed: bool = False
    devices: dict[str, str] = field(default_factory=dict)
    narrowed_by: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    missing: list[MissingEntry] = field(default_factory=list)
    soft: list[MissingEntry] = field(default_factory=list)

    @property
    def use_known(self) -> bool:
        return not self.assumed

    @property
    def failing(self) -> bool:
        return not self.expected and any(m.failing for m in self.missing)

    @property
    def not_simulated(self) -> list[str]:
        return [d for d in self.devices if d in NOT_SIMULATED]

    def as_dict(self) -> dict[str, Any]:
        mock = self.mock
        return {
            "label": mock.label, "kind": mock.kind, "site": mock.site, "name": mock.name,
            "added_after_construction": mock.added,
            "used_with": list(self.backends) if self.use_known else None,
            "assumed_backends": None if self.use_known else list(self.backends),
            "calls": [c.as_dict() for c in self.calls],
            "devices": list(self.devices),
            "narrowed_by": list(self.narrowed_by),
            "not_simulated_devices": self.not_simulated,
            "expected_to_raise": list(self.expected),
            "errors_become_skips": list(self.skipped),
            "open": mock.tree.open,
            "provides": mock.tree.names(),
            "failing": self.failing,
            "missing": [{**m.as_dict(), "failing": m.failing and not self.expected} for m in self.missing],
            "soft_reads_missing": [m.as_dict() for m in self.soft],
        }


def backend_reads(flow: RunnerFlow, release: SGLangRelease, backend: Backend) -> list[RunnerRead]:
    return flow.reads_from(backend.flow_file(release), backend.qualname)


def _mock_scope(mock: MockValue, files: dict[str, SourceFile]) -> Scope | None:
    file = files.get(mock.site.rpartition(":")[0])
    return Scope(file) if file is not None else None


def audit_mock(
    mock: MockValue,
    calls: list[BackendCall],
    flow: RunnerFlow,
    release: SGLangRelease,
    contract: Contract,
    devices: dict[str, DeviceModel],
    routes: Routes,
    files: dict[str, SourceFile],
) -> MockFinding:
    """The finding of one mock: the reads of every backend it reaches on each device it runs on."""
    uses: list[tuple[Scope, tuple[Route, ...]]] = []
    dsa_calls = [c for c in calls if c.reaches_backend]
    judged = [c for c in dsa_calls if not c.expected] or dsa_calls
    assumed = not calls
    if assumed:
        scope = _mock_scope(mock, files)
        keys = evidence_keys(scope.file) if scope is not None else ()
        found = tuple(r for k in keys for r in routes.from_choices(routes.registry.get(k, ())))
        if scope is not None and found:
            uses.append((scope, found))
    else:
        uses = [(c.scope, c.routes) for c in judged]
    names = tuple(dict.fromkeys(r.backend.name for _, found in uses for r in found))
    result = MockFinding(mock, calls, names, for_dsa=bool(uses), assumed=assumed)
    if not uses:
        return result
    if judged and all(c.expected for c in judged):
        result.expected = tuple(dict.fromkeys(c.expected for c in judged))
    result.skipped = tuple(dict.fromkeys(c.skipped for c in judged if c.skipped))
    active: dict[Backend, dict[str, DeviceModel]] = {}
    narrowed: list[str] = []
    for scope, found in uses:
        where = suite_devices(scope, mock.tree, devices)
        narrowed.extend(where.why)
        for key, device in where.devices.items():
            result.devices.setdefault(key, "")
            for route in found:
                if verdict(route.guard, key, device).fires:
                    active.setdefault(route.backend, {})[key] = device
    # another use on every device (the kit's own call besides an AMD suite's) leaves nothing narrowed
    result.narrowed_by = tuple(dict.fromkeys(narrowed)) if set(result.devices) != set(devices) else ()
    order = {k: i for i, k in enumerate([*devices, *NOT_SIMULATED])}
    result.devices = dict(sorted(result.devices.items(), key=lambda kv: order.get(kv[0], len(order))))
    by_read: dict[RunnerRead, tuple[list[str], dict[str, DeviceModel]]] = {}
    for backend, on in active.items():
        for read in backend_reads(flow, release, backend):
            entry = by_read.setdefault(read, ([], {}))
            entry[0].append(backend.name)
            entry[1].update(on)
    hard: dict[str, list[ReadFinding]] = {}
    soft: dict[str, list[ReadFinding]] = {}
    for read, (reached, on) in sorted(by_read.items(), key=lambda item: (item[0].site.file, item[0].site.line)):
        missing = mock.tree.missing(read.path)
        if missing is None or (read.soft and missing != read.path):
            continue  # a soft read below a missing object: the object's own (hard) read reports it
        ordered = dict(sorted(on.items(), key=lambda kv: order.get(kv[0], len(order))))
        finding = read_verdict(read, tuple(dict.fromkeys(reached)), ordered)
        if finding is None:
            continue
        (soft if read.soft else hard).setdefault(missing, []).append(finding)
    for path, reads in sorted(hard.items()):
        covering = coverage(contract, path)
        result.missing.append(MissingEntry(path, covering.path if covering else None, tuple(reads)))
    for path, reads in sorted(soft.items()):
        covering = coverage(contract, path)
        result.soft.append(MissingEntry(path, covering.path if covering else None, tuple(reads)))
    return result


def read_verdict(read: RunnerRead, backends: tuple[str, ...], devices: dict[str, DeviceModel]) -> ReadFinding | None:
    """The read's verdict on the devices its backends run on; None when it fires on none of them in
    any configuration. On a device dsakit does not simulate, only reads without a device guard count."""
    fails_on: list[str] = []
    conditions: dict[str, list[str]] = {}
    for key, device in devices.items():
        if key in NOT_SIMULATED and read.hardware_conditional:
            continue
        v = verdict(read.guard, key, device)
        if v.fires:
            fails_on.append(key)
        elif v.condition:
            conditions.setdefault(v.condition, []).append(key)
    if not fails_on and not conditions:
        return None
    return ReadFinding(read, backends, tuple(fails_on),
                       tuple((c, tuple(d)) for c, d in conditions.items()))
