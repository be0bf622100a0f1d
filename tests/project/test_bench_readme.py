"""bench/README.md stays the page of today's figures, as the README stays the guide: each target is
its value, date, command, goal and the note that holds its history, in a few lines; the rounds that
led there live in the dated notes under bench/notes/, and every script of bench/ is listed once."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PAGE = (BENCH / "README.md").read_text(encoding="utf-8")
FIELDS = ("Value", "Date", "Command", "Goal", "History")
MAX_LINES = 160  # 13 targets of ~7 lines, the file table and the opening
MAX_CHARS = 12_000  # pytest-benchmark's whole README is ~7k
HISTORY_WORDS = re.compile(r"\b(rounds?|sessions? \d+|issues? \d+|before this|earlier|previous(ly)?)\b", re.I)


def _targets() -> dict[str, list[str]]:
    section = PAGE.split("\n## Targets\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.split(r"^### ", section, flags=re.M)[1:]
    return {block.splitlines()[0]: block.splitlines()[1:] for block in blocks}


def _fields(lines: list[str]) -> dict[str, str]:
    """`- **Field:** text` items, a continuation line (two-space indent) joined to its item."""
    found: dict[str, str] = {}
    name = ""
    for line in lines:
        item = re.match(r"- \*\*(\w+):\*\* (.+)", line)
        if item:
            name = item.group(1)
            assert name not in found, f"{name} twice"
            found[name] = item.group(2)
        elif line.startswith("  ") and name:
            found[name] += " " + line.strip()
        else:
            assert not line.strip(), f"not a field of the target: {line!r}"
    return found


def test_each_target_is_its_value_date_command_goal_and_history() -> None:
    targets = _targets()
    assert len(targets) >= 10, list(targets)
    for name, lines in targets.items():
        fields = _fields(lines)
        assert tuple(fields) == FIELDS, f"{name}: fields {tuple(fields)}, expected {FIELDS} in that order"
        assert re.match(r"20\d\d-\d\d-\d\d, ", fields["Date"]), f"{name}: the date first, then the machine"
        assert "`" in fields["Command"], f"{name}: the command, in backticks"
        for path in re.findall(r"\b((?:bench|scripts)/[\w/.-]+\.(?:py|sh))", fields["Command"]):
            assert (ROOT / path).is_file(), f"{name}: its command names {path}, which does not exist"
        assert re.search(r": (not )?met\b|^none: ", fields["Goal"]), \
            f"{name}: the goal says its bound and whether it is met ({fields['Goal']!r})"
        notes = re.findall(r"\]\((notes/[\w.-]+\.md)\)", fields["History"])
        assert notes, f"{name}: its history is a link to a dated note"
        for note in notes:
            assert (BENCH / note).is_file(), f"{name}: {note} does not exist"
        assert len(lines) <= 10, f"{name}: {len(lines)} lines; the history goes to its note"


def test_the_page_holds_no_history_and_stays_short() -> None:
    lines = PAGE.splitlines()
    assert len(lines) <= MAX_LINES, f"bench/README.md is {len(lines)} lines (at most {MAX_LINES})"
    assert len(PAGE) <= MAX_CHARS, f"bench/README.md is {len(PAGE)} characters (at most {MAX_CHARS})"
    worded = [line for line in lines if HISTORY_WORDS.search(line)]
    assert not worded, f"history belongs in bench/notes/: {worded}"


def test_every_note_is_dated_and_some_target_links_it() -> None:
    linked = {note for lines in _targets().values() for note in re.findall(r"\]\((notes/[\w.-]+\.md)\)", "\n".join(lines))}
    notes = {f"notes/{path.name}" for path in (BENCH / "notes").glob("*.md")}
    assert notes and linked == notes, f"not linked: {sorted(notes - linked)}; missing: {sorted(linked - notes)}"
    for note in notes:
        assert re.fullmatch(r"notes/20\d\d-\d\d-\d\d-[a-z0-9-]+\.md", note), f"{note}: name it YYYY-MM-DD-topic.md"


def test_every_bench_script_is_listed_once() -> None:
    table = PAGE.split("\n## Files\n", 1)[1]
    listed = re.findall(r"^\| `([\w.-]+)` \|", table, flags=re.M)
    scripts = sorted(path.name for path in BENCH.iterdir() if path.suffix in (".py", ".sh"))
    assert sorted(listed) == scripts, f"unlisted: {sorted(set(scripts) - set(listed))}; gone: {sorted(set(listed) - set(scripts))}"
