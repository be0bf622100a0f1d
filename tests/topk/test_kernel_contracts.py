"""Kernel-launch contracts (issue 38): the declared preconditions of the top-k and DSA metadata
entry points, checked before the launch under --dsakit-kernel-contracts, through SGLang's own call
sites, inside CUDA graphs (values before each replay) and under a simulated device.

The checks themselves run in-process on CPU tensors; the runs that wrap SGLang's real entry points
are subprocesses (they import torch and SGLang)."""

from __future__ import annotations

import importlib.util
import types

import pytest

from dsakit.node.pytest_invocation import plugin_args
from dsakit.topk.kernel_contracts import KERNEL_ENTRIES, Violation, violations

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    # imported while this module is collected: an in-process pytester run elsewhere in the worker then
    # finds torch imported and keeps it (a torch it dropped cannot be imported again in one process)
    importlib.import_module("torch")
torch_needed = pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] the checks read tensors")
PLUGIN = plugin_args()


def _entry(target: str):  # type: ignore[no-untyped-def]
    return next(e for e in KERNEL_ENTRIES if e.target.endswith(target))


def _paged_args(**changes):  # type: ignore[no-untyped-def]
    import torch

    rows, width, k, page_size = 3, 64, 16, 16
    args = {
        "scores": torch.zeros(rows, width), "seq_lens": torch.tensor([64, 20, 0], dtype=torch.int32),
        "page_tables": torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4),
        "out_page_indices": torch.empty(rows, k, dtype=torch.int32), "page_size": page_size,
        "metadata": torch.zeros(rows + 1, 2, dtype=torch.int32), "out_raw_indices": None,
    }
    args.update(changes)
    return args


def _described(found: list[Violation]) -> list[str]:
    return [v.describe() for v in found]


@torch_needed
def test_good_arguments_break_nothing() -> None:
    assert violations(_entry("topk_transform_paged_v2"), _paged_args()) == []


@torch_needed
def test_a_negative_padded_length_names_its_row_and_value() -> None:
    import torch

    found = violations(_entry("topk_transform_paged_v2"), _paged_args(seq_lens=torch.tensor([64, -4, 0], dtype=torch.int32)))
    assert len(found) == 1 and (found[0].argument, found[0].row, found[0].value) == ("seq_lens", 1, -4)
    assert "must be >= 0 (the kernel reads it as uint32" in found[0].rule and "MTP CUDA-graph crash" in found[0].rule


@torch_needed
@pytest.mark.parametrize(("changes", "expected"), [
    ({"seq_lens": [65, 20, 0]}, "seq_lens[0] = 65: a length must be at most scores.shape[-1] = 64"),
    ({"metadata": None}, "metadata: the v2 transform needs the plan plan_topk_v2 wrote for these lengths"),
    ({"metadata": "shape (3, 2)"}, "metadata (shape (3, 2), int32): must be plan_topk_v2's int32 plan of shape (4, 2)"),
    ({"page_tables": "narrow"}, "page_tables[0] = '4 live pages > table width 2'"),
    ({"page_tables": "negative"}, "page_tables[1] = 'a live page entry is negative (not a page of the pool)'"),
    ({"out_page_indices": "k=4096"}, "out_page_indices (k = 4096): k must be in 1..2048"),
    ({"seq_lens": "int64"}, "seq_lens (int64): dtype must be int32"),  # the v2 JIT reads uint32
    ({"scores": "strided"}, "scores (strides (1, 3)): its last dimension must be contiguous"),
    ({"page_size": 0}, "page_size (0): must be > 0"),
], ids=["too-long", "no-plan", "plan-shape", "table-narrow", "table-negative", "k", "dtype", "strided", "page-size"])
def test_each_precondition_names_the_argument_and_the_rule(changes: dict[str, object], expected: str) -> None:
    import torch

    args = _paged_args()
    value = next(iter(changes.values()))
    name = next(iter(changes))
    if isinstance(value, list):
        args[name] = torch.tensor(value, dtype=torch.int32)
    elif value == "shape (3, 2)":
        args[name] = torch.zeros(3, 2, dtype=torch.int32)
    elif value == "narrow":
        args[name] = args[name][:, :2]
    elif value == "negative":
        args[name][1, 1] = -1
    elif value == "k=4096":
        args[name] = torch.empty(3, 4096, dtype=torch.int32)
    elif value == "int64":
        args[name] = args[name].long()
    elif value == "strided":
        args[name] = torch.zeros(64, 3).t()
    else:
        args[name] = value
    assert expected in "\n".join(_described(violations(_entry("topk_transform_paged_v2"), args)))


