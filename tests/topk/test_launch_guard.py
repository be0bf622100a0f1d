"""The kernel-launch guard's bookkeeping (issue 45 item 3): an entry point wrapped twice (its module
seen by two import hooks) is checked and counted once per call; a `capture_end` of a graph that is
not capturing does not end another graph's capture; nested captures record each launch in the
innermost graph. In-process, on CPU tensors and a stand-in CUDAGraph class."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import pytest

from dsakit.errors import KernelContractViolation
from dsakit.stack.import_hooks import Patches
from dsakit.topk import launch_guard
from dsakit.topk.kernel_contracts import KERNEL_ENTRIES, KernelEntry

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    importlib.import_module("torch")  # while collected: an in-process pytester run elsewhere keeps it
pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the checks read tensors")

TARGET = "topk_transform_paged_v2"


def _entry() -> KernelEntry:
    return next(e for e in KERNEL_ENTRIES if e.target.endswith(TARGET))


def _arguments(bad: bool = False) -> dict[str, Any]:
    """A valid paged top-k launch (row 1's length -4 where `bad`: the kernel reads it as uint32)."""
    import torch

    rows, k = 3, 16
    return {"scores": torch.zeros(rows, 64), "seq_lens": torch.tensor([64, -4 if bad else 20, 0], dtype=torch.int32),
            "page_tables": torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4),
            "out_page_indices": torch.empty(rows, k, dtype=torch.int32), "page_size": 16,
            "metadata": torch.zeros(rows + 1, 2, dtype=torch.int32), "out_raw_indices": None}


def _new_kernel() -> Any:
    """A stand-in entry point no module binds yet (the guard rebinds it in every module that does)."""
    def topk_transform_paged_v2(scores: Any, seq_lens: Any, page_tables: Any, out_page_indices: Any,
                                page_size: Any, metadata: Any, out_raw_indices: Any = None) -> str:
        return "launched"
    return topk_transform_paged_v2


def test_an_entry_point_guarded_twice_is_checked_and_counted_once_per_call(
        monkeypatch: pytest.MonkeyPatch, tally: dict[str, dict[str, int]]) -> None:
    original = _new_kernel()
    module = types.ModuleType("fake_topk_kernels")
    setattr(module, TARGET, original)
    user = types.ModuleType("fake_topk_user")  # `from fake_topk_kernels import topk_transform_paged_v2`
    setattr(user, TARGET, original)
    for each in (module, user):
        monkeypatch.setitem(sys.modules, each.__name__, each)
    patches, wrapped = Patches(), []
    try:
        for _ in range(2):  # the module's import hook fires again (a reload, a second watcher)
            launch_guard.guard_module(patches, module, [(_entry(), TARGET)], wrapped)
        assert wrapped == [f"fake_topk_kernels.{TARGET}"]
        guarded = getattr(module, TARGET)
        assert getattr(user, TARGET) is guarded and guarded.__wrapped__ is original
        assert guarded(**_arguments()) == "launched"
        assert tally == {"launch": {_entry().kernel: 1}}
        with pytest.raises(KernelContractViolation, match=r"seq_lens\[1\] = -4"):
            getattr(user, TARGET)(**_arguments(bad=True))
        assert tally == {"launch": {_entry().kernel: 2}, "refused": {_entry().kernel: 1}}
    finally:
        patches.restore()
    assert getattr(module, TARGET) is original and getattr(user, TARGET) is original


def test_a_stray_capture_end_does_not_end_another_graphs_capture(graph_class: type) -> None:
    kernel = launch_guard.guarded(_entry(), _new_kernel())
    capturing, stray = graph_class(), graph_class()
    capturing.capture_begin()
    stray.capture_end()  # never began: the other graph still captures
    assert launch_guard._GRAPHS.capturing() is capturing
    assert kernel(**_arguments(bad=True)) == "launched"  # captured: shapes only, values before the replay
    capturing.capture_end()
    assert launch_guard._GRAPHS.capturing() is None
    with pytest.raises(KernelContractViolation, match="when this CUDA graph replays"):
        capturing.replay()


def test_nested_captures_record_each_launch_in_the_innermost_graph(graph_class: type) -> None:
    kernel = launch_guard.guarded(_entry(), _new_kernel())
    outer, inner = graph_class(), graph_class()
    good, bad = _arguments(), _arguments(bad=True)
    outer.capture_begin()
    inner.capture_begin()
    kernel(**bad)  # captured into the inner graph: its values are checked before the inner replay
    inner.capture_end()
    assert launch_guard._GRAPHS.capturing() is outer
    kernel(**good)
    outer.capture_end()
    outer.replay()  # its one launch reads `good`
    with pytest.raises(KernelContractViolation, match=r"when this CUDA graph replays.*\n  seq_lens\[1\] = -4"):
        inner.replay()
    assert kernel(**good) == "launched"  # no graph captures now: checked with values, launched
    with pytest.raises(KernelContractViolation, match=r"seq_lens\[1\] = -4"):
        kernel(**bad)
