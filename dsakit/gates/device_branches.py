"""The report's `device_branches` section as data: why a device-gated SGLang branch never ran, and
its merge over workers, shards and hosts.

Owns the declared reasons a branch's arm did not run (`NEVER_RAN`, ranked by how far the run got),
a branch's record read back from a report, the merge per device (a branch ran if it ran in any
report of that device; one that ran in none keeps the reason of the run that got furthest), and
which branches a change of their file touches (pr-check: a difflib diff of the two trees' text).
Must not scan SGLang or watch lines (`dsakit.simulation.branch_coverage` does). Never imports
torch or SGLang.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dsakit.reasons import Reason

SECTION = "device_branches"  # the report's key


@dataclass(frozen=True)
class NeverRan:
    """One reason code a branch's arm did not run: `words` for a table cell; the table's order is
    how far the run got, furthest first (a merge keeps the furthest)."""

    code: str
    words: str


NEVER_RAN: tuple[NeverRan, ...] = (
    NeverRan("probe-cached-before-simulation",
             "the guard ran and took this machine's arm: a probe it reads answered before the simulation began "
             "(a module constant of an earlier import, an lru-cached probe filled then that the simulation does not "
             "clear)"),
    NeverRan("probe-not-simulated",
             "the guard ran and took this machine's arm: a module constant it reads holds this machine's answer, "
             "one dsakit's probe table does not patch"),
    NeverRan("arm-needs-configuration", "the guard ran; the device's arm also needs configuration no test set"),
    NeverRan("probe-answered-here",
             "the guard ran and took this machine's arm; which read answered for this machine is not known (an "
             "attribute or a value derived from a probe)"),
    NeverRan("imported-before-simulation",
             "a module-level branch whose module was imported before the simulation began (a conftest, a plugin): "
             "it ran then, for this machine, unwatched"),
    NeverRan("guard-not-reached", "the gate was never reached: its function ran but returned or branched before it"),
    NeverRan("configuration-never-built",
             "the suite never builds that configuration: the function (or module) holding the branch never ran"),
    NeverRan("not-watched", "no line was watched (a coverage tool or debugger holds sys.monitoring / sys.settrace)"),
)
_RANK = {entry.code: rank for rank, entry in enumerate(NEVER_RAN)}


def reasons_markdown() -> str:
    """The reference table of the codes (docs/reference/simulated-probes.md), furthest first."""
    return "\n".join(["| code | the branch's arm did not run because |", "|---|---|",
                      *(f"| `{entry.code}` | {entry.words} |" for entry in NEVER_RAN)])


def rank(reason: Reason | None) -> int:
    """How far a run got that left a branch with `reason` (0: furthest; unknown codes last)."""
    return _RANK.get(reason.code, len(NEVER_RAN)) if reason is not None else len(NEVER_RAN)


@dataclass(frozen=True)
class BranchRecord:
    """One device-divergent branch as a report holds it: `site` (sglang/FILE:LINE), the `if`'s
    lines `line`..`end` in `file` (release-relative; its body from `body`: the guard is the lines
    before), the arm the device `takes`, whether it ran, and where not, why (a reason of `NEVER_RAN`)."""

    site: str
    guard: str
    function: str
    takes: str
    ran: bool
    reason: Reason | None = None
    file: str = ""
    line: int = 0
    end: int = 0
    body: int = 0
    value: str = ""  # how a decision made as a value is handed on ("" for an `if`): see decision_text

    @property
    def key(self) -> tuple[str, str]:
        return self.site, self.takes

    @property
    def decision(self) -> str:
        """`if GUARD`, or the value's spelling (`self.use_mha = GUARD`, `return GUARD`)."""
        return decision_text(self.value, self.guard)

    def text(self) -> str:
        """`sglang/FILE:LINE: if GUARD -> ARM: ran` or `...: [code] message`."""
        why = "ran" if self.ran else (str(self.reason) if self.reason is not None else "never ran")
        return f"{self.site}: {self.decision} -> {self.takes}: {why}"

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.site, "file": self.file, "line": self.line, "body": self.body, "end": self.end,
                "guard": self.guard, "function": self.function, "takes": self.takes,
                "status": "ran" if self.ran else "never-ran",
                "reason": self.reason.as_dict() if self.reason is not None else None,
                **({"value": self.value} if self.value else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BranchRecord:
        reason = data.get("reason")
        site = str(data.get("site", ""))
        file, _, line = site.removeprefix("sglang/").rpartition(":")
        return cls(site, str(data.get("guard", "")), str(data.get("function", "")), str(data.get("takes", "")),
                   data.get("status") == "ran",
                   Reason(str(reason.get("code", "")), str(reason.get("message", "")))
                   if isinstance(reason, Mapping) else (Reason("", str(data["why"])) if data.get("why") else None),
                   str(data.get("file") or file), int(data.get("line") or (line if line.isdigit() else 0)),
                   int(data.get("end") or 0), int(data.get("body") or 0), str(data.get("value") or ""))


def decision_text(value: str, guard: str) -> str:
    """A device decision as SGLang spells it: `if GUARD` (value ""), `fuse_index_store=GUARD` (a
    keyword argument), `self.use_mha = GUARD`, `return GUARD`, `if-else GUARD` (`value` stripped or not)."""
    value = value.strip()
    if not value:
        return f"if {guard}"
    return f"{value}{guard}" if value.endswith("=") and not value.endswith(" =") else f"{value} {guard}"


def further(a: BranchRecord, b: BranchRecord) -> BranchRecord:
    """Of two records of one branch, the one that got further: ran, else the better-ranked reason."""
    if a.ran or b.ran:
        return a if a.ran else b
    return a if rank(a.reason) <= rank(b.reason) else b


@dataclass(frozen=True)
class DeviceBranches:
    """One device's branches over every report of it (per-device union)."""

    device: str
    real: str
    branches: tuple[BranchRecord, ...]
    reports: int = 1
    unwatched: tuple[str, ...] = ()  # why some report watched nothing

    @property
    def ran(self) -> list[BranchRecord]:
        return [b for b in self.branches if b.ran]

    @property
    def never_ran(self) -> list[BranchRecord]:
        return [b for b in self.branches if not b.ran]

    def counts(self) -> str:
        """`3 ran, 2 never ran (guard-not-reached 1, configuration-never-built 1)`."""
        by: dict[str, int] = {}
        for b in self.never_ran:
            code = b.reason.code if b.reason is not None and b.reason.code else "unknown"
            by[code] = by.get(code, 0) + 1
        text = f"{len(self.ran)} ran, {len(self.never_ran)} never ran"
        if by:
            ordered = sorted(by.items(), key=lambda item: rank(Reason(item[0], "")))
            text += " (" + ", ".join(f"{code} {n}" for code, n in ordered) + ")"
        return text


def merge_sections(sections: Iterable[Mapping[str, Any]]) -> dict[str, DeviceBranches]:
    """Sections of one SGLang release (its lines are the same files) merged per simulated device: a
    branch ran if it ran in any of them; one in no report of a device is not counted for it."""
    merged: dict[str, DeviceBranches] = {}
    for section in sections:
        device = str(section.get("device", "?"))
        records = [BranchRecord.from_dict(b) for b in section.get("branches") or () if isinstance(b, Mapping)]
        unwatched = (str(section.get("why_not_watched") or "not watched"),) if section.get("watched") is False else ()
        current = merged.get(device)
        if current is None:
            merged[device] = DeviceBranches(device, str(section.get("real", "")), tuple(records), 1, unwatched)
            continue
        by_key = {b.key: b for b in current.branches}
        for record in records:
            by_key[record.key] = further(by_key[record.key], record) if record.key in by_key else record
        merged[device] = DeviceBranches(device, current.real, tuple(by_key.values()),
                                        current.reports + 1, tuple(dict.fromkeys(current.unwatched + unwatched)))
    return merged


# ---------------------------------------------------------------- branches a change touches


def changed_lines(base: str | None, pr: str) -> set[int]:
    """The PR text's lines (1-based) the change made: replaced or inserted, and the two lines around
    a deletion; every line where the base has no such file (None)."""
    lines = pr.splitlines()
    if base is None:
        return set(range(1, len(lines) + 1))
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, base.splitlines(), lines, autojunk=False)
    for tag, _, _, first, last in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            changed.update(range(first + 1, last + 1))
        elif tag == "delete":
            changed.update(n for n in (first, first + 1) if 1 <= n <= len(lines))
    return changed


