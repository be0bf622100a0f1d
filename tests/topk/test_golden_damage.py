"""A golden holding a byte that is not UTF-8 (issue 28 item 4): the test reading it fails naming
the file and the line; the session finishes normally, so the failure details, the skip inventory
and --dsakit-report survive (syrupy's own reader used to raise inside the session finish)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())

SUITE = """
import pytest
import torch


@pytest.mark.dsakit_requires("cuda")
def test_gated():
    pass


def test_sel(selection_snapshot):
    selection_snapshot.assert_selection(
        "tiny", torch.tensor([[3, 2]]), torch.tensor([[0.0, 1.0, 2.0, 3.0]]), [4], 2, reference=True)
"""


@pytest.fixture(scope="module")
def updated_golden(snapshot_update_golden: Callable[[str, str], Path]) -> tuple[str, bytes]:
    """(name, bytes) of the golden one `--snapshot-update` run of SUITE writes, run once for both
    cases below (the bytes do not depend on the folder)."""
    golden = snapshot_update_golden("test_sel", SUITE)
    return golden.name, golden.read_bytes()


@pytest.mark.parametrize("update", [False, True], ids=["check", "snapshot-update"])
def test_a_non_utf8_byte_in_a_golden_fails_its_test_not_the_session(pytester: pytest.Pytester, update: bool,
                                                                    updated_golden: tuple[str, bytes]) -> None:
    pytester.makepyfile(test_sel=SUITE)
    args = (*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu")
    golden = pytester.path / "__snapshots__" / "test_sel" / updated_golden[0]
    golden.parent.mkdir(parents=True)
    golden.write_bytes(updated_golden[1])  # as `--snapshot-update` left it
    lines = golden.read_bytes().split(b"\n")
    lines[4] = lines[4][:6] + b"\xff" + lines[4][6:]
    golden.write_bytes(b"\n".join(lines))
    result = pytester.runpytest_subprocess(*args, "--dsakit-report=r.json", *(("--snapshot-update",) if update else ()))
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out and "UnicodeDecodeError" not in out, out
    assert "1 skipped  [cuda]" in out  # the skip inventory
    report = json.loads((pytester.path / "r.json").read_text())
    if update:  # the damaged golden is regenerated from the reference path's selection
        assert result.ret == 0, out
        golden.read_bytes().decode("utf-8")
        assert report["tests"]["test_sel.py::test_sel"]["outcome"] == "passed"
    else:
        assert result.ret == 1, out
        assert (f"golden file {golden} cannot be read: line 5: byte 0xff at column 7 is not UTF-8 text"
                in out), out
        assert report["tests"]["test_sel.py::test_sel"]["outcome"] == "failed"


def test_a_nan_row_selecting_nothing_never_becomes_a_golden(pytester: pytest.Pytester) -> None:
    """Issue 28 item 10: validity lets NaN cost a kernel a slot each, but the reference path, whose
    selection is written as the golden, selects every slot. Issue 34 item 6: a NaN row that selects
    nothing where its window holds min(length, k) ranked scores is invalid for every path."""
    pytester.makepyfile(test_nan="""
        import torch

        def test_nothing(selection_snapshot):
            scores = torch.tensor([[float("nan"), 1.0], [2.0, 1.0]])
            selection_snapshot.assert_selection("nan-k1", torch.tensor([[-1], [0]]), scores, [2, 2], 1,
                                                reference=True)

        def test_short(selection_snapshot):
            scores = torch.tensor([[float("nan"), float("nan"), 1.0, 2.0]])
            selection_snapshot.assert_selection("nan-k2", torch.tensor([[3, -1]]), scores, [4], 2,
                                                reference=True)
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu",
                                           "--snapshot-update")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*row 0 [[]count[]] (length 2, k-th largest valid score 1.0): selected nothing, "
                                 "but the window holds 1 ranked (finite) scores beside its 1 NaN*"])
    result.stdout.fnmatch_lines(["*nan-k2: no golden written: row 0 (its window holds NaN) selects 1 of "
                                 "min(length 4, k 2) = 2 positions*"])
    assert not list(pytester.path.rglob("*.topksel"))
