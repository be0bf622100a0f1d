"""A release table of SGLang's skip messages holds its first and its last release (issue 45 item 4:
the mutation run's core): a row declared for 0.5.17-0.5.21 classifies 0.5.21's messages too."""

from __future__ import annotations

from dsakit.gates.sglang_skips import ReleaseTable, release_numbers


def test_a_closed_range_holds_both_its_ends_and_nothing_past_them() -> None:
    table = ReleaseTable("0.5.17", "0.5.21", ())
    held = {r: table.holds(release_numbers(r)) for r in ("0.5.16", "0.5.17", "0.5.21", "0.5.21.post1", "0.5.22")}
    assert held == {"0.5.16": False, "0.5.17": True, "0.5.21": True, "0.5.21.post1": True, "0.5.22": False}


def test_an_open_range_holds_every_later_release() -> None:
    table = ReleaseTable("0.5.17", None, ())
    assert table.holds((0, 5, 17)) and table.holds((0, 6, 0)) and not table.holds((0, 5, 16))