@dataclass(frozen=True)
class BranchChange:
    """A device-divergent branch of the PR tree whose lines the PR changed: `change` says which
    part ("new branch", "guard changed", "arm changed"), `lines` the changed lines inside it, and
    `devices` what each simulated device's PR run did with it."""

    branch: BranchRecord
    change: str
    lines: tuple[int, ...]
    devices: tuple[tuple[str, BranchRecord], ...]

    @property
    def covered(self) -> bool:
        return any(record.ran for _, record in self.devices)

    @property
    def where(self) -> str:
        """`sglang/FILE:A-B` (the changed lines)."""
        span = f"{self.lines[0]}" + (f"-{self.lines[-1]}" if self.lines[-1] != self.lines[0] else "")
        return f"sglang/{self.branch.file}:{span}"

    def runs(self) -> str:
        """`ran on sm103 (simulated)`, or `NO RUN COVERED IT: sm103 (simulated) [code] message; ...`."""
        ran = [label for label, record in self.devices if record.ran]
        if ran:
            return "ran on " + ", ".join(ran)
        return "NO RUN COVERED IT: " + "; ".join(
            f"{label} {record.reason}" if record.reason is not None else label for label, record in self.devices)

    def as_dict(self) -> dict[str, Any]:
        return {"site": self.branch.site, "guard": self.branch.guard, "change": self.change, "where": self.where,
                "lines": list(self.lines), "covered": self.covered,
                "devices": {label: record.as_dict() for label, record in self.devices}}


def touched_branches(records: Iterable[tuple[str, BranchRecord]],
                     texts: Callable[[str], tuple[str | None, str | None]]) -> list[BranchChange]:
    """The branches among `records` ((device label, the PR run's record), several devices per branch)
    whose lines the change touched; `texts(file)`: the base's and the PR's text of a release-relative
    file (None: absent). In the PR tree's file and line order."""
    by_site: dict[str, list[tuple[str, BranchRecord]]] = {}
    for label, record in records:
        if record.file and record.line:
            by_site.setdefault(record.site, []).append((label, record))
    diffs: dict[str, set[int]] = {}
    found = []
    for devices in by_site.values():
        branch = devices[0][1]
        if branch.file not in diffs:
            base, pr = texts(branch.file)
            diffs[branch.file] = changed_lines(base, pr) if pr is not None else set()
        end = max(branch.end, branch.line)
        inside = sorted(n for n in diffs[branch.file] if branch.line <= n <= end)
        if not inside:
            continue
        # a decision made as a value is all guard (its arms share its line)
        guard_ends = branch.body - 1 if branch.body > branch.line else end
        change = ("new branch" if len(inside) == end - branch.line + 1
                  else "guard changed" if inside[0] <= guard_ends else "arm changed")
        found.append(BranchChange(branch, change, tuple(inside), tuple(devices)))
    return sorted(found, key=lambda c: (c.branch.file, c.branch.line))
