"""`dsakit report merge REPORT.json...`: one coverage table across nodes and shards.

Owns: reading and validating `--dsakit-report` files (older formats and collect-only runs are
refused, exit 2), shards grouped into nodes, per gate and test which node ran, skipped or failed
it, what ran on no node, the fleet-wide must-run check, the text, the JSON and the exit code (1: a
test failed somewhere, a must-run gate ran nowhere, or a shard has no report). Never imports torch or SGLang.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsakit.errors import UsageError
from dsakit.gates.device_branches import SECTION as BRANCHES, DeviceBranches, merge_sections
from dsakit.gates.inventory import REPORT_FORMAT, REPORT_KIND
from dsakit.gates.skip_causes import UNCODED, Cause, CauseGroup, group_causes, runs_on_here, why_paragraph
from dsakit.compare.markdown import NOT_COVERED, Comment, FailureRow, FailureSection, SkipGroup, Table
from dsakit.gates.outcomes import FAILING
from dsakit.output_paths import output_file
from dsakit.stack.sglang_release import release_order

_HOW = "pass the JSON files written by `pytest --dsakit-report PATH`"
# the worse outcome wins when one node reports a test twice (overlapping runs)
_RANK = {"skipped": 0, "passed": 1, "xfailed": 1, "xpassed": 2, "failed": 3, "error": 3}


# ---------------------------------------------------------------- reading reports


@dataclass(frozen=True)
class NodeReport:
    """One `--dsakit-report` file: one pytest run (one shard) on one node."""

    path: str
    host: str
    device: str  # the device description, "[real]" or "[simulated KEY]"
    device_key: str
    sglang: str
    shard: tuple[int, int] | None  # (group, splits)
    tests: dict[str, dict[str, Any]]
    must_run: tuple[str, ...]
    simulated: bool = False  # a --dsakit-device run: its coverage is not real hardware coverage
    subtests: dict[str, dict[str, Any]] = field(default_factory=dict)  # by subtest id, each with its `test`
    table_key: str = ""  # the device table's entry the device is (simulated, or matched by arch)
    device_branches: dict[str, Any] | None = None  # a simulated run's device-branch coverage


def _field(data: dict[str, Any], key: str, kind: type, path: str) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise UsageError(f"{path}: field {key!r} should be {kind.__name__}, found {type(value).__name__}: "
                         f"the file is damaged or not a dsakit report; {_HOW}")
    return value


def load_report(path: str) -> NodeReport:
    """A validated report; UsageError naming the file and what is wrong otherwise."""
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: no such report file; {_HOW}")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path}: not JSON ({error}); {_HOW}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a dsakit report (a JSON {type(data).__name__}, not an object); {_HOW}")
    version = data.get("format_version")
    if data.get("format") != REPORT_KIND:
        if version is None and {"device", "gates", "must_run"} <= data.keys():
            raise UsageError(
                f"{path}: a dsakit report of format 1 (an older dsakit: skips only, no host, shard or "
                f"per-test outcomes), so what ran there cannot be known; rerun that node with this "
                f"dsakit (report format {REPORT_FORMAT})")
        raise UsageError(f"{path}: not a dsakit report (no \"format\": \"{REPORT_KIND}\"); {_HOW}")
    if version == 2:
        raise UsageError(
            f"{path}: a dsakit report of format 2 (an older dsakit: subtests folded into their tests and "
            f"skips without causes), so its skips cannot be counted or explained as pytest counts them; "
            f"rerun that node with this dsakit (report format {REPORT_FORMAT})")
    if version != REPORT_FORMAT:
        newer = isinstance(version, int) and version > REPORT_FORMAT
        raise UsageError(
            f"{path}: report format {version!r}, this dsakit reads format {REPORT_FORMAT}; "
            + ("merge with the newer dsakit that wrote it" if newer else "rerun that node with this dsakit"))
    if data.get("collect_only"):
        raise UsageError(f"{path}: a --collect-only report says what would skip, not what ran; "
                         "merge reports of runs")
    device = _field(data, "device", dict, path)
    description = _field(device, "description", str, path)
    shard = data.get("shard")
    if shard is not None:
        shard_data = _field(data, "shard", dict, path)
        shard = (_field(shard_data, "group", int, path), _field(shard_data, "splits", int, path))
    tests = _field(data, "tests", dict, path)
    subtests = _field(data, "subtests", dict, path)
    for what, entries in (("test", tests), ("subtest", subtests)):
        for nodeid, entry in entries.items():
            if not isinstance(entry, dict) or entry.get("outcome") not in _RANK:
                raise UsageError(f"{path}: {what} {nodeid!r} has no known outcome ({sorted(_RANK)}); "
                                 f"the file is damaged; {_HOW}")
    return NodeReport(
        path=path,
        host=_field(data, "host", str, path),
        device=description + ("" if device.get("simulated") else " [real]"),
        device_key=str(device.get("key", "?")) + (" simulated" if device.get("simulated") else ""),
        sglang=str(data.get("sglang") or "not installed"),
        shard=shard,
        tests=tests,
        must_run=tuple(str(c) for c in _field(data, "must_run", dict, path).get("codes", [])),
        simulated=bool(device.get("simulated")),
        subtests=subtests,
        table_key=str(device.get("table_key") or ""),
        device_branches=data[BRANCHES] if isinstance(data.get(BRANCHES), dict) else None,
    )


# ---------------------------------------------------------------- nodes


@dataclass
class Node:
    """The reports of one node identity (host label, device, SGLang release): its shards."""

    host: str
    device: str
    device_key: str
    sglang: str
    reports: list[NodeReport] = field(default_factory=list)
    label: str = ""  # the column name (host label, made unique when one host ran several devices)
    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    subtests: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def entries(self) -> dict[str, dict[str, Any]]:
        """Tests and subtests by id: what pytest counts."""
        return {**self.tests, **self.subtests}

    @property
    def table_key(self) -> str:
        return self.reports[0].table_key

    @property
    def splits(self) -> int | None:
        return self.reports[0].shard[1] if self.reports[0].shard else None

    @property
    def simulated(self) -> bool:
        return self.reports[0].simulated

    @property
    def shards_text(self) -> str:
        if self.splits is None:
            return "whole run"
        groups = sorted(r.shard[0] for r in self.reports if r.shard)
        return f"{','.join(map(str, groups))} of {self.splits}"

    @property
    def missing_shards(self) -> list[int]:
        if self.splits is None:
            return []
        have = {r.shard[0] for r in self.reports if r.shard}
        return [g for g in range(1, self.splits + 1) if g not in have]


def _check_shards(node: Node) -> None:
    paths = ", ".join(r.path for r in node.reports)
    shards = [r.shard for r in node.reports]
    if len(node.reports) > 1 and None in shards:
        raise UsageError(
            f"several reports of node {node.host!r} ({node.device}, SGLang {node.sglang}) and not all "
            f"are pytest-split shards: {paths}; give each run its own --dsakit-host-label")
    if len({s[1] for s in shards if s}) > 1:
        raise UsageError(f"node {node.host!r} was split in different ways (--splits): {paths}; "
                         "merge shards of one split")
    groups = [s[0] for s in shards if s]
    for group in sorted(set(groups)):
        if groups.count(group) > 1:
            twice = ", ".join(r.path for r in node.reports if r.shard and r.shard[0] == group)
            raise UsageError(f"node {node.host!r}: shard {group} of {node.splits} reported twice ({twice}); "
                             "pass each shard's report once")


def group_nodes(reports: Iterable[NodeReport]) -> list[Node]:
    nodes: dict[tuple[str, str, str], Node] = {}
    for report in reports:
        key = (report.host, report.device, report.sglang)
        node = nodes.setdefault(key, Node(report.host, report.device, report.device_key, report.sglang))
        node.reports.append(report)
    result = list(nodes.values())
    hosts = [n.host for n in result]
    for node in result:
        _check_shards(node)
        node.label = node.host
        if hosts.count(node.host) > 1 or node.simulated:  # a simulated column always says so
            node.label = f"{node.host} ({node.device_key})"
        for report in node.reports:
            for into, entries in ((node.tests, report.tests), (node.subtests, report.subtests)):
                for nodeid, entry in entries.items():
                    current = into.get(nodeid)
                    if current is None or _RANK[entry["outcome"]] > _RANK[current["outcome"]]:
                        into[nodeid] = entry
    labels = [n.label for n in result]
    for node in result:
        if labels.count(node.label) > 1:
            node.label = f"{node.label} SGLang {node.sglang}"
    return result


# ---------------------------------------------------------------- coverage


def _ran(entry: dict[str, Any] | None) -> bool:
    return entry is not None and entry["outcome"] != "skipped"


def _cause(entry: dict[str, Any]) -> Cause:
    """A skipped entry's cause: its first reason, the others as `also`."""
    reasons = [r for r in entry.get("reasons") or () if isinstance(r, dict)]
    if not reasons:
        return Cause(UNCODED, "no reason given", "not explained", (), "unknown")
    first = Cause.from_dict(reasons[0])
    also = tuple(dict.fromkeys((*first.also, *(str(r.get("code", UNCODED)) for r in reasons[1:]))))
    return Cause(first.code, first.message, first.words, first.runs_on, first.note,
                 tuple(c for c in also if c != first.code))