@torch_needed
def test_ragged_row_starts_must_not_decrease_and_windows_fit() -> None:
    import torch

    args = {"scores": torch.zeros(3, 32), "seq_lens": torch.tensor([8, 8, 8], dtype=torch.int32),
            "row_starts": torch.tensor([0, 16, 4], dtype=torch.int32), "out_offsets": torch.zeros(3, dtype=torch.int32),
            "out_indices": torch.empty(3, 8, dtype=torch.int32)}
    assert _described(violations(_entry("topk_transform_ragged_v2"), args)) == [
        "row_starts[2] = 4: must not decrease from one row to the next"]
    args["row_starts"] = torch.tensor([0, 16, 28], dtype=torch.int32)
    assert _described(violations(_entry("topk_transform_ragged_v2"), args)) == [
        "seq_lens[2] = 8: row start + length must lie in [0, scores.shape[-1] = 32]"]


@torch_needed
def test_metadata_kernels_check_the_live_rows_against_req_to_token() -> None:
    import torch

    entry = _entry("dsa.metadata:fused_dsa_decode_metadata")
    args = {"seq_lens": torch.tensor([5, 9, -1], dtype=torch.int32), "req_pool_indices": torch.tensor([0, 7, 99]),
            "req_to_token": torch.zeros(4, 8, dtype=torch.int32), "bs": 2, "max_len": 9, "real_page_size": 64,
            "dsa_index_topk": 2048}
    assert _described(violations(entry, args)) == [
        "max_len (9): must be at most req_to_token.shape[1] = 8",
        "req_pool_indices[1] = 7: must index req_to_token (0 <= value < req_to_token.shape[0] = 4)"]
    args["bs"] = 3
    assert "seq_lens[2] = -1: a length must be >= 0" in "\n".join(_described(violations(entry, args)))
    args["bs"] = 4
    assert _described(violations(entry, args))[0] == "bs (4): must be at most seq_lens's 3 rows"


@torch_needed
def test_metadata_kernels_take_what_their_triton_kernels_accept() -> None:
    """No false violation (found on the H200 in SGLang 0.5.21's test_dsa_metadata.py): int64 lengths
    (the kernels cast them), lengths past max_len (clamped: test_large_batch_coverage) and a
    dsa_index_topk above 2048 (the kernels clamp lengths to it: test_large_shape_coverage)."""
    import torch

    entry = _entry("dsa.metadata:fused_dsa_draft_extend_metadata")
    args = {"seq_lens": torch.tensor([257, 1_000_000], dtype=torch.int64), "req_pool_indices": torch.tensor([0, 2]),
            "req_to_token": torch.zeros(4, 1, dtype=torch.int32), "bs": 2, "max_len": 1, "real_page_size": 64,
            "dsa_index_topk": 4096}
    assert violations(entry, args) == []


@torch_needed
def test_shape_checks_only_while_a_graph_captures() -> None:
    import torch

    args = _paged_args(seq_lens=torch.tensor([64, -4, 0], dtype=torch.int32))
    assert violations(_entry("topk_transform_paged_v2"), args, values=False) == []


