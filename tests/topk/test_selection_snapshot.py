"""The `selection_snapshot` fixture end to end (pytester, in a subprocess: torch must not be
re-imported in-process): --snapshot-update then pass, tie-aware matching across backends, a
changed selection fails, a changed input is blamed on the input, goldens of an older format must
be regenerated, unused goldens are detected, -n 2 is safe. Then the summary itself, in-process:
the vectorized normal form equals the per-row reference on every catalogue case, tie swaps keep the
text, planted corruptions change exactly their row and are named, input changes are detected."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.child_env import child_env

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
    scenario = os.environ.get("SCENARIO")
    if scenario == "new-scores":
        return torch.topk(SCORES, K).indices
    sel = torch.tensor(PICKS[backend])
    if backend == "other":
        if scenario == "planted":  # off by one: position 4 (score 5.0) instead of 5 (6.0)
            sel[1, 0] = 4
        elif scenario == "swapped":  # a non-tied pick (position 0, score 5.0) for position 4 (1.0)
            sel[0, 1] = 4
        elif scenario == "dropped":
            sel[1, 2] = -1
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


@pytest.fixture(scope="module")
def first_update(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """(stdout, golden) of one `--snapshot-update` run of MODULE in a folder with no golden yet,
    run once for test_update_then_pass_with_tie_aware_match (which checks that run) and the tests
    that start from a stored golden: the bytes do not depend on the folder or the run
    (test_golden_of_an_older_format_must_be_regenerated writes them again and compares)."""
    project = tmp_path_factory.mktemp("selection-golden")
    (project / "test_sel_mod.py").write_text(MODULE.strip() + "\n", encoding="utf-8")
    env = child_env()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           f"--basetemp={project / 'basetemp'}", "--snapshot-update"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout, (project / GOLDEN).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def updated_golden(first_update: tuple[str, str]) -> str:
    """The golden one `--snapshot-update` run of MODULE writes (4 passed)."""
    return first_update[1]


@pytest.fixture(scope="module")
def check_with_the_golden(tmp_path_factory: pytest.TempPathFactory, updated_golden: str) -> pytest.RunResult:
    """A plain run of MODULE with the golden `--snapshot-update` wrote on disk, once for
    test_update_then_pass_with_tie_aware_match and test_golden_of_an_older_format_must_be_regenerated
    (whose regenerated golden is byte for byte that golden: the same files, the same run)."""
    project = tmp_path_factory.mktemp("selection-check")
    (project / "test_sel_mod.py").write_text(MODULE.strip(), encoding="utf-8")  # as makepyfile
    (project / GOLDEN).parent.mkdir(parents=True)
    (project / GOLDEN).write_text(updated_golden, encoding="utf-8")
    env = child_env(drop=("SCENARIO", "CASES"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           f"--basetemp={project / 'basetemp'}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    return pytest.RunResult(done.returncode, done.stdout.splitlines(), done.stderr.splitlines(), 0.0)


def _store(pytester: pytest.Pytester, golden: str) -> None:
    """The state right after `--snapshot-update` in this project: its golden on disk."""
    (pytester.path / GOLDEN).parent.mkdir(parents=True, exist_ok=True)
    (pytester.path / GOLDEN).write_text(golden, encoding="utf-8")


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


def test_update_then_pass_with_tie_aware_match(first_update: tuple[str, str],
                                               check_with_the_golden: pytest.RunResult) -> None:
    # goldens are written at session end; a path that finds none on disk yet writes the golden
    # of dsakit's reference top-k (the same normal form as the reference path's)
    stdout, text = first_update
    update = pytest.RunResult(0, stdout.splitlines(), [], 0.0)
    update.assert_outcomes(passed=4)
    update.stdout.fnmatch_lines(["*2 snapshots generated*"])
    assert "# name: test_sel[tiny-a]" in text and "# name: test_sel[tiny-b]" in text
    assert "tensor" not in text and "device" not in text and "other" not in text
    result = check_with_the_golden
    result.assert_outcomes(passed=4)  # "other" chose another tied member: still matches
    result.stdout.fnmatch_lines(["*2 snapshots passed*"])  # syrupy counts names: one per case


# One run for the four scenarios that start from the stored golden and change what the run sees
# (the picks of "other", or the scores): MODULE once per scenario, the scenario written into the
# copy instead of read from $SCENARIO, each copy with its own golden. Each test below reads the
# outcomes and the failure sections of its own copy.
SCENARIOS = ("planted", "swapped", "dropped", "new-scores")


@dataclasses.dataclass(frozen=True)
class ScenarioRun:
    result: pytest.RunResult
    sections: dict[str, list[str]]  # per copy: the lines of its failure sections
    outcomes: dict[str, dict[str, int]]  # per copy: {"passed": n, "failed": n}


def _scenario_module(scenario: str) -> str:
    return f"test_sel_{scenario.replace('-', '_')}"


@pytest.fixture(scope="module")
def scenario_run(tmp_path_factory: pytest.TempPathFactory, updated_golden: str) -> ScenarioRun:
    project = tmp_path_factory.mktemp("selection-scenarios")
    for scenario in SCENARIOS:
        name = _scenario_module(scenario)
        source = MODULE.replace('os.environ.get("SCENARIO")', repr(scenario))
        assert source.count(repr(scenario)) == 2, "MODULE reads $SCENARIO in two places"
        (project / f"{name}.py").write_text(source, encoding="utf-8")
        golden = project / "__snapshots__" / name / GOLDEN.name
        golden.parent.mkdir(parents=True)
        golden.write_text(updated_golden, encoding="utf-8")
    env = child_env(drop=("SCENARIO", "CASES"))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           f"--basetemp={project / 'basetemp'}", "-rA"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    outcomes = {_scenario_module(s): {"passed": 0, "failed": 0} for s in SCENARIOS}
    for line in lines:
        status, _, test = line.partition(" ")
        if status in ("PASSED", "FAILED") and test.split(".py::")[0] in outcomes:
            outcomes[test.split(".py::")[0]][status.lower()] += 1
    # a failure section's header names the test only (the same in every copy); its traceback
    # names the copy's file, as `test_sel_planted.py:NN: in test_sel`
    sections: dict[str, list[str]] = {name: [] for name in outcomes}
    block: list[str] = []
    for line in [*lines, "=" * 8]:
        if line.endswith("___") or (line.startswith("=") and line.endswith("=")):
            owners = [name for name in sections if any(f"{name}.py:" in b for b in block)]
            if block and block[0].endswith("___"):
                assert len(owners) == 1, block
                sections[owners[0]].extend(block)
            block = []
        block.append(line)
    return ScenarioRun(pytest.RunResult(done.returncode, lines, done.stderr.splitlines(), 0.0),
                       sections, outcomes)


def _scenario(run: ScenarioRun, scenario: str, passed: int, failed: int) -> pytest.LineMatcher:
    """The failure sections of `scenario`'s copy, after checking its outcomes."""
    name = _scenario_module(scenario)
    assert run.outcomes[name] == {"passed": passed, "failed": failed}, (run.outcomes, run.result.stdout.str()[-3000:])
    return pytest.LineMatcher(run.sections[name])