@dataclass
class Merged:
    nodes: list[Node]
    must_run: tuple[str, ...]
    must_run_real: bool = False  # a must-run gate met only by simulated devices fails

    @property
    def test_ids(self) -> list[str]:
        """Every test and subtest id of any node."""
        return sorted({t for n in self.nodes for t in n.entries})

    def ran_on(self, nodeid: str) -> list[str]:
        return [n.label for n in self.nodes if _ran(n.entries.get(nodeid))]

    def gate_codes(self) -> list[str]:
        return sorted({c for n in self.nodes for e in n.tests.values() for c in e.get("gates", ())})

    def gate_cell(self, code: str, node: Node) -> dict[str, Any]:
        """The tests behind gate `code` on `node`: ran, failed, skipped, and the skipped ones by the
        code their skip counts under in the skip groups (`skipped_by`)."""
        counts: dict[str, Any] = {"ran": 0, "skipped": 0, "failed": 0, "skipped_by": {}}
        for entry in node.tests.values():
            if code in entry.get("gates", ()):
                counts["ran" if _ran(entry) else "skipped"] += 1
                counts["failed"] += entry["outcome"] in FAILING
                if entry["outcome"] == "skipped":
                    by = _cause(entry).code
                    counts["skipped_by"][by] = counts["skipped_by"].get(by, 0) + 1
        return counts

    def gate_ran_on(self, code: str, *, real: bool = False) -> list[str]:
        """Labels of the nodes where tests behind the gate ran (real=True: real hardware only)."""
        return [n.label for n in self.nodes if self.gate_cell(code, n)["ran"] and not (real and n.simulated)]

    def simulated_only(self) -> list[str]:
        """Gates whose tests ran only on simulated devices: no real hardware covered them."""
        return [c for c in self.gate_codes() if self.gate_ran_on(c) and not self.gate_ran_on(c, real=True)]

    def must_run_failures(self) -> dict[str, str]:
        """Must-run gate code -> why it counts as not run on any node."""
        declared = set(self.gate_codes())
        failures: dict[str, str] = {}
        for code in self.must_run:
            if code not in declared:
                failures[code] = "no test in any report declares this gate"
            elif not self.gate_ran_on(code):
                failures[code] = "every test behind it was skipped on every node"
            elif self.must_run_real and not self.gate_ran_on(code, real=True):
                failures[code] = (f"it ran only on simulated devices ({', '.join(self.gate_ran_on(code))}); "
                                  "--must-run-real needs real hardware")
        return failures

    def failures(self) -> list[FailureRow]:
        rows: list[FailureRow] = []
        for nodeid in self.test_ids:
            by_signature: dict[str, list[str]] = {}
            for node in self.nodes:
                entry = node.entries.get(nodeid)
                if entry is not None and entry["outcome"] in FAILING:
                    by_signature.setdefault(str(entry.get("signature", entry["outcome"])), []).append(node.label)
            passed = [n.label for n in self.nodes if n.entries.get(nodeid, {}).get("outcome") == "passed"]
            for sig, where in by_signature.items():
                text = ", ".join(where) + (" only" if passed else "")
                rows.append(FailureRow(nodeid, text + (f" (passed on {', '.join(passed)})" if passed else ""), sig))
        return rows

    def through_stand_in(self) -> dict[str, list[str]]:
        """Test id -> the nodes whose result for it came through a reference stand-in of an arch-only
        kernel (a simulated device; dsakit.simulation.reference_kernels): judged on the reference's output."""
        return {t: where for t in self.test_ids
                if (where := [n.label for n in self.nodes if "through_stand_in" in n.entries.get(t, {})])}

    def not_run_anywhere(self) -> list[str]:
        return [t for t in self.test_ids if not self.ran_on(t)]

    def node_groups(self, node: Node) -> list[CauseGroup]:
        """The node's skips (tests and subtests) grouped by cause: each skip once."""
        return group_causes((t, _cause(e)) for t, e in node.entries.items() if e["outcome"] == "skipped")

    def why(self) -> list[str]:
        """One "why these skipped" paragraph per node that skipped something."""
        return [why_paragraph(groups, node.label) for node in self.nodes if (groups := self.node_groups(node))]

    def runs_on(self, group: CauseGroup) -> str:
        """Where a group's cases run: the device table's entries that open it, with the fleet's
        nodes of each (real, or only simulated here), then the group's note."""
        here: dict[str, list[tuple[str, bool]]] = {}
        for node in self.nodes:
            here.setdefault(node.table_key, []).append((node.label, node.simulated))
        return runs_on_here(group.runs_on, "; ".join(group.notes), here)

    def skip_groups(self) -> list[SkipGroup]:
        """Every skip entry (test or subtest x node) in one group, by its cause's code."""
        causes: list[tuple[str, Cause]] = []
        skipped_on: dict[str, list[str]] = {}
        for node in self.nodes:
            for nodeid, entry in node.entries.items():
                if entry["outcome"] != "skipped":
                    continue
                cause = _cause(entry)
                causes.append((nodeid, cause))
                labels = skipped_on.setdefault(cause.code, [])
                if node.label not in labels:
                    labels.append(node.label)
        result: list[SkipGroup] = []
        for group in group_causes(causes):
            tests = sorted(set(group.tests))
            covering = [n.label for n in self.nodes if any(_ran(n.entries.get(t)) for t in tests)]
            uncovered = tuple(t for t in tests if not self.ran_on(t))
            if not covering:
                covered = NOT_COVERED
            elif uncovered:
                covered = f"{', '.join(covering)} ({len(tests) - len(uncovered)} of {len(tests)} tests; the rest {NOT_COVERED})"
            else:
                covered = ", ".join(covering)
            messages = tuple(group.messages.most_common()) if group.code == UNCODED else ()
            result.append(SkipGroup(group.code, group.reason, group.count, ", ".join(skipped_on[group.code]),
                                    covered, uncovered, self.runs_on(group), messages))
        return result

    def device_branches(self) -> list[tuple[str, str, list[str], DeviceBranches]]:
        """Per simulated device and SGLang release (the same files, so the same lines): its branches
        over every report of it, with the node labels they came from (a branch ran if it ran anywhere)."""
        groups: dict[tuple[str, str], tuple[list[str], list[dict[str, Any]]]] = {}
        for node in self.nodes:
            for report in node.reports:
                section = report.device_branches
                if section is None:
                    continue
                labels, sections = groups.setdefault((str(section.get("device", "?")), node.sglang), ([], []))
                sections.append(section)
                if node.label not in labels:
                    labels.append(node.label)
        releases: dict[str, int] = {}
        for device, _ in groups:
            releases[device] = releases.get(device, 0) + 1
        return [(device if releases[device] == 1 else f"{device} SGLang {sglang}", sglang, labels,
                 merge_sections(sections)[device]) for (device, sglang), (labels, sections) in groups.items()]

    def missing_shards(self) -> list[str]:
        """A sentence per node with a shard that has no report: its tests' outcomes are unknown."""
        return [f"{n.label}: shard {', '.join(map(str, n.missing_shards))} of {n.splits} has no report"
                for n in self.nodes if n.missing_shards]

    def exit_code(self) -> int:
        """1: a test failed somewhere, a must-run gate ran nowhere, or a shard's report is missing
        (a job that crashed or was cancelled: what it would have failed is unknown)."""
        return 1 if self.failures() or self.must_run_failures() or self.missing_shards() else 0


