import pytest
import torch

import dsakit
from my_backend import MyBackend


def test_backend_builds_for_every_role(model_runner, model_runner_role):
    backend = MyBackend(model_runner, sm_major=10)
    assert backend.window == (128 if model_runner_role == "draft" else 4096)  # the extension's defaults
    assert (backend.page_size, backend.topk, backend.kv_counters) == (64, 2048, 64)


def test_overrides_and_omissions(small_runner, draft_runner):
    assert MyBackend(small_runner, sm_major=10).kv_counters == 8
    assert draft_runner.is_draft_worker
    drifted = dsakit.MockModelRunner("target", omit=["max_running_requests"])
    with pytest.raises(dsakit.ContractViolation, match="max_running_requests was omitted"):
        MyBackend(drifted, sm_major=10)
    with pytest.raises(dsakit.ContractViolation, match=r"tool\.dsakit\.contract"):
        small_runner.attention_sink_size


@dsakit.gate("sm~10")
def test_blackwell_only_path(target_runner):
    dsakit.require("cuda")
    assert MyBackend(target_runner, sm_major=10).kv_counters == 64


@dsakit.gate("fa3")
def test_hopper_only_path():
    raise AssertionError("never runs on the simulated B300")


def test_topk_checks():
    scores = torch.tensor([[5.0, 3.0, 3.0, 1.0, -1.0], [0.0, 1.0, 3.0, 3.0, 4.0]])
    lengths, k = [1, 5], 2
    picked = torch.tensor([[0, -1], [4, 2]])  # row 0 is 1 long: -1 pads the rest
    dsakit.assert_topk_valid(picked, scores, lengths, k)
    other_tie = torch.tensor([[0, -1], [3, 4]])  # the other member of row 1's tied pair, any order
    dsakit.assert_topk_equal(other_tie, picked, scores, lengths, topk=k)
    with pytest.raises(AssertionError, match="invalid top-k selection"):
        dsakit.assert_topk_valid(torch.tensor([[0, -1], [4, 1]]), scores, lengths, k)


@pytest.mark.parametrize("case_id", ["decode-ps64-k512", "extend-ragged-k512"])
def test_my_topk_against_goldens(case_id, selection_snapshot):
    case = dsakit.get_case(case_id)
    scores = case.scores("cpu")
    rows = []
    for row, length in enumerate(case.lengths):  # "my kernel": a per-row sort
        start = case.row_starts[row] if case.row_starts else 0
        n = min(case.k, length)
        order = torch.argsort(scores[row, start:start + length], descending=True, stable=True)[:n]
        rows.append(torch.cat([order, torch.full((case.k - n,), -1, dtype=order.dtype)]))
    selection_snapshot.assert_case(case, torch.stack(rows))
