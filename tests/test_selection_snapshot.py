"""The `selection_snapshot` fixture end to end (pytester, in a subprocess: torch must not be
re-imported in-process): --snapshot-update then pass, tie-aware matching across backends, a
changed selection fails, unused goldens are detected, -n 2 is safe."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MODULE = '''
import os

import pytest
import torch

SCORES = torch.tensor([[5.0, 3.0, 3.0, 3.0, 1.0, 0.0, 0.0, 0.0],
                       [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
if os.environ.get("SCENARIO") == "new-scores":
    SCORES = SCORES.flip(1).contiguous()
LENGTHS = [8, 8]
K = 3
# "other" picks another member of row 0's tied group {1, 2, 3} and another order
PICKS = {"ref": [[0, 1, 2], [7, 6, 5]], "other": [[3, 0, 2], [5, 6, 7]]}
CASES = os.environ.get("CASES", "tiny-a,tiny-b").split(",")


def picks(backend):
    if os.environ.get("SCENARIO") == "new-scores":
        return torch.topk(SCORES, K).indices
    sel = torch.tensor(PICKS[backend])
    if os.environ.get("SCENARIO") == "planted" and backend == "other":
        sel[1, 0] = 4  # score 5.0 instead of 6.0
    return sel


@pytest.mark.parametrize("backend", ["ref", "other"])
@pytest.mark.parametrize("case", CASES)
def test_sel(backend, case, selection_snapshot):
    selection_snapshot.assert_selection(case, picks(backend), SCORES, LENGTHS, K,
                                        reference=backend == "ref")
'''

GOLDEN = Path("__snapshots__") / "test_sel_mod" / "selections.topksel"


@pytest.fixture
def mod(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_sel_mod=MODULE)
    return pytester


def _run(pytester: pytest.Pytester, *args: str, monkeypatch: pytest.MonkeyPatch | None = None,
         **env: str) -> pytest.RunResult:
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        # under `pytest -n` this test runs in an xdist worker; an inner run that inherits
        # PYTEST_XDIST_WORKER believes it is one too and syrupy then prints no report
        for key in [k for k in os.environ if k.startswith("PYTEST_XDIST_")]:
            mp.delenv(key)
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_update_then_pass_with_tie_aware_match(mod: pytest.Pytester) -> None:
    result = _run(mod, "--snapshot-update")
    # goldens are written at session end by the reference; other paths find none on disk yet
    result.assert_outcomes(passed=2, skipped=2)
    result.stdout.fnmatch_lines(["*2 snapshots generated*"])
    text = (mod.path / GOLDEN).read_text()
    assert "# name: test_sel[tiny-a]" in text and "# name: test_sel[tiny-b]" in text
    assert "tensor" not in text and "device" not in text and "other" not in text
    result = _run(mod)
    result.assert_outcomes(passed=4)  # "other" chose another tied member: still matches
    result.stdout.fnmatch_lines(["*2 snapshots passed*"])  # syrupy counts names: one per case


def test_changed_selection_fails(mod: pytest.Pytester) -> None:
    _run(mod, "--snapshot-update").assert_outcomes(passed=2, skipped=2)
    planted = _run(mod, SCENARIO="planted")
    planted.assert_outcomes(passed=2, failed=2)
    planted.stdout.fnmatch_lines(["*row 1 [[]order[]]*", "*missing (should be selected): 5 (score 6.0)*"])
    changed = _run(mod, SCENARIO="new-scores")  # valid selections of other scores: golden differs
    changed.assert_outcomes(failed=4)
    changed.stdout.fnmatch_lines(["*assert [[]- snapshot[]] == [[]+ received[]]*", "*- scores_sha256*"])


def test_unused_snapshot_is_detected_and_deleted_on_update(mod: pytest.Pytester) -> None:
    _run(mod, "--snapshot-update").assert_outcomes(passed=2, skipped=2)
    result = _run(mod, CASES="tiny-a")
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])
    assert result.ret != 0
    _run(mod, "--snapshot-update", CASES="tiny-a").stdout.fnmatch_lines(["*1 unused snapshot deleted*"])
    assert "tiny-b" not in (mod.path / GOLDEN).read_text()


def test_only_the_reference_writes_goldens(mod: pytest.Pytester) -> None:
    result = _run(mod, "--snapshot-update", "-k", "other", "-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*no golden for tiny-a yet*"])
    assert not (mod.path / GOLDEN).exists()


def test_xdist_two_workers(mod: pytest.Pytester) -> None:
    cases = ",".join(f"c{i}" for i in range(8))
    outcomes = _run(mod, "-n", "2", "--snapshot-update", CASES=cases).parseoutcomes()
    # each worker writes its goldens at its own session end, so a non-reference path on the other
    # worker may already find one (pass) or not yet (skip): never a failure, never a lost golden
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0
    assert outcomes["passed"] >= 8 and outcomes["passed"] + outcomes.get("skipped", 0) == 16
    text = (mod.path / GOLDEN).read_text()
    assert all(f"# name: test_sel[c{i}]" in text for i in range(8))
    result = _run(mod, "-n", "2", CASES=cases)
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["*8 snapshots passed*"])