# ---------------------------------------------------------------- output


def _gate_text(counts: dict[str, Any], code: str) -> str:
    """`ran 1, skipped 2 (fa3 1)`: the skipped tests not counted under `code` in the skip groups
    say under which code they are."""
    if not counts["ran"] and not counts["skipped"]:
        return "-"
    parts = [f"ran {counts['ran']}"] if counts["ran"] else []
    if counts["failed"]:
        parts.append(f"failed {counts['failed']}")
    if counts["skipped"]:
        others = {c: n for c, n in counts["skipped_by"].items() if c != code}
        parts.append(f"skipped {counts['skipped']}"
                     + (" (" + ", ".join(f"{c} {n}" for c, n in sorted(others.items())) + ")" if others else ""))
    return ", ".join(parts)


def _node_rows(merged: Merged) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for node in merged.nodes:
        counts = _outcome_counts(node.tests.values())
        if node.subtests:
            counts += "; subtests: " + _outcome_counts(node.subtests.values())
        missing = f"; MISSING shard {', '.join(map(str, node.missing_shards))}" if node.missing_shards else ""
        rows.append((node.label, node.device, node.sglang, node.shards_text + missing, counts or "no tests"))
    return rows


def _outcome_counts(entries: Iterable[dict[str, Any]]) -> str:
    outcomes = [e["outcome"] for e in entries]
    # worst first, then by name: "passed" and "xfailed" rank alike, and a set's order changes from run to run
    return ", ".join(f"{outcomes.count(o)} {o}" for o in sorted(set(outcomes), key=lambda o: (-_RANK[o], o)))