@pytest.mark.parametrize(("scenario", "lines"), [
    pytest.param("planted", ["*row 1 [[]order[]]*", "*missing (should be selected): 5 (score 6.0)*",
                             "*extra (selected, should not be): 4 (score 5.0)*"], id="off-by-one"),
    pytest.param("swapped", ["*row 0 [[]order[]]*", "*missing (should be selected): 0 (score 5.0)*",
                             "*extra (selected, should not be): 4 (score 1.0)*"], id="swapped"),
    pytest.param("dropped", ["*row 1 [[]count[]]*selected 2 positions, expected 3*"], id="dropped"),
])
def test_changed_selection_fails_with_a_row_diff(scenario_run: ScenarioRun, scenario: str,
                                                 lines: list[str]) -> None:
    _scenario(scenario_run, scenario, passed=2, failed=2).fnmatch_lines(lines)


def test_changed_input_is_blamed_on_the_input(scenario_run: ScenarioRun) -> None:
    # valid selections of other scores: golden differs
    changed = _scenario(scenario_run, "new-scores", passed=0, failed=4)
    changed.fnmatch_lines([
        "*tiny-a: the INPUT changed: scores differ from the input the golden was written from*",
        "*this is not a bug of the path under test*",
        "*golden scores: sha256 of all 16 values*",
        "*assert [[]- snapshot[]] == [[]+ received[]]*",
    ])
    assert "selection differs" not in changed.str()
    # the command that regenerates the goldens names this test file, never one of dsakit's (issue 34 item 7)
    changed.fnmatch_lines([f"*regenerate the goldens on CPU: python -m pytest {_scenario_module('new-scores')}.py "
                           "--snapshot-update*"])
    assert "contracts/" not in changed.str()


