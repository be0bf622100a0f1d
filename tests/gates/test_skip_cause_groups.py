"""The groups a run's skips form and the sentences read from them (issue 45 item 4: the mutation
run's core): every skip counted once under its code, the paragraph's clauses and their counts, the
report's group entries, and where a group runs on a fleet. All in-process, on causes made here."""

from __future__ import annotations

from dsakit.gates.skip_causes import (
    KERNEL_LAUNCH,
    UNCODED,
    Cause,
    group_causes,
    runs_on_here,
    why_paragraph,
)

FA3 = Cause("fa3", "FA3 needs SM 9.0", "fa3 needs SM 9.x", ("sm90",), "", ("module:flashinfer",))


def test_one_group_per_code_largest_first_then_by_code() -> None:
    skips = [("t::a", FA3), ("t::b", Cause("aiter", "m", "aiter needs gfx9")), ("t::c", FA3),
             ("t::d", Cause("cuda", "m", "cuda needs a GPU")), ("t::e", Cause("aiter", "m", "aiter needs gfx9"))]
    groups = group_causes(skips)
    assert [(g.code, g.count, g.tests) for g in groups] == [
        ("aiter", 2, ["t::b", "t::e"]), ("fa3", 2, ["t::a", "t::c"]), ("cuda", 1, ["t::d"])]


def test_a_groups_clause_counts_each_wording_and_its_entry_holds_every_skip() -> None:
    other = Cause("fa3", "FA3 is Hopper only", "fa3 is Hopper only", ("sm90",), "real hardware only")
    noted = Cause("fa3", "FA3 is Hopper only", "fa3 is Hopper only", ("sm90", "sm100"), "rerun alone")
    (group,) = group_causes([("t::a", FA3), ("t::b", other), ("t::c", FA3), ("t::d", noted), ("t::e", other)])
    assert group.clause() == "fa3 needs SM 9.x (2); fa3 is Hopper only (3)"
    assert group.runs_on_text() == "sm90, sm100 (real hardware only; rerun alone)"
    assert group.as_dict() == {
        "code": "fa3", "count": 5, "reason": "FA3 is Hopper only", "words": group.clause(), "runs_on": ["sm90", "sm100"],
        "note": "real hardware only; rerun alone", "also": {"module:flashinfer": 2},
        "messages": [{"message": "FA3 is Hopper only", "count": 3, "tests": ["t::b", "t::d", "t::e"]},
                     {"message": "FA3 needs SM 9.0", "count": 2, "tests": ["t::a", "t::c"]}],
        "tests": ["t::a", "t::b", "t::c", "t::d", "t::e"]}


def test_uncoded_skips_are_quoted_and_the_first_four_named() -> None:
    skips = [(f"t::{i}", Cause(UNCODED, message, "not explained")) for i, message in
             enumerate(["no GPU", "no GPU", "slow", "flaky", "later", "never"])]
    (group,) = group_causes(skips)
    assert group.clause() == "not explained (6: 'no GPU' x2, 'slow', 'flaky', 'later' and 1 more)"
    (four,) = group_causes(skips[:5])
    assert four.clause() == "not explained (5: 'no GPU' x2, 'slow', 'flaky', 'later')"


def test_kernel_launch_skips_name_their_kernels_unquoted() -> None:
    def launch(kernel: str) -> Cause:
        return Cause(KERNEL_LAUNCH, f"{kernel} (called at t.py:3) would launch a kernel", "kernels not run under simulation")

    (group,) = group_causes([("t::a", launch("flash_mla")), ("t::b", launch("deep_gemm")), ("t::c", launch("flash_mla"))])
    assert group.clause() == "kernels not run under simulation (3: flash_mla x2, deep_gemm)"


def test_the_paragraph_joins_every_groups_clause_or_is_empty() -> None:
    groups = group_causes([("t::a", FA3), ("t::b", Cause("cuda", "m", "cuda needs a GPU"))])
    assert why_paragraph(groups, "cpu (real)") == "why these skipped on cpu (real): cuda needs a GPU (1); fa3 needs SM 9.x (1)"
    assert why_paragraph([], "cpu (real)") == ""


def test_where_a_group_runs_on_a_fleet() -> None:
    here = {"sm90": [("h200", False), ("b300-sim", True)], "sm103": [("sim", True)]}
    assert runs_on_here(("sm90", "sm103", "sm100", "gfx942"), "real hardware only", here) == (
        "sm90 (real here: h200), sm103 (only simulated here), sm100, gfx942 (no node here) — real hardware only")
    assert runs_on_here(("sm90",), "", {"sm90": [("a", False), ("b", False)]}) == "sm90 (real here: a, b)"
    assert runs_on_here(("sm103",), "", here) == "sm103 (only simulated here)"
    assert runs_on_here((), "where flashinfer is installed", here) == "where flashinfer is installed"
    assert runs_on_here((), "", here) == "unknown"