def _gate_rows(merged: Merged) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    must = merged.must_run_failures()
    for code in sorted(set(merged.gate_codes()) | set(merged.must_run)):
        ran = merged.gate_ran_on(code)
        status = "ran on " + ", ".join(ran) if ran else "RAN ON NO NODE"
        if ran and not merged.gate_ran_on(code, real=True):
            status += " (simulated only: no real hardware)"
        if code in must:
            status += " (must-run: FAILED)"
        elif code in merged.must_run:
            status += " (must-run)"
        rows.append((code, *(_gate_text(merged.gate_cell(code, n), code) for n in merged.nodes), status))
    return rows


def _releases_note(merged: Merged) -> str:
    releases: dict[str, list[str]] = {}
    for node in merged.nodes:
        releases.setdefault(node.sglang, []).append(node.label)
    if len(releases) < 2:
        return ""
    return ("SGLang releases differ between nodes: "
            + "; ".join(f"{r} on {', '.join(releases[r])}" for r in sorted(releases, key=release_order))
            + " (each node's outcomes are for its own release; the SGLang column says which)")


def comment(merged: Merged) -> Comment:
    must = merged.must_run_failures()
    summary = [f"{len(merged.nodes)} node(s), {sum(len(n.reports) for n in merged.nodes)} report(s), "
               f"{len(merged.test_ids)} test ids; {len(merged.failures())} failure(s); "
               f"{len(merged.not_run_anywhere())} test(s) ran on no node"]
    note = _releases_note(merged)
    if note:
        summary.append(note)
    stood_in = merged.through_stand_in()
    if stood_in:
        summary.append(f"{len(stood_in)} test(s) ran with a stand-in for an arch-only kernel (a reference computed "
                       f"its output) on {', '.join(sorted({n for w in stood_in.values() for n in w}))}")
    summary += [f"{line}: its tests are counted as not run" for line in merged.missing_shards()]
    nowhere = [code for code in merged.gate_codes() if not merged.gate_ran_on(code)]
    if nowhere:
        summary.append("gates that ran on no node: " + ", ".join(f"`{code}`" for code in nowhere))
    simulated = merged.simulated_only()
    if simulated:
        summary.append("gates that ran only on simulated devices (not real coverage): "
                       + ", ".join(f"`{code}`" for code in simulated))
    for code, why in must.items():
        summary.append(f"must-run gate `{code}` ran on no node: {why}")
    branches = merged.device_branches()
    for label, _, nodes, found in branches:
        summary.append(f"device branches under simulated {label} ({len(found.branches)} that it decides otherwise than "
                       f"{found.real or 'the real device'}; {found.reports} report(s): {', '.join(nodes)}): "
                       f"{found.counts()}"
                       + (f"; not watched: {'; '.join(found.unwatched)}" if found.unwatched else ""))
    summary += merged.why()
    tables = _branch_tables(branches)
    return Comment(
        title="dsakit fleet coverage",
        summary=summary,
        failures=[FailureSection("Failures", tuple(merged.failures()),
                                 "A failure on some nodes only says where it passed.")],
        skips=merged.skip_groups(),
        tables=[
            Table("Nodes", ("node", "device", "SGLang", "shards", "tests"), tuple(_node_rows(merged))),
            Table("Gates (tests behind each gate, per node)",
                  ("gate", *(n.label for n in merged.nodes), "fleet"), tuple(_gate_rows(merged))),
            *tables,
        ],
    )


