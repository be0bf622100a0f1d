"""Fault isolation with a real kernel fault (GPU node): an out-of-bounds CUDA scatter (device-side
assert) in test 2 of a generated suite is blamed on test 2 alone, in one process and under -n 2.
The same behaviour with a simulated fault, on CPU: tests/node/test_fault_isolation.py.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())

SUITE = '''
import pytest
import torch
import dsakit

def _innocent():
    x = torch.arange(8, device="cuda", dtype=torch.float32)
    assert x.sum().item() == 28.0

@dsakit.gate("cuda")
def test_1_innocent():
    _innocent()

@dsakit.gate("cuda")
@pytest.mark.parametrize("index", [10], ids=["out-of-bounds"])
def test_2_out_of_bounds_scatter(index):
    # the MTP crash shape: an index past the row; the kernel asserts asynchronously, the test
    # itself returns before anything synchronizes
    out = torch.zeros(4, device="cuda")
    out.scatter_(0, torch.tensor([index], device="cuda"), 1.0)

@dsakit.gate("cuda")
def test_3_innocent():
    _innocent()

@dsakit.gate("cuda")
def test_4_innocent():
    _innocent()

def test_5_ungated_touches_cuda():
    _innocent()
'''


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_real_fault=SUITE)
    pytester._monkeypatch.delenv("CUDA_LAUNCH_BLOCKING", raising=False)
    pytester._monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-v", "-rs", *args)


@dsakit.gate("cuda")
def test_real_fault_one_process(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "-p", "no:xdist")
    # test 2 fails with the kernel error; the gated GPU tests after it are not run, the ungated
    # one meets the poisoned context and is not run either; nothing else fails
    result.assert_outcomes(passed=1, failed=1, skipped=3)
    result.stdout.fnmatch_lines([
        "*test_2_out_of_bounds_scatter*out-of-bounds* FAILED*",
        "*- CUDA context poisoned by this test -*",
        "*left a sticky device error (found after its call phase):",
        "  kernel error: *device-side assert triggered*",
        "  inputs: [[]out-of-bounds[]] index=10",
    ])
    result.stdout.fnmatch_lines([
        "*dsakit skip inventory*", "*", "   3 skipped  [[]cuda-context-poisoned[]] CUDA context poisoned by *",
    ])


@dsakit.gate("cuda")
def test_real_fault_two_workers(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    # both workers share the one GPU the test needs (pinning off): the point is the replacement
    result = _run(pytester, "-n", "2", "--dsakit-workers-per-gpu=0")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(["*replacing crashed worker gw*"])
    result.stdout.fnmatch_lines(["*- CUDA context poisoned by this test -*", "  kernel error: *device-side assert*"])
    assert "crashed while running" not in result.stdout.str()
