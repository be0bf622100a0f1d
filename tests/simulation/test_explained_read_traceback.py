"""A model-runner read dsakit explains comes right after a short traceback (issue 45 item 5): under
simulated sm103, SGLang's DeepseekSparseAttnBackend fails on a hand-written runner, and pytest's
default long traceback printed the whole __init__ (~300 lines) before dsakit's explanation. Where
the run chose no --tb the traceback is pytest's --tb=short; a --tb the user gives is kept."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from dsakit.gates.device_model import real_device
from dsakit.node.pytest_invocation import plugin_args

pytestmark = [
    pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                       reason="[module:torch] the simulation patches torch"),
    pytest.mark.skipif(importlib.util.find_spec("sglang") is None,
                       reason="[module:sglang] the suite builds SGLang's backend"),
    pytest.mark.skipif(real_device().is_gpu, reason="[real-gpu] the suite's runner lives on the CPU placement"),
]
SUITE = (Path(__file__).parents[1] / "suites" / "indexer_shaped.py").read_text(encoding="utf-8")
EXPLANATION = "model_runner.max_running_requests is missing on MockModelRunner: read at *dsa_backend.py:*"


def _failure_lines(pytester: pytest.Pytester, *args: str) -> list[str]:
    """The lines of the one failure, from its header to the explanation's first line."""
    pytester.makepyfile(test_indexer_shape=SUITE)
    result = pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "--dsakit-device", "sm103",
                                           "-k", "HandWrittenRunner and test_backend_builds", *args)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*_ TestBackendFromAHandWrittenRunner.test_backend_builds _*",
                                 "E   *AttributeError: 'MockModelRunner' object has no attribute "
                                 "'max_running_requests'",
                                 "*dsakit model_runner read*", EXPLANATION])
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "TestBackendFromAHandWrittenRunner.test_backend_builds _" in line)
    end = next(i for i, line in enumerate(lines) if "is missing on MockModelRunner: read at" in line)
    return lines[start:end]


def test_the_explanation_follows_a_short_traceback_unless_the_user_chose_a_tb_style(
        pytester: pytest.Pytester) -> None:
    lines = _failure_lines(pytester)
    assert len(lines) < 20, "\n".join(lines)
    assert any(line.startswith("test_indexer_shape.py:") and line.endswith(" in test_backend_builds")
               for line in lines), "\n".join(lines)  # --tb=short: one `file:line: in function` per frame
    chosen = _failure_lines(pytester, "--tb=long")
    assert len(chosen) > 100, "\n".join(chosen)  # the whole __init__, as pytest prints it
