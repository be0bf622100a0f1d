"""Each kind of per-arch argument rule on its own (issue 45 item 4: the mutation run's core): the
offending value it reports at its exact edge, what it leaves alone (no tensor, a bool, a float, a
shape the kernel's own parser refuses), the byte counts flashinfer carves from a caller's buffers,
and the sentence a breach reads as. Each case evaluates one rule in a one-rule entry."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any

import pytest

from dsakit.devices import DEVICES
from dsakit.simulation.arch_rules import (
    ArchEntry,
    ArchRule,
    Breach,
    breaches,
    trtllm_counter_bytes,
    trtllm_ragged_workspace_bytes,
)

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                reason="[module:torch] the rules read tensors")

MIB = 1 << 20


def _value(kind: str, args: tuple[str, ...], param: Any = None, arch: str = "sm100", **arguments: Any) -> Any:
    """The value the one rule of this kind finds offending under simulated `arch` (None: none)."""
    rule = ArchRule(("sm100", "sm103"), "the argument", kind, args, "the rule", "the source", param)
    found = breaches(ArchEntry("a kernel", ("module:function",), (rule,), "a caller"), arguments, arch, None)
    assert len(found) <= 1
    return found[0].value if found else None


def _t(*shape: int, dtype: str = "float32") -> Any:
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype), device="meta")  # shapes and sizes, no memory


def _bytes(n: int) -> Any:
    return _t(n, dtype="uint8")


# ---------------------------------------------------------------- the sentence


def test_a_breach_names_both_archs_rules_or_that_this_gpu_has_none() -> None:
    rule = ArchRule(("sm100",), "q.shape[1] (h_q)", "dim_in", ("q",), "h_q must be 128", "sm100 source", (1, (128,)))
    hopper = ArchRule(("sm90",), "q.shape[1] (h_q)", "dim_in", ("q",), "h_q must be 64 or 128", "sm90 source")
    assert Breach(rule, 64, hopper).describe("sm100", "sm90") == (
        "q.shape[1] (h_q) = 64: simulated sm100's rule: h_q must be 128 (sm100 source); "
        "sm90's rule: h_q must be 64 or 128 (sm90 source; this call keeps it)")
    assert Breach(rule, 64, hopper, breaks_here=True).describe("sm100", "sm90").endswith(
        "(sm90 source; this call breaks it too)")
    assert Breach(rule, 64, None).describe("sm100", "sm120").endswith("; sm120 has no such rule")
    assert Breach(rule, 64, None).describe("sm100", None).endswith("; this GPU has no such rule")


# ---------------------------------------------------------------- the kinds


@pytest.mark.parametrize("kind", ["dim_in", "dim_not_in"])
def test_a_dimension_rule_reads_any_dimension_the_tensor_has_and_skips_the_others(kind: str) -> None:
    allowed = kind == "dim_in"
    param = (-3, (64,))
    offending, fine = (96, 64) if allowed else (64, 96)
    assert _value(kind, ("q",), param, q=_t(offending, 4, 4)) == offending  # -len(shape): the first dimension
    assert _value(kind, ("q",), param, q=_t(fine, 4, 4)) is None
    assert _value(kind, ("q",), (2, (64,)), q=_t(4, 4, offending)) == offending  # len(shape) - 1: the last
    assert _value(kind, ("q",), (3, (64,)), q=_t(4, 4, offending)) is None  # no such dimension: the kernel's own error
    assert _value(kind, ("q",), (-4, (64,)), q=_t(offending, 4, 4)) is None
    for value in (None, 7, SimpleNamespace(shape=(offending,)), SimpleNamespace(dtype="float32")):
        assert _value(kind, ("q",), (0, (64,)), q=value) is None


def test_an_int_rule_takes_ints_only() -> None:
    assert _value("int_in", ("block_kv",), (64,), block_kv=32) == 32
    assert _value("int_in", ("block_kv",), (64,), block_kv=64) is None
    for value in (True, False, 32.0, None, "32"):  # a bool or a float is no block size this rule reads
        assert _value("int_in", ("block_kv",), (64,), block_kv=value) is None


def test_a_required_tensor_names_what_came_instead() -> None:
    assert _value("present", ("workspace",), workspace=None) == "None"
    assert _value("present", ("workspace",), workspace=8) == "int"
    assert _value("present", ("workspace",), workspace=SimpleNamespace(shape=(8,))) == "SimpleNamespace"
    assert _value("present", ("workspace",), workspace=SimpleNamespace(dtype="uint8")) == "SimpleNamespace"
    assert _value("present", ("workspace",), workspace=_bytes(8)) is None


def test_head_dims_are_read_from_three_3d_tensors() -> None:
    args, allowed = ("query", "key", "value"), ((192, 192, 128),)
    assert _value("head_dims", args, allowed, query=_t(2, 16, 192), key=_t(2, 16, 192), value=_t(2, 16, 128)) is None
    assert _value("head_dims", args, allowed, query=_t(2, 16, 128), key=_t(2, 16, 128),
                  value=_t(2, 16, 64)) == (128, 128, 64)
    for key in (_t(16, 192), _t(1, 2, 16, 192), None):  # not three 3-D tensors: the kernel's own check
        assert _value("head_dims", args, allowed, query=_t(2, 16, 128), key=key, value=_t(2, 16, 64)) is None


def test_a_cumulative_array_has_batch_size_plus_one_entries() -> None:
    args = ("cu", "batch_size")
    assert _value("cumulative", args, cu=_t(4, dtype="int32"), batch_size=3) is None
    assert _value("cumulative", args, cu=_t(5, dtype="int32"), batch_size=3) == "5 entries for batch_size 3"
    assert _value("cumulative", args, cu=_t(3, dtype="int32"), batch_size=3) == "3 entries for batch_size 3"
    assert _value("cumulative", args, cu=_t(4, 1, dtype="int32"), batch_size=3) is None  # 2-D: not this rule's
    assert _value("cumulative", args, cu=_t(5, 1, dtype="int32"), batch_size=3) is None  # nor a wrong 2-D one
    assert _value("cumulative", args, cu=None, batch_size=3) is None
    assert _value("cumulative", args, cu=_t(9, dtype="int32"), batch_size=None) is None


def test_a_2d_lengths_row_holds_its_longest_length_in_its_last_column(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dsakit.simulation import arch_rules

    def lens(*rows: tuple[int, ...]) -> Any:
        return torch.tensor(rows, dtype=torch.int32)

    assert _value("last_column_longest", ("lens",), lens=lens((129, 130, 131), (7, 7, 7))) is None  # per position
    assert _value("last_column_longest", ("lens",), lens=lens((5, 131, 131))) is None  # shorter rows before: fine
    assert _value("last_column_longest", ("lens",), lens=lens((129, 130, 131), (131, 130, 129))) == (
        "request 1's row [131, 130, 129]: column 0 holds 131, the last column 129")
    assert _value("last_column_longest", ("lens",), lens=lens((9, 8))) == (
        "request 0's row [9, 8]: column 0 holds 9, the last column 8")  # one short is enough
    for other in (torch.tensor([9, 8], dtype=torch.int32), lens((9,), (8,)), None, 3):  # 1-D, one column, none
        assert _value("last_column_longest", ("lens",), lens=other) is None
    monkeypatch.setattr(arch_rules, "_capturing", lambda: True)  # a CUDA graph being captured: nothing is read
    assert _value("last_column_longest", ("lens",), lens=lens((9, 8))) is None


# ---------------------------------------------------------------- flashinfer's byte counts


def test_the_ragged_workspace_holds_the_softmax_stats_slab_per_256_query_rows() -> None:
    # 8 bytes (a float2) per head, request and query row, the rows rounded up to 256, then 1 MiB
    assert trtllm_ragged_workspace_bytes(128, 2, 1, lse=True) == 8 * 128 * 2 * 256 + MIB
    assert trtllm_ragged_workspace_bytes(128, 2, 256, lse=True) == 8 * 128 * 2 * 256 + MIB
    assert trtllm_ragged_workspace_bytes(128, 2, 257, lse=True) == 8 * 128 * 2 * 512 + MIB
    assert trtllm_ragged_workspace_bytes(3, 1, 1, lse=True) == 8 * 3 * 256 + MIB  # already 16-byte aligned
    assert trtllm_ragged_workspace_bytes(128, 2, 4096, lse=False) == 0  # no lse: no slab


def test_the_ragged_workspace_rule_refuses_one_byte_short() -> None:
    args = ("workspace", "query", "batch_size", "max_q_len", "lse")
    need = trtllm_ragged_workspace_bytes(16, 2, 300, lse=True)
    query = _t(600, 16, 192)  # (tokens, heads, head_dim)
    assert _value("ragged_workspace", args, workspace=_bytes(need), query=query, batch_size=2, max_q_len=300,
                  lse=True) is None
    assert _value("ragged_workspace", args, workspace=_bytes(need - 1), query=query, batch_size=2, max_q_len=300,
                  lse=True) == f"{need - 1} bytes < {need} needed"
    short = {"workspace": _bytes(16), "query": query, "batch_size": 2, "max_q_len": 300, "lse": True}
    assert _value("ragged_workspace", args, **short) == f"16 bytes < {need} needed"
    for changed in ({"workspace": None}, {"query": None}, {"query": _t(600, 16)}, {"batch_size": None},
                    {"max_q_len": None}, {"batch_size": 2.0}):
        assert _value("ragged_workspace", args, **{**short, **changed}) is None, changed


def test_the_counter_buffer_holds_a_semaphore_per_request_and_head_and_at_least_one_per_sm() -> None:
    assert trtllm_counter_bytes(4, 128, 148) == 4 * 128 * 4  # 512 int32 semaphores
    assert trtllm_counter_bytes(1, 16, 148) == 152 * 4  # 148 SMs rounded up to 8
    assert trtllm_counter_bytes(3, 3, 4) == 16 * 4  # 9 rounded up to 16


@pytest.mark.parametrize("arch", ["sm100", "sm103"])
def test_the_counter_rule_reads_batch_and_heads_from_a_4d_query_on_the_archs_sm_count(arch: str) -> None:
    args, sms = ("counters", "query"), DEVICES[arch].multiprocessors
    query = _t(4, 2, 128, 576)  # (batch, q_len, heads, head_dim)
    need = trtllm_counter_bytes(4, 128, sms)
    assert _value("counter_bytes", args, arch=arch, counters=_t(need // 4, dtype="int32"), query=query) is None
    assert _value("counter_bytes", args, arch=arch, counters=_t(need // 4 - 1, dtype="int32"),
                  query=query) == f"{need - 4} bytes < {need} needed on {sms} SMs"
    few = _t(2, 8, 4, 576)  # fewer semaphores than SMs: the SM count decides
    assert _value("counter_bytes", args, arch=arch, counters=_t(4, dtype="int32"),
                  query=few) == f"16 bytes < {trtllm_counter_bytes(2, 4, sms)} needed on {sms} SMs"
    for counters, q in ((None, query), (_t(4, dtype="int32"), None), (_t(4, dtype="int32"), _t(4, 128, 576))):
        assert _value("counter_bytes", args, arch=arch, counters=counters, query=q) is None


def test_a_breach_pairs_the_real_archs_rule_for_the_same_argument() -> None:
    def rule(archs: tuple[str, ...], argument: str, allowed: tuple[int, ...]) -> ArchRule:
        return ArchRule(archs, argument, "int_in", (argument,), f"{argument} in {allowed}", "source", allowed)

    entry = ArchEntry("a kernel", ("module:function",), (
        rule(("sm90",), "heads", (64, 128)), rule(("sm90",), "block_kv", (64,)),
        rule(("sm100",), "heads", (128,)), rule(("sm100",), "block_kv", (32, 64))), "a caller")
    found = breaches(entry, {"heads": 128, "block_kv": 16}, "sm100", "sm90")
    assert [(b.rule.argument, b.value, b.here) for b in found] == [("block_kv", 16, entry.rules[1])]
    assert breaches(entry, {"heads": 128, "block_kv": 64}, "sm100", "sm90") == []
    assert [b.here for b in breaches(entry, {"heads": 128, "block_kv": 16}, "sm100", "sm120")] == [None]