def test_golden_of_an_older_format_must_be_regenerated(mod: pytest.Pytester, updated_golden: str,
                                                       check_with_the_golden: pytest.RunResult) -> None:
    _store(mod, updated_golden)
    golden = mod.path / GOLDEN
    text = golden.read_text()
    assert text.startswith("# serializer version: topksel-2\n")
    golden.write_text(text.replace("topksel-2", "1", 1))  # what the format-1 goldens carried
    stale = _run(mod)
    stale.assert_outcomes(failed=4)
    stale.stdout.fnmatch_lines(["*golden file *selections.topksel cannot be read: line 1: "
                                "'serializer version: 1' is an older format; this dsakit reads and "
                                "writes topksel-2. Regenerate it*--snapshot-update*"])
    _run(mod, "--snapshot-update").assert_outcomes(passed=4)
    assert golden.read_text() == text
    assert (mod.path / "test_sel_mod.py").read_text() == MODULE.strip()
    check_with_the_golden.assert_outcomes(passed=4)  # this project's files now: that run's files


def test_unused_snapshot_is_detected_and_deleted_on_update(mod: pytest.Pytester, updated_golden: str) -> None:
    _store(mod, updated_golden)
    result = _run(mod, CASES="tiny-a")
    result.stdout.fnmatch_lines(["*1 snapshot unused*"])
    assert result.ret != 0
    _run(mod, "--snapshot-update", CASES="tiny-a").stdout.fnmatch_lines(["*1 unused snapshot deleted*"])
    assert "tiny-b" not in (mod.path / GOLDEN).read_text()


def test_a_suite_without_a_reference_path_gets_its_goldens_from_one_update(mod: pytest.Pytester,
                                                                        updated_golden: str) -> None:
    _store(mod, updated_golden)
    by_reference_path = (mod.path / GOLDEN).read_text()
    (mod.path / GOLDEN).unlink()
    first = _run(mod, "-k", "other")
    first.assert_outcomes(failed=2)
    first.stdout.fnmatch_lines(["*tiny-a: no golden stored*regenerate with python -m pytest test_sel_mod.py --snapshot-update*"])
    _run(mod, "--snapshot-update", "-k", "other").assert_outcomes(passed=2)
    assert (mod.path / GOLDEN).read_text() == by_reference_path  # dsakit's reference, not "other"'s order
    _run(mod, "-k", "other").assert_outcomes(passed=2)


def test_an_invalid_path_writes_no_golden(mod: pytest.Pytester) -> None:
    result = _run(mod, "--snapshot-update", "-k", "other", SCENARIO="planted")
    result.assert_outcomes(failed=2)  # "other" is off by one in row 1 for both cases
    result.stdout.fnmatch_lines(["*invalid top-k selection: 1 of 2 rows fail (k=3)*"])
    assert not (mod.path / GOLDEN).exists()


