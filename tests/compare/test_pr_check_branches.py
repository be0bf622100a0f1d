"""pr-check's device branches (issue 42 item 3), in this process on hand-made trees and run records:
each simulated device's coverage of PR vs base, and the device-gated branches whose lines the PR's
diff touches, with whether any run covered them and, where none did, why. The end-to-end run on
real SGLang trees is tests/cli/test_pr_check.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsakit.compare import pr_check
from dsakit.gates.device_branches import changed_lines
from dsakit.compare.markdown import render
from dsakit.compare.pr_vs_base import Run
from dsakit.compare.pr_check import DeviceCheck, PrCheck

FILE = "srt/layers/attention/dsa_backend.py"
BASE = """class Backend:
    def f(self):
        if self.device_sm_major >= 10:
            self.pad = 128
        else:
            self.pad = 64
        if self.device_sm_major >= 10 and self.trtllm:
            self.workspace = alloc(1 << 20)
        return self.pad
"""


def _record(line: int, body: int, end: int, guard: str, status: str, code: str = "") -> dict[str, Any]:
    return {"site": f"sglang/{FILE}:{line}", "file": FILE, "line": line, "body": body, "end": end, "guard": guard,
            "function": "Backend.f", "takes": "body", "status": status,
            "reason": {"code": code, "message": f"{code} words"} if code else None}


def _trees(tmp_path: Path, pr_text: str) -> tuple[Path, Path]:
    for tree, text in (("base", BASE), ("pr", pr_text)):
        path = tmp_path / tree / "sglang" / FILE
        path.parent.mkdir(parents=True)
        path.write_text(text)
    return tmp_path / "base" / "sglang", tmp_path / "pr" / "sglang"


def _check(device: str, pr_records: list[dict[str, Any]], base_ran: int) -> DeviceCheck:
    check = DeviceCheck(device, device, Run("base", "b", 0, 1.0), Run("pr", "p", 0, 1.0))
    check.branches = {"pr": {"device": device, "branches": pr_records},
                      "base": {"device": device, "branches": [{**r, "status": "ran" if i < base_ran else "not-reached"}
                                                              for i, r in enumerate(pr_records)]}}
    return check


def test_changed_lines_are_the_pr_side_of_the_diff() -> None:
    assert changed_lines("a\nb\nc\n", "a\nB\nc\n") == {2}
    assert changed_lines("a\nb\nc\n", "a\nb\nx\ny\nc\n") == {3, 4}
    assert changed_lines("a\nb\nc\n", "a\nc\n") == {1, 2}  # a deletion marks the lines around it
    assert changed_lines(None, "a\nb\n") == {1, 2}  # a new file: every line
    assert changed_lines("a\n", "a\n") == set()


def test_the_pr_changes_an_arm_no_run_took_and_a_guard_one_did(tmp_path: Path) -> None:
    """The PR narrows the pad branch's guard (sm103 ran its arm: covered) and changes the workspace size
    in the TRT-LLM arm that no device's run took: said in the summary, the table and the JSON, per device
    with the reason it never ran."""
    pr_text = BASE.replace("if self.device_sm_major >= 10:", "if self.device_sm_major >= 10 and wide:").replace(
        "alloc(1 << 20)", "alloc(1 << 16)")
    base, pr = _trees(tmp_path, pr_text)
    pad = _record(3, 4, 6, "self.device_sm_major >= 10 and wide", "ran")
    trt = _record(7, 8, 8, "self.device_sm_major >= 10 and self.trtllm", "not-reached", "configuration-never-built")
    checks = [_check("sm103", [pad, trt], base_ran=2),
              _check("sm100", [{**pad, "status": "not-reached", "reason": {"code": "guard-not-reached", "message": "m"}},
                               {**trt, "reason": {"code": "arm-needs-configuration", "message": "needs self.trtllm"}}], 0)]
    changes = pr_check.changed_branches(checks, base, pr)
    assert [(c.branch.line, c.change, c.where, c.covered) for c in changes] == [
        (3, "guard changed", f"sglang/{FILE}:3", True),
        (7, "arm changed", f"sglang/{FILE}:8", False),
    ]
    assert changes[0].runs() == "ran on sm103 (simulated)"
    assert changes[1].runs() == ("NO RUN COVERED IT: sm103 (simulated) [configuration-never-built] "
                                 "configuration-never-built words; sm100 (simulated) [arm-needs-configuration] "
                                 "needs self.trtllm")
    result = PrCheck("base-src", "pr-src", checks, [], (), changes)
    text = render(pr_check.comment(result))
    assert "- sm103 (simulated): device branches: PR 1 of 2 took the device's arm (base 2 of 2)" in text
    assert "- sm100 (simulated): device branches: PR 0 of 2 took the device's arm (base 0 of 2)" in text
    assert (f"- **the PR changes 1 device branch(es) that no run covered**: `sglang/{FILE}:8` (arm changed: "
            "`if self.device_sm_major >= 10 and self.trtllm`)") in text
    assert "### Device branches the PR changes" in text
    assert f"| sglang/{FILE}:7: if self.device_sm_major >= 10 and self.trtllm | arm changed | sglang/{FILE}:8 | " \
           "NO RUN COVERED IT: sm103 (simulated)" in text
    data = pr_check.as_json(result)
    assert data["device_branches"]["sm103 (simulated)"] == {"base": {"ran": 2, "total": 2}, "pr": {"ran": 1, "total": 2}}
    assert [(c["where"], c["covered"]) for c in data["branch_changes"]] == [(f"sglang/{FILE}:3", True),
                                                                           (f"sglang/{FILE}:8", False)]
    assert data["exit"] == 0  # said, never a regression by itself


def test_a_new_branch_and_an_untouched_file_are_told_apart(tmp_path: Path) -> None:
    pr_text = BASE.replace("        return self.pad\n", "        if is_sm100_supported():\n            self.fp4 = True\n"
                                                         "        return self.pad\n")
    base, pr = _trees(tmp_path, pr_text)
    new = _record(9, 10, 10, "is_sm100_supported()", "other-arm", "probe-cached-before-simulation")
    untouched = _record(3, 4, 6, "self.device_sm_major >= 10", "ran")
    changes = pr_check.changed_branches([_check("sm103", [untouched, new], 1)], base, pr)
    assert [(c.branch.line, c.change, c.covered) for c in changes] == [(9, "new branch", False)]
    assert pr_check.changed_branches([_check("sm103", [untouched], 1)], base, base) == []  # no diff, nothing


def test_a_pr_that_moves_a_kept_dispatch_flag_changes_its_guard_not_an_arm(tmp_path: Path) -> None:
    """SGLang keeps the MHA-vs-MLA choice as a flag (`self.use_mha = (... and (device_sm == 90 or (device_sm
    >= 100 and device_sm < 110)) and ...)`): a decision made as a value has no arm of its own, so any
    changed line of it is its guard, and the comment spells it as SGLang does, not as an `if`."""
    base_text = BASE + """
    def prefill(self, device_sm, short):
        self.use_mha = (
            short
            and (device_sm == 90 or (device_sm >= 100 and device_sm < 110))
        )
"""
    pr_text = base_text.replace("device_sm < 110", "device_sm < 103")
    for tree, text in (("base", base_text), ("pr", pr_text)):
        path = tmp_path / tree / "sglang" / FILE
        path.parent.mkdir(parents=True)
        path.write_text(text)
    flag = {**_record(12, 12, 15, "short and (device_sm == 90 or (device_sm >= 100 and device_sm < 103))", "ran"),
            "takes": "False", "value": "self.use_mha ="}
    checks = [_check("sm103", [flag], base_ran=0)]
    changes = pr_check.changed_branches(checks, tmp_path / "base" / "sglang", tmp_path / "pr" / "sglang")
    assert [(c.branch.line, c.change, c.where, c.covered) for c in changes] == [
        (12, "guard changed", f"sglang/{FILE}:14", True)]
    text = render(pr_check.comment(PrCheck("base-src", "pr-src", checks, [], (), changes)))
    assert (f"| sglang/{FILE}:12: self.use_mha = short and (device_sm == 90 or (device_sm >= 100 and "
            f"device_sm < 103)) | guard changed | sglang/{FILE}:14 | ran on sm103 (simulated) |") in text
