"""An ordinary `--snapshot-update` keeps every golden its run compares (issue 34 item 1).

A path that is not the reference compares an existing golden without rewriting it; syrupy counts
a record "used" only when its own assertion touched it, so before the fix every compared golden
read as unused and was deleted at the end of the update: a second update deleted them all, an
update that added a case deleted the others, `-k` deleted the ones it selected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())

SUITE = """
import pytest
import torch

SCORES = torch.tensor([[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]])
CASES = {CASES}


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_sel(case_id, selection_snapshot):
    scores = SCORES + CASES[case_id]
    positions = torch.topk(scores, 2, dim=-1).indices      # not the reference path
    selection_snapshot.assert_selection(case_id, positions, scores, [6], 2)
"""


def _suite(*cases: str) -> str:
    return SUITE.replace("{CASES}", repr({case: float(i) for i, case in enumerate(cases)}))


def _records(root: Path) -> list[str]:
    (golden,) = (root / "__snapshots__" / "test_goldens").glob("*.topksel")
    return re.findall(r"^# name: (\S+)", golden.read_text(), re.M)


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """syrupy reads PYTEST_XDIST_WORKER: an inner pytest under `-n 2` would think it is a worker."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


def _update(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu",
                                         "--snapshot-update", *args)


THREE = ["test_sel[a]", "test_sel[b]", "test_sel[c]"]


@pytest.fixture
def goldens(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_goldens=_suite("a", "b", "c"))
    first = _update(pytester)
    assert first.ret == 0, first.stdout.str()
    first.stdout.fnmatch_lines(["*3 snapshots generated*"])
    assert _records(pytester.path) == THREE
    return pytester


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one-process", "-n 2"])
def test_a_second_update_keeps_every_golden(goldens: pytest.Pytester, args: tuple[str, ...]) -> None:
    before = next((goldens.path / "__snapshots__" / "test_goldens").glob("*.topksel")).read_bytes()
    result = _update(goldens, *args)
    assert result.ret == 0, result.stdout.str()
    assert "deleted" not in result.stdout.str().lower(), result.stdout.str()
    after = next((goldens.path / "__snapshots__" / "test_goldens").glob("*.topksel")).read_bytes()
    assert after == before
    assert goldens.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu").ret == 0


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one-process", "-n 2"])
def test_an_update_that_adds_a_case_keeps_the_others(goldens: pytest.Pytester, args: tuple[str, ...]) -> None:
    goldens.makepyfile(test_goldens=_suite("a", "b", "c", "d"))
    result = _update(goldens, *args)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["*1 snapshot generated*"])
    assert _records(goldens.path) == [*THREE, "test_sel[d]"]


@pytest.mark.parametrize("args", [(), ("-n", "2")], ids=["one-process", "-n 2"])
def test_an_update_under_k_keeps_the_selected_and_the_deselected(goldens: pytest.Pytester,
                                                                 args: tuple[str, ...]) -> None:
    result = _update(goldens, "-k", "a or b", *args)
    assert result.ret == 0, result.stdout.str()
    assert _records(goldens.path) == THREE, result.stdout.str()


def test_a_retired_case_is_still_deleted_by_a_complete_update(goldens: pytest.Pytester) -> None:
    goldens.makepyfile(test_goldens=_suite("a", "b"))
    result = _update(goldens)
    assert result.ret == 0, result.stdout.str()
    assert _records(goldens.path) == THREE[:2]