@torch_needed
def test_a_captured_launch_is_checked_again_before_each_replay() -> None:
    """The static buffers a graph captured hold new values at each replay (the MTP padded rows are
    written then): the replay is refused when they break the kernel's contract."""

    from dsakit.errors import KernelContractViolation
    from dsakit.stack.import_hooks import Patches
    from dsakit.topk import launch_guard

    replays: list[str] = []

    class CUDAGraph:  # the methods torch.cuda.CUDAGraph's Python class defines
        def capture_begin(self, *args: object, **kwargs: object) -> None:
            pass

        def capture_end(self) -> None:
            pass

        def replay(self) -> None:
            replays.append("replayed")

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=CUDAGraph))
    patches = Patches()
    try:
        launch_guard._guard_graphs(patches, fake_torch)
        kernel = launch_guard.guarded(_entry("topk_transform_paged_v2"), lambda scores, seq_lens, page_tables,
                                      out_page_indices, page_size, metadata, out_raw_indices=None: "launched")
        args = _paged_args()
        graph = CUDAGraph()
        graph.capture_begin()
        args["seq_lens"][1] = -4  # capture reads shapes only: a bad value there is not seen yet
        assert kernel(**args) == "launched"
        graph.capture_end()
        with pytest.raises(KernelContractViolation, match=r"when this CUDA graph replays.*\n  seq_lens\[1\] = -4"):
            graph.replay()
        args["seq_lens"][1] = 20
        graph.replay()
        assert replays == ["replayed"]
    finally:
        patches.restore()
    assert CUDAGraph.replay is not None and "checked_replay" not in CUDAGraph.__dict__["replay"].__qualname__


# ---------------------------------------------------------------- a run: SGLang's own entry points and call sites

SUITE = '''
import os

import pytest
import torch

from dsakit.errors import KernelContractViolation


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # a simulated GPU on this box: "cuda" is the CPU


def _inputs(bad):
    rows, width, k = 3, 64, 16
    scores = torch.zeros(rows, width, device=DEVICE)
    lengths = torch.tensor([64, -4 if bad else 20, 0], dtype=torch.int32, device=DEVICE)
    return scores, lengths, k


def test_sglangs_decode_path_refuses_a_negative_padded_length(monkeypatch):
    from types import SimpleNamespace

    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend, TopkTransformMethod

    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "1")
    monkeypatch.setenv("SGLANG_OPT_USE_TOPK_V2", "1")
    scores, lengths, k = _inputs(bad=True)
    table = torch.arange(3 * 4, dtype=torch.int32, device=DEVICE).reshape(3, 4)
    md = SimpleNamespace(page_table_1=None, real_page_table=table, page_size=16, token_to_batch_idx=None,
                         cu_seqlens_k=None, topk_v2_plan=torch.zeros(4, 2, dtype=torch.int32, device=DEVICE))
    with pytest.raises(KernelContractViolation) as caught:
        DSATopKBackend.SGL_KERNEL.topk_transform(scores, lengths, k, TopkTransformMethod.PAGED, md)
    error = caught.value
    assert (error.argument, error.row, error.value) == ("seq_lens", 1, -4), str(error)
    assert error.site.startswith("sglang/srt/layers/attention/dsa/dsa_topk_backend.py:"), error.site
    print("VIOLATION:", str(error).splitlines()[0])


def test_the_plan_refuses_it_too():
    from sglang.kernels.ops.attention.dsv4.topk import plan_topk_v2

    _, lengths, _ = _inputs(bad=True)
    with pytest.raises(KernelContractViolation, match=r"seq_lens\\[1\\] = -4"):
        plan_topk_v2(lengths)


def test_the_entry_points_are_wrapped_only_under_the_option():
    import sglang.kernels.ops.attention.dsv4.topk as topk

    wrapped = getattr(topk.topk_transform_paged_v2, "_dsakit_guarded", False)
    assert wrapped == (os.environ.get("EXPECT_WRAPPED") == "1")
'''


def _sglang_has_v2_paged() -> bool:
    try:
        spec = importlib.util.find_spec("sglang.kernels.ops.attention.dsv4.topk")
    except (ImportError, ValueError):
        return False
    return spec is not None and "def topk_transform_paged_v2" in open(spec.origin or "", encoding="utf-8").read()