def _branch_tables(branches: list[tuple[str, str, list[str], DeviceBranches]]) -> list[Table]:
    """Ran / never-ran counts per simulated device, then every branch that never ran with its reason."""
    if not branches:
        return []
    counts = Table("Device branches (SGLang's device-gated branches the simulated device decides otherwise; "
                   "a branch ran if it ran in any report)",
                   ("device", "SGLang", "nodes", "ran", "never ran", "by reason"),
                   tuple((label, sglang, ", ".join(nodes), str(len(found.ran)), str(len(found.never_ran)),
                          found.counts().partition(" (")[2].rstrip(")") or "-")
                         for label, sglang, nodes, found in branches))
    never = Table("Device branches that never ran", ("device", "branch", "guard -> the device's arm: why"),
                  tuple((label, b.site, b.text().removeprefix(f"{b.site}: "))
                        for label, _, _, found in branches for b in found.never_ran))
    return [counts, never] if never.rows else [counts]


def as_json(merged: Merged) -> dict[str, Any]:
    return {
        "nodes": [{"label": n.label, "host": n.host, "device": n.device, "simulated": n.simulated, "sglang": n.sglang,
                   "shards": n.shards_text, "missing_shards": n.missing_shards,
                   "reports": [r.path for r in n.reports]} for n in merged.nodes],
        "gates": {code: {"nodes": {n.label: merged.gate_cell(code, n) for n in merged.nodes},
                         "ran_on": merged.gate_ran_on(code), "ran_on_real": merged.gate_ran_on(code, real=True)}
                  for code in merged.gate_codes()},
        "tests": {t: {n.label: n.tests[t]["outcome"] for n in merged.nodes if t in n.tests}
                  for t in merged.test_ids if any(t in n.tests for n in merged.nodes)},
        "subtests": {t: {n.label: n.subtests[t]["outcome"] for n in merged.nodes if t in n.subtests}
                     for t in merged.test_ids if any(t in n.subtests for n in merged.nodes)},
        "failures": [{"test": r.test, "where": r.where, "signature": r.signature} for r in merged.failures()],
        "not_run_anywhere": merged.not_run_anywhere(),
        "through_stand_in": merged.through_stand_in(),
        "skips": [{"code": g.code, "reason": g.reason, "skipped": g.skipped, "skipped_on": g.skipped_on,
                   "runs_on": g.runs_on, "covered_on": g.covered_on, "uncovered": list(g.uncovered),
                   "messages": [{"message": m, "count": n} for m, n in g.messages]}
                  for g in merged.skip_groups()],
        "why": merged.why(),
        "device_branches": {label: {"sglang": sglang, "nodes": nodes, "reports": found.reports, "ran": len(found.ran),
                                    "total": len(found.branches), "branches": [b.as_dict() for b in found.branches]}
                            for label, sglang, nodes, found in merged.device_branches()},
        "must_run": {"codes": list(merged.must_run), "real": merged.must_run_real,
                     "failed": merged.must_run_failures()},
        "exit": merged.exit_code(),
    }


