"""The PR-comment markdown of `dsakit compare --markdown` and `dsakit report merge --markdown`.

Owns: the comment as data (`Comment`: failure sections in the order given, regressions first; skips
grouped by reason code with the node that covers them) and its one rendering. Must not classify or
merge anything: `dsakit.compare.pr_vs_base` and `dsakit.compare.report_merge` build the `Comment`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

NOT_COVERED = "not covered on any node"
_LIST_LIMIT = 20  # test ids listed per group before "... and N more"
_FOLD_ABOVE = 10  # failure rows shown flat; more are summed up per signature and folded


@dataclass(frozen=True)
class FailureRow:
    test: str
    where: str  # the node(s) or run(s) it fails on
    signature: str  # exception type + message @ crash frame (dsakit.gates.outcomes.signature)


@dataclass(frozen=True)
class FailureSection:
    title: str
    rows: tuple[FailureRow, ...]
    note: str = ""


@dataclass(frozen=True)
class SkipGroup:
    code: str
    reason: str  # the representative message
    skipped: int  # skip entries (test or subtest x node), each in one group
    skipped_on: str
    covered_on: str  # nodes where these tests ran, or NOT_COVERED
    uncovered: tuple[str, ...] = ()  # test ids that ran on no node
    runs_on: str = ""  # the devices that open the group's code, and the fleet's nodes of them
    messages: tuple[tuple[str, int], ...] = ()  # an uncoded group's messages, verbatim, with counts


@dataclass(frozen=True)
class Table:
    title: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass
class Comment:
    """`failures`: the first section (regressions, or failures) is always shown, empty ones after it
    are left out."""

    title: str
    summary: list[str] = field(default_factory=list)
    failures: list[FailureSection] = field(default_factory=list)
    skips: list[SkipGroup] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    lead_tables: list[Table] = field(default_factory=list)  # right after the first failure section
    list_limit: int = _LIST_LIMIT  # test ids named per skip group before "... and N more"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip() or " "


def _code(text: str) -> str:
    return f"`{text}`" if "`" not in text else text


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [
        "| " + " | ".join(_cell(h) for h in header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows),
    ]


def _test_list(tests: Sequence[str], limit: int = _LIST_LIMIT) -> str:
    shown = ", ".join(_code(t) for t in tests[:limit])
    more = len(tests) - limit
    return shown + (f", ... and {more} more" if more > 0 else "")


def _failure_section(section: FailureSection) -> list[str]:
    lines = [f"### {section.title} ({len(section.rows)})", ""]
    if section.note:
        lines += [section.note, ""]
    if not section.rows:
        return [*lines, "none", ""]
    rows = _table(("test", "where", "signature"), [(_code(r.test), r.where, _code(r.signature)) for r in section.rows])
    if len(section.rows) <= _FOLD_ABOVE:
        return [*lines, *rows, ""]
    # many rows: one line per (where, signature) first, every test folded below
    groups: dict[tuple[str, str], list[str]] = {}
    for r in section.rows:
        groups.setdefault((r.where, r.signature), []).append(r.test)
    summary = _table(("tests", "where", "signature"),
                     [(str(len(tests)), where, _code(sig)) for (where, sig), tests in groups.items()])
    return [*lines, *summary, "", "<details><summary>every test</summary>", "", *rows, "", "</details>", ""]


def render(comment: Comment) -> str:
    lines = [f"## {comment.title}", ""]
    if comment.summary:
        lines += [f"- {line}" for line in comment.summary] + [""]
    for position, section in enumerate(comment.failures):
        if section.rows or position == 0:  # the first section always shows, even when empty
            lines += _failure_section(section)
        if position == 0:
            for table in comment.lead_tables:
                lines += [f"### {table.title}", "", *(_table(table.header, table.rows) if table.rows else ["none"]), ""]
    lines.append(f"### Skips by reason code ({len(comment.skips)})")
    lines.append("")
    if comment.skips:
        lines += _table(("code", "skips", "skipped on", "runs on", "covered on", "reason"),
                        [(_code(g.code), str(g.skipped), g.skipped_on, g.runs_on or "-", g.covered_on, g.reason)
                         for g in comment.skips])
        for g in comment.skips:
            if g.messages:
                lines += ["", f"<details><summary>{_code(g.code)} messages, verbatim ({len(g.messages)})</summary>", ""]
                lines += [f"- {n} x {_code(m)}" for m, n in g.messages]
                lines += ["", "</details>"]
        uncovered = [g for g in comment.skips if g.uncovered]
        if uncovered:
            count = len({t for g in uncovered for t in g.uncovered})
            lines += ["", f"<details><summary>Tests that ran on no node ({count})</summary>", ""]
            lines += [f"- {_code(g.code)} ({len(g.uncovered)}): {_test_list(g.uncovered, comment.list_limit)}" for g in uncovered]
            lines += ["", "</details>"]
    else:
        lines.append("none")
    lines.append("")
    for table in comment.tables:
        lines += [f"### {table.title}", "", *_table(table.header, table.rows), ""]
    return "\n".join(lines).rstrip() + "\n"