sglang_v2 = pytest.mark.skipif(not _sglang_has_v2_paged(), reason="[sglang:topk-v2-fold] this SGLang has no "
                               "topk_transform_paged_v2 (0.5.21 and later have it)")


@torch_needed
@sglang_v2
def test_under_a_simulated_b300_on_cpu_the_checks_run_where_the_launch_is_refused(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """On this CPU box the kernels cannot launch (refused as [simulated-kernel-launch]); the
    contracts still check what the B300 path would pass, at SGLang's own call site."""
    pytester.makepyfile(test_v2=SUITE)
    monkeypatch.setenv("EXPECT_WRAPPED", "1")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-s", "--dsakit-device", "sm103",
                                           "--dsakit-kernel-contracts")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines([
        "dsakit: kernel-launch contracts on: *",
        "*VIOLATION: SGLang's top-k v2 paged transform (topk_transform_paged_v2) "
        "(sglang.kernels.ops.attention.dsv4.topk:topk_transform_paged_v2) would launch with arguments its kernel "
        "does not accept; called at sglang/srt/layers/attention/dsa/dsa_topk_backend.py:*",
        "dsakit: kernel-launch contracts checked 2 launch(es) of 2 kernel(s) (*topk_transform_paged_v2*plan_topk_v2*); "
        "2 refused",
    ])


@torch_needed
@sglang_v2
def test_the_summary_counts_every_workers_launches(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xdist the launches happen in the workers; the controller's summary line adds them up
    (a run whose line says "checked no launch" guarded nothing)."""
    pytester.makepyfile(test_v2=SUITE)
    monkeypatch.setenv("EXPECT_WRAPPED", "1")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-n", "2", "--dsakit-device", "sm103",
                                           "--dsakit-kernel-contracts")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["dsakit: kernel-launch contracts checked 2 launch(es) of 2 kernel(s) (*); 2 refused"])
    only_the_flag = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device", "sm103",
                                                  "--dsakit-kernel-contracts", "-k", "wrapped_only")
    only_the_flag.stdout.fnmatch_lines(["dsakit: kernel-launch contracts checked no launch: *"])


@torch_needed
@sglang_v2
def test_without_the_option_nothing_is_wrapped(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_v2=SUITE)
    monkeypatch.setenv("EXPECT_WRAPPED", "0")
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device", "sm103",
                                           "-k", "wrapped_only")
    result.assert_outcomes(passed=1)
    assert "kernel-launch contracts" not in result.stdout.str()


@torch_needed
@sglang_v2
def test_the_wrappers_are_gone_after_the_run(pytester: pytest.Pytester) -> None:
    import json
    import subprocess
    import sys
    import textwrap

    pytester.makepyfile(test_v2=SUITE)
    script = pytester.makepyfile(check=textwrap.dedent(f"""
        import json, sys
        import pytest
        import sglang.kernels.ops.attention.dsv4.topk as topk
        import dsakit  # a checkout on a node's PYTHONPATH maps dsakit.mocks at import (checkout_layout): the package's
        def dsakit_state():  # the entry points and dsakit's own finders; a library the run imports may add
            # one of its own to sys.meta_path
            return (topk.topk_transform_paged_v2, topk.plan_topk_v2,
                    [f for f in sys.meta_path if type(f).__module__.startswith("dsakit")])
        before = dsakit_state()
        code = pytest.main([*{PLUGIN!r}, "-p", "no:cacheprovider", "-q", "--dsakit-kernel-contracts",
                            "-k", "plan", {str(pytester.path / 'test_v2.py')!r}])
        after = dsakit_state()
        print(json.dumps({{"code": int(code), "same": before == after, "after": repr(after)}}))
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=pytester.path)
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert (outcome["code"], outcome["same"]) == (0, True), done.stdout[-2000:]
