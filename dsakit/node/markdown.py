"""The PR-comment markdown of `dsakit compare --markdown` and `dsakit report merge --markdown`.

Owns: the comment as data (`Comment`: failure sections in the order given, regressions first; skips
grouped by reason code with the node that covers them) and its one rendering. Must not classify or
merge anything: `dsakit.node.pr_vs_base` and `dsakit.node.report_merge` build the `Comment`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

NOT_COVERED = "not covered on any node"
_LIST_LIMIT = 20  # test ids listed per group before "... and N more"


@dataclass(frozen=True)
class FailureRow:
    test: str
    where: str  # the node(s) or run(s) it fails on
    signature: str  # exception type + message @ crash frame (dsakit.node.pr_vs_base.signature)


@dataclass(frozen=True)
class FailureSection:
    title: str
    rows: tuple[FailureRow, ...]
    note: str = ""


@dataclass(frozen=True)
class SkipGroup:
    code: str
    reason: str
    skipped: int  # skip entries (test x node)
    skipped_on: str
    covered_on: str  # nodes where these tests ran, or NOT_COVERED
    uncovered: tuple[str, ...] = ()  # test ids that ran on no node


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


def _test_list(tests: Sequence[str]) -> str:
    shown = ", ".join(_code(t) for t in tests[:_LIST_LIMIT])
    more = len(tests) - _LIST_LIMIT
    return shown + (f", ... and {more} more" if more > 0 else "")


def render(comment: Comment) -> str:
    lines = [f"## {comment.title}", ""]
    if comment.summary:
        lines += [f"- {line}" for line in comment.summary] + [""]
    for position, section in enumerate(comment.failures):
        if not section.rows and position > 0:
            continue  # the first section (regressions, failures) always shows, even when empty
        lines.append(f"### {section.title} ({len(section.rows)})")
        lines.append("")
        if section.note:
            lines += [section.note, ""]
        if section.rows:
            lines += _table(("test", "where", "signature"),
                            [(_code(r.test), r.where, _code(r.signature)) for r in section.rows])
        else:
            lines.append("none")
        lines.append("")
    lines.append(f"### Skips by reason code ({len(comment.skips)})")
    lines.append("")
    if comment.skips:
        lines += _table(("code", "skips", "skipped on", "covered on", "reason"),
                        [(_code(g.code), str(g.skipped), g.skipped_on, g.covered_on, g.reason)
                         for g in comment.skips])
        uncovered = [g for g in comment.skips if g.uncovered]
        if uncovered:
            lines.append("")
            lines.append(f"Tests that ran on no node ({sum(len(g.uncovered) for g in uncovered)}):")
            lines.append("")
            lines += [f"- {_code(g.code)}: {_test_list(g.uncovered)}" for g in uncovered]
    else:
        lines.append("none")
    lines.append("")
    for table in comment.tables:
        lines += [f"### {table.title}", "", *_table(table.header, table.rows), ""]
    return "\n".join(lines).rstrip() + "\n"


def write(comment: Comment, path: str) -> None:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render(comment), encoding="utf-8")