def format_text(merged: Merged) -> list[str]:
    def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
        widths = [min(max(len(str(r[i])) for r in [header, *rows]), 70) for i in range(len(header) - 1)]
        return ["  ".join(str(c)[:70].ljust(w) for c, w in zip(row, widths)) + "  " + str(row[-1])
                for row in [header, *rows]]

    view = comment(merged)
    lines = ["dsakit report merge: " + view.summary[0], *view.summary[1:], ""]
    for t in view.tables:
        lines += [t.title + ":", *table(t.header, t.rows), ""]
    failures = view.failures[0].rows
    lines.append(f"failures ({len(failures)}):")
    lines += [f"  {r.test}  on {r.where}: {r.signature[:160]}" for r in failures] or ["  none"]
    lines.append("")
    lines.append("skips by reason code (each skip once):")
    for g in view.skips:
        lines.append(f"  [{g.code}] {g.skipped} skipped on {g.skipped_on}; runs on: {g.runs_on}; "
                     f"covered on: {g.covered_on}")
        lines.append(f"      {g.reason[:200]}")
        lines += [f"      {n:3d}x {m}" for m, n in g.messages]
        lines += [f"      ran on no node: {t}" for t in g.uncovered[:5]]
        if len(g.uncovered) > 5:
            lines.append(f"      ... and {len(g.uncovered) - 5} more (--json or --markdown list them)")
    return lines