def test_xdist_two_workers(mod: pytest.Pytester) -> None:
    cases = ",".join(f"c{i}" for i in range(8))
    outcomes = _run(mod, "-n", "2", "--snapshot-update", CASES=cases).parseoutcomes()
    # each worker writes its goldens at its own session end, so a non-reference path on the other
    # worker may already find one (compare) or not yet (write the reference's): never a failure,
    # never a lost golden
    assert outcomes == {"passed": 16}, outcomes
    text = (mod.path / GOLDEN).read_text()
    assert all(f"# name: test_sel[c{i}]" in text for i in range(8))
    result = _run(mod, "-n", "2", CASES=cases)
    result.assert_outcomes(passed=16)
    result.stdout.fnmatch_lines(["*8 snapshots passed*"])


# ---------------------------------------------------------------- the summary, in-process


def _topk_rows(scores: Any, lengths: Any, k: int, starts: Any = None, *,
               mask_neg_inf: bool = False) -> Any:
    """torch.topk over each row's window, in a shuffled (kernel-like) order, -1 padded;
    `mask_neg_inf`: selected -inf positions become -1, as the torch path does."""
    import torch

    gen = torch.Generator().manual_seed(1)
    out = torch.full((scores.shape[0], k), -1, dtype=torch.int64)
    for r, n in enumerate(lengths):
        n = max(n, 0)
        start = 0 if starts is None else starts[r]
        m = min(n, k)
        if m:
            window = scores[r, start:start + n]
            picks = torch.topk(window, m).indices
            if mask_neg_inf:
                picks = torch.where(torch.isneginf(window[picks]), -1, picks)
            out[r, :m] = picks[torch.randperm(m, generator=gen)]
    return out


def _summary(case_id: str, sel: Any, scores: Any, lengths: Any, k: int, starts: Any = None,
             **kw: Any) -> Any:
    """What assert_selection stores: validity first (its NaN rows feed the summary)."""
    import dsakit
    from dsakit.topk.snapshot import summarize_selection

    report = dsakit.assert_topk_valid(sel, scores, lengths, k, row_starts=starts)
    return summarize_selection(case_id, sel, scores, lengths, k, row_starts=starts,
                               nan_rows=report.nan_rows, **kw)


def _fields(form: Any, rows: int) -> list[Any]:
    return [form.fields(r) for r in range(rows)]


# ---- the per-row oracle the vectorized normal form is tested against (test-only)


@dataclasses.dataclass(frozen=True)
class NormalizedRow:
    """A selection's backend-independent part: positions strictly above its lowest selected
    ranked score (`certain`), that score (`boundary`) and how many tied picks sit on it.
    -inf picks are dropped; rows holding NaN are marked and not normalised (backends disagree)."""

    row: int
    nan_row: bool
    count: int = 0
    boundary: float | None = None
    tied: int = 0
    certain: tuple[int, ...] = ()
    invalid: tuple[int, ...] = ()


def normalized_rows(indices: Any, scores: Any, lengths: Any, *,
                    row_starts: Any = None) -> list[NormalizedRow]:
    """The backend-independent form of a selection, row by row."""
    import torch

    from dsakit.topk.checks import _has_nan, _prepare, _selected

    prep = _prepare(indices, scores, lengths, row_starts)
    out = []
    for row, length in enumerate(prep.lengths):
        length = max(length, 0)
        w = prep.window(row)
        if _has_nan(w):
            out.append(NormalizedRow(row, True))
            continue
        sel = torch.unique(_selected(prep.idx[row]))
        inside = (sel >= 0) & (sel < length)
        invalid = tuple(sel[~inside].tolist())
        pos = sel[inside]
        vals = w[pos]
        keep = vals != float("-inf")
        pos, vals = pos[keep], vals[keep]
        if pos.numel() == 0:
            out.append(NormalizedRow(row, False, 0, None, 0, (), invalid))
            continue
        low = vals.min()
        out.append(NormalizedRow(row, False, int(pos.numel()), float(low), int((vals == low).sum()),
                                 tuple(pos[vals > low].tolist()), invalid))
    return out


