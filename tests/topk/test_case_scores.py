"""A top-k case's scores: generated once per process (a 1M-token case's test asked for them up to
five times), handed out as a fresh tensor each call, so a caller writing into it changes nothing
for the next."""

from __future__ import annotations

import pytest

from dsakit.topk import cases
from dsakit.topk.cases import get_case


def test_scores_are_generated_once_and_handed_out_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    cases._generated_scores.cache_clear()
    rows: list[int] = []
    real = cases._recipe_row

    def counted(recipe: str, row: int, width: int, gen: object) -> object:
        rows.append(row)
        return real(recipe, row, width, gen)  # type: ignore[arg-type]

    monkeypatch.setattr(cases, "_recipe_row", counted)
    case = get_case("decode-ps64-k2048")
    first = case.scores("cpu")
    first[0, 0] = 1e30  # a caller writing into its tensor
    second = case.scores("cpu")
    assert rows == list(range(case.num_rows)), "generated more than once"
    assert second[0, 0].item() != 1e30 and second.data_ptr() != first.data_ptr()
    cases._generated_scores.cache_clear()
    monkeypatch.setattr(cases, "_recipe_row", real)
    assert torch.equal(second, case.scores("cpu")), "the cached scores are the seeded ones"
    assert not torch.equal(case.scores("cpu"), case.scores("cpu", seed_offset=1))


def test_a_swapped_recipe_neither_sees_nor_leaves_cached_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    case = get_case("decode-ps64-k512")
    real = case.scores("cpu")
    with monkeypatch.context() as patch:
        patch.setattr(cases, "_recipe_row", lambda recipe, row, width, gen: torch.zeros(width))
        assert not case.scores("cpu").any(), "new recipe code, new scores"
    assert torch.equal(case.scores("cpu"), real), "the swapped code's scores were left in the cache"
