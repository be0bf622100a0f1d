"""The audit's result and how it is shown: the text report and the JSON document.

Owns `AuditResult` (mocks with findings, warnings, untraced backend calls, the exit code) and its
rendering. Must not scan anything: `dsakit.audit.command` builds the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsakit.audit.device_guards import probe_table
from dsakit.audit.findings import MissingEntry, MockFinding, ReadFinding, short_site
from dsakit.audit.suite_device import NOT_SIMULATED
from dsakit.audit.usage import BackendCall
from dsakit.stack.sglang_release import SGLangRelease

CONFIG_RULE = (
    "a read 'fails on' a device when it fires there in the default configuration (configuration "
    "conditions count as off: flags false, == 'choice' false, is None true); 'only with' names the "
    "configuration a read needs elsewhere"
)


@dataclass
class AuditResult:
    release: SGLangRelease
    devices: list[str]
    files: list[str]
    mocks: list[MockFinding]
    untraced: list[BackendCall] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    strict: list[BackendCall] = field(default_factory=list)
    not_dsa: list[MockFinding] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)  # "file: why", files that were not audited
    mismatches: list[str] = field(default_factory=list)  # one line per file importing what the tree lacks

    @property
    def failing(self) -> list[MockFinding]:
        return [m for m in self.mocks if m.failing]

    @property
    def exit_code(self) -> int:
        """1 when a mock lacks an entry read on a judged device, or a file could not be audited."""
        return 1 if self.failing or self.unparsed else 0

    def summary_line(self) -> str:
        verdict = "FAILED" if self.failing else "INCOMPLETE" if self.unparsed else "OK"
        skipped = f" ({len(self.unparsed)} not audited)" if self.unparsed else ""
        return (
            f"dsakit audit: SGLang {self.release.version}: {len(self.files)} files{skipped}, {len(self.mocks)} "
            f"mock runners for DSA / DSv4, {len(self.failing)} lacking an entry read on "
            f"{', '.join(self.devices)}; {len(self.not_dsa)} runners not for DSA / DSv4 \u2192 {verdict}"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "sglang": {"version": self.release.version, "package_dir": str(self.release.package_dir)},
            "devices": self.devices,
            "files": self.files,
            "rule": CONFIG_RULE,
            "ok": not self.failing,
            "exit_code": self.exit_code,
            "summary": self.summary_line(),
            "mocks": [m.as_dict() for m in self.mocks],
            "not_for_dsa": [{"label": m.mock.label, "site": m.mock.site} for m in self.not_dsa],
            "untraced_calls": [c.as_dict() for c in self.untraced],
            "strict_mock_calls": [c.as_dict() for c in self.strict],
            "not_audited": self.unparsed,
            "release_mismatch": self.mismatches,
            "warnings": self.warnings,
            "probe_table": probe_table(),
        }

    def render(self) -> str:
        lines = [f"SGLang {self.release.version} at {self.release.package_dir}",
                 f"devices: {', '.join(self.devices)}", f"({CONFIG_RULE})", ""]
        for mock in self.mocks:
            lines.extend(_render_mock(mock, self.devices))
            lines.append("")
        for call in self.untraced:
            lines.append(f"note: {call.site}: {call.name}({call.argument}): the runner argument is not a "
                         "mock the audit can trace (a parameter without a fixture, or a value built elsewhere)")
        for call in self.strict:
            lines.append(f"note: {call.site}: {call.name}({call.argument}): dsakit's strict MockModelRunner "
                         "fixture, built from the contract: nothing to audit")
        for line in self.mismatches:
            lines.append(f"warning: {line}")
        for line in self.unparsed:
            lines.append(f"warning: {line}: not audited")
        for warning in self.warnings:
            lines.append(f"warning: {warning}")
        if self.untraced or self.warnings or self.strict or self.mismatches or self.unparsed:
            lines.append("")
        lines.append(self.summary_line())
        return "\n".join(lines)


def _render_mock(mock: MockFinding, devices: list[str]) -> list[str]:
    value = mock.mock
    named = f" '{value.name}'" if value.name and value.name != value.label else ""
    lines = [f"{value.label}{named} ({value.kind}, {value.site})"]
    if value.added:
        lines.append(f"  sets after construction: {', '.join(value.added)}")
    if mock.use_known:
        uses = "; ".join(f"{c.name} at {c.site}" for c in mock.calls if c.reaches_backend)
        lines.append(f"  used with: {uses}")
    else:
        lines.append(f"  used with: unknown (no backend call found; assumed {', '.join(mock.backends)} from "
                     "its file's imports)")
    if mock.narrowed_by:
        lines.append(f"  runs on: {', '.join(mock.devices) or 'no simulated device'} "
                     f"(narrowed by {'; '.join(mock.narrowed_by)})")
    for device in mock.not_simulated:
        lines.append(f"  {device}: not a simulated device; reads checked without device guards")
    for where in mock.skipped:
        lines.append(f"  silent-skip harness: {where} turns construction errors into skips, so a missing "
                     "attribute below shows as a skip, not a failure")
    for where in mock.expected:
        lines.append(f"  expected to raise ({where}): reads after the raise are not checked; what it lacks "
                     "is a note")
    if value.tree.open:
        lines.append(f"  provides anything below: {value.tree.open}; nothing it lacks can be shown")
    judged = list(mock.devices) or devices
    every = "every device" if set(judged) == set(devices) else "every device it runs on"
    if not mock.missing:
        lines.append("  lacks nothing its backends read on the devices it runs on")
    for entry in mock.missing:
        lines.extend(_render_entry(entry, judged, soft=False, expected=bool(mock.expected), every=every))
    for entry in mock.soft:
        lines.extend(_render_entry(entry, judged, soft=True, every=every))
    return lines


def _render_entry(entry: MissingEntry, devices: list[str], *, soft: bool, expected: bool = False,
                  every: str = "every device") -> list[str]:
    contract = ""
    if entry.contract_entry is None:
        contract = " [not in dsakit's contract]"
    elif entry.contract_entry != entry.path:
        contract = f" [contract entry {entry.contract_entry}]"
    head = ("  note (soft read: getattr default / hasattr): " if soft
            else "  note (expected to raise): lacks " if expected else "  lacks ")
    groups: dict[tuple[str, str], list[ReadFinding]] = {}
    for read in entry.reads:  # reads with one guard and one outcome share a line
        groups.setdefault((read.read.guard, outcome_text(read, devices, every)), []).append(read)
    lines = [render_reads(reads, outcome) for (_, outcome), reads in groups.items()]
    if len(lines) == 1:
        return [f"{head}{entry.path}{contract}: {lines[0]}"]
    return [f"{head}{entry.path}{contract}:", *(f"      {line}" for line in lines)]


def render_reads(reads: list[ReadFinding], outcome: str) -> str:
    sites = ", ".join(dict.fromkeys(short_site(str(r.read.site)) for r in reads))
    functions = ", ".join(dict.fromkeys(_function(r) for r in reads))
    guard = reads[0].read.guard
    return f"{sites} ({functions}) {'when ' + guard if guard else 'unconditionally'} -> {outcome}"


def _function(read: ReadFinding) -> str:
    text = read.read.function
    if read.read.via:
        return f"{text}, via {short_site(read.read.via[0].split(' ', 1)[0])}"
    outer = [b for b in read.backends if not text.startswith(b.split(".")[0] + ".")]
    if outer and len(outer) == len(read.backends):
        text += f", reached from {' and '.join(outer)}"
    return text


def outcome_text(read: ReadFinding, devices: list[str], every_device: str = "every device") -> str:
    """The outcome of a read: fails on sm100, sm103; only with <configuration> on sm90 (or "every device")."""
    fails = "falls back" if read.read.soft else "fails"
    outcomes: list[str] = []
    if read.fails_on:
        every = set(devices) <= set(read.fails_on) and len(devices) > 1
        outcomes.append(f"{fails} on {every_device if every else ', '.join(read.fails_on)}")
    for condition, where in read.only_with:
        place = every_device if set(devices) <= set(where) and len(devices) > 1 else ", ".join(where)
        outcomes.append(f"only with {condition} on {place}")
    return "; ".join(outcomes)