def _reference_fields(sel: Any, scores: Any, lengths: Any, starts: Any) -> list[Any]:
    return [(n.nan_row, n.count, n.boundary, n.tied, n.certain, n.invalid)
            for n in normalized_rows(sel, scores, lengths, row_starts=starts)]


def _catalogue() -> list[Any]:
    from dsakit.topk.cases import select_topk_cases

    return select_topk_cases()


@pytest.mark.parametrize("case", _catalogue(), ids=lambda c: c.case_id)
def test_normal_form_equals_the_per_row_reference(case: Any) -> None:
    """The vectorized normal form is exact: equal to normalized_rows row by row, for the
    reference selection and for selections with duplicates, stray entries and -1 holes; the NaN
    rows the validity report hands over are the ones an exact scan finds."""
    import numpy as np
    import torch

    import dsakit
    from dsakit.topk.snapshot import _nan_rows_exact, summarize_selection

    scores, starts = case.scores("cpu"), case.row_starts
    sel = _topk_rows(scores, case.lengths, case.k, starts)
    report = dsakit.check_topk(sel, scores, case.lengths, case.k, row_starts=starts)
    lens = np.asarray(case.lengths, dtype=np.int64)
    exact = _nan_rows_exact(scores.numpy(), lens,
                            np.zeros_like(lens) if starts is None else np.asarray(starts))
    assert report.nan_rows == exact == {r for r in range(case.num_rows)
                                        if bool(torch.isnan(scores[r]).any()) and case.lengths[r] > 0}
    messy = sel.clone()
    messy[:, 0] = messy[:, 1]  # a duplicate in every row
    messy[0, -1] = case.width + 5  # out of every window
    messy[-1, 2] = -1  # a hole
    for picks in (sel, messy):
        with_report = summarize_selection(case.case_id, picks, scores, case.lengths, case.k,
                                          row_starts=starts, nan_rows=report.nan_rows)
        scanned = summarize_selection(case.case_id, picks, scores, case.lengths, case.k,
                                      row_starts=starts)
        assert with_report == scanned
        assert _fields(scanned.rows, case.num_rows) == _reference_fields(picks, scores, case.lengths,
                                                                         starts)


@pytest.mark.parametrize("case_id", ["ties-exact-k512", "near-ties-k2048", "constant-rows-k512",
                                     "neg-inf-k2048", "nan-k512"])
def test_another_valid_choice_of_tied_members_keeps_the_summary(case_id: str) -> None:
    """Backend independence: other members of the boundary tie group, another order, -inf picks
    padded or selected, NaN collected first or never: one text."""
    import torch

    from dsakit.topk.cases import get_case

    case = get_case(case_id)
    scores = case.scores("cpu")
    first = _topk_rows(scores, case.lengths, case.k)
    other = torch.full_like(first, -1)
    for r, n in enumerate(case.lengths):
        w = scores[r, :n]
        ranked = w[~torch.isnan(w)]
        m = min(case.k, ranked.numel())
        if not m:
            continue
        boundary = torch.topk(ranked, m).values[-1]
        above = torch.nonzero(w > boundary).flatten()  # NaN compares False: never collected
        tied = torch.nonzero(w == boundary).flatten().flip(0)  # the LAST tied members
        picks = torch.cat([above, tied[:m - above.numel()]])
        other[r, :picks.numel()] = picks.flip(0)
    masked = _topk_rows(scores, case.lengths, case.k, mask_neg_inf=True)
    a = _summary(case_id, first, scores, case.lengths, case.k)
    assert _summary(case_id, other, scores, case.lengths, case.k) == a
    assert _summary(case_id, masked, scores, case.lengths, case.k) == a
    if case_id in ("ties-exact-k512", "constant-rows-k512"):  # the choices really differ
        assert any(set(first[r].tolist()) != set(other[r].tolist()) for r in range(case.num_rows))