def merge(paths: Sequence[str], must_run: Sequence[str] = (), *, must_run_real: bool = False) -> Merged:
    """The reports merged; must-run gates: `must_run` (validated here) and every report's own."""
    from dsakit.gates.table import validate_codes

    codes = validate_codes(must_run) if must_run else ()
    reports = [load_report(p) for p in paths]
    return Merged(group_nodes(reports), tuple(dict.fromkeys([*codes, *(c for r in reports for c in r.must_run)])),
                  must_run_real)


def run_report_merge(paths: Sequence[str], *, must_run: str = "", json_path: str | None = None,
                     markdown_path: str | None = None, must_run_real: bool = False) -> int:
    from dsakit.gates.table import split_codes
    from dsakit.compare import markdown

    json_out = output_file(json_path, "--json") if json_path is not None else None
    markdown_out = output_file(markdown_path, "--markdown") if markdown_path is not None else None
    merged = merge(paths, split_codes(must_run, "--must-run"), must_run_real=must_run_real)
    print("\n".join(format_text(merged)))
    if json_out is not None:
        json_out.write_json(as_json(merged))
    if markdown_out is not None:
        markdown_out.write_text(markdown.render(comment(merged)))
    code = merged.exit_code()
    if code:
        why = [f"must-run gate {c} ran on no node ({w})" for c, w in merged.must_run_failures().items()]
        if merged.failures():
            why.append(f"{len(merged.failures())} test failure(s)")
        why += [f"{line} (merge every shard's report, or rerun the shard)" for line in merged.missing_shards()]
        print("dsakit report merge: FAILED: " + "; ".join(why), file=sys.stderr)
    return code