def _corrupt(kind: str, sel: Any, scores: Any, row: int) -> Any:
    import torch

    bad = sel.clone()
    picks = sel[row]
    vals = scores[row][picks]
    chosen = set(picks.tolist())
    low = int(torch.argmin(vals))  # the boundary pick
    if kind == "off-by-one":
        j = next(j for j in range(picks.numel()) if int(picks[j]) + 1 not in chosen)
        bad[row, j] = picks[j] + 1
    elif kind == "swapped-non-tied":  # the best pick swapped for an unselected lower score
        best = int(torch.argmax(vals))
        below = [p for p in range(scores.shape[1]) if p not in chosen and scores[row, p] < vals[low]]
        bad[row, best] = below[0]
    elif kind == "dropped":
        bad[row, low] = -1
    return bad


@pytest.mark.parametrize("kind", ["off-by-one", "swapped-non-tied", "dropped"])
def test_planted_corruption_fails_and_is_named_by_row(kind: str) -> None:
    """Validity reports the row first (readable diff with scores); the golden alone also catches
    it, and its mismatch message names exactly that row and shows this path's normal form."""
    import dsakit
    from dsakit.topk.snapshot import explain_mismatch, summarize_selection
    from dsakit.topk.cases import get_case

    case = get_case("decode-ps64-k2048")
    scores = case.scores("cpu")
    sel = _topk_rows(scores, case.lengths, case.k)
    golden = _summary(case.case_id, sel, scores, case.lengths, case.k)
    bad = _corrupt(kind, sel, scores, 5)
    code = {"off-by-one": "order", "swapped-non-tied": "order", "dropped": "count"}[kind]
    with pytest.raises(AssertionError, match=rf"1 of 8 rows fail.*\n  row 5 \[{code}\]"):
        dsakit.assert_topk_valid(bad, scores, case.lengths, case.k)
    summary = summarize_selection(case.case_id, bad, scores, case.lengths, case.k)
    assert summary != golden
    text = explain_mismatch(case.case_id, golden, summary, validated=False)
    assert text.startswith(f"{case.case_id}: selection differs from the golden in 1 of 8 rows "
                           "(the input matches): rows [5]")
    assert "    this path: row 5: n=" in text and "INPUT" not in text
    # the spelled-out head rows show golden and this path side by side
    head = _corrupt(kind, sel, scores, 1)
    text = explain_mismatch(case.case_id, golden,
                            summarize_selection(case.case_id, head, scores, case.lengths, case.k))
    assert "rows [1]" in text and "    golden:    row 1: n=100 " in text


def test_generator_change_is_blamed_on_the_input(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashed whole (small cases) or sampled (1M-token cases): a generator change shows up in the
    input lines and the message says the input changed; the selection is not blamed."""
    import dataclasses

    from dsakit.topk import cases as topk_cases
    from dsakit.topk.snapshot import explain_mismatch
    from dsakit.topk.cases import get_case

    def golden_and_now(case: Any, **kw: Any) -> list[Any]:
        ident = f"recipe={case.recipe} seed={case.seed} shape={case.shape}"
        out = []
        for c in (case, kw.pop("changed", case)):
            scores = c.scores("cpu")
            sel = _topk_rows(scores, c.lengths, c.k, c.row_starts)
            out.append(_summary(c.case_id, sel, scores, c.lengths, c.k, c.row_starts,
                                identity=f"recipe={c.recipe} seed={c.seed} shape={c.shape}"))
        assert ident in out[0]
        return out

    small = get_case("decode-ps64-k2048")
    golden, now = golden_and_now(small, changed=dataclasses.replace(small, seed=small.seed + 100))
    text = explain_mismatch(small.case_id, golden, now)
    assert "the INPUT changed" in text and "input, scores differ" in text
    assert "selection differs" not in text

    long = get_case("long-1m-ps64-k2048")
    golden = golden_and_now(long)[0]
    assert "sampled values (stride 33, 64 at each end" in golden  # 2 x 1M scores: sampled, not hashed whole
    real = topk_cases._recipe_row
    monkeypatch.setattr(topk_cases, "_recipe_row",  # same recipe name and seed, new code
                        lambda recipe, row, width, gen: real(recipe, row, width, gen) * 2)
    now = golden_and_now(long)[0]
    text = explain_mismatch(long.case_id, golden, now)
    assert "the INPUT changed" in text and ": scores differ" in text
    assert "selection differs" not in text


def test_sampled_digest_covers_window_ends_and_stride_and_the_rows_catch_the_rest() -> None:
    """In the sampled regime a change at a sampled value (window end, stride) flips the digest; a
    change elsewhere that moves the selection changes its row, and the message (validity passed)
    points at the input, not at the path."""
    from dsakit.topk.snapshot import explain_mismatch, summarize_selection
    from dsakit.topk.cases import get_case

    case = get_case("long-1m-ps64-k2048")
    base = case.scores("cpu")
    lengths, k = case.lengths, case.k

    def summary(scores: Any) -> Any:
        return _summary(case.case_id, _topk_rows(scores, lengths, k), scores, lengths, k)

    golden = summary(base)
    digest_line = next(line for line in golden.splitlines() if line.startswith("scores: "))
    for row, col in ((1, lengths[1] - 1), (0, 0), (1, 33 * 40_000 - case.width)):  # end, start, stride
        scores = base.clone()
        scores[row, col] += 0.5
        changed = summarize_selection(case.case_id, _topk_rows(scores, lengths, k), scores, lengths, k)
        assert digest_line not in changed, (row, col)
    scores = base.clone()
    scores[1, 500_001] = 1e9  # not sampled (500001 + 1M is no multiple of 33): the new row-1 max
    now = summary(scores)
    assert digest_line in now
    text = explain_mismatch(case.case_id, golden, now)
    assert "rows [1]" in text and "scores most likely changed outside the sampled values" in text


def test_summary_is_small_and_k_independent() -> None:
    """128 rows: every row has a digest, well under 4 KB; past 256 rows digests cover blocks."""
    import torch

    from dsakit.topk.snapshot import explain_mismatch, summarize_selection

    gen = torch.Generator().manual_seed(3)
    for rows, k, block_line in ((128, 64, "row digests 112..127: "),
                                (600, 8, "row-block digests (3 rows each) 192..199: ")):
        scores = torch.randn((rows, 256), generator=gen)
        sel = _topk_rows(scores, [256] * rows, k)
        text = summarize_selection("big", sel, scores, [256] * rows, k)
        assert len(text.encode()) < 3000 and block_line in text
        assert "tensor" not in text and "device" not in text
    bad = sel.clone()
    bad[400] = _topk_rows(scores[400:401] * -1, [256], k)[0]  # row 400: the bottom k
    message = explain_mismatch("big", summarize_selection("big", sel, scores, [256] * rows, k),
                               summarize_selection("big", bad, scores, [256] * rows, k))
    assert "in 1 of 200 row blocks (3 rows each)" in message and "rows [399, 400, 401]" in message


def test_a_golden_recorded_for_another_case_is_an_input_change() -> None:
    """Found by mutation testing (bench/README.md): every input key is compared, `case` too."""
    from dsakit.topk.cases import get_case
    from dsakit.topk.snapshot import explain_mismatch

    case = get_case("decode-ps64-k2048")
    scores = case.scores("cpu")
    now = _summary(case.case_id, _topk_rows(scores, case.lengths, case.k, case.row_starts), scores,
                   case.lengths, case.k, case.row_starts, identity="same input")
    [case_line] = [line for line in now.splitlines() if line.startswith("case: ")]
    golden = now.replace(case_line, "case: another-case")
    text = explain_mismatch(case.case_id, golden, now)
    assert "the INPUT changed: case differ" in text and "    golden case: another-case" in text
