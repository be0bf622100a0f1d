"""bench/durations_table.py: parsing pytest's --durations report into a per-test distribution."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "durations_table.py"

OUTPUT = """\
============================= slowest durations ==============================
2.50s call     contracts/test_topk_selection.py::test_selection[flashinfer.topk_func-long-1m-ps64-k2048]
0.40s setup    contracts/test_topk_selection.py::test_selection[flashinfer.topk_func-long-1m-ps64-k2048]
1.00s call     contracts/test_a.py::test_b[role=target]
0.00s teardown contracts/test_a.py::test_b[role=target]
0.20s call     contracts/test_a.py::test_c
0.10s call     contracts/test_a.py::test_d[x y]
=========================== 4 passed in 4.30s ===========================
"""


@pytest.fixture(scope="module")
def durations() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_durations_table", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_phases_are_summed_per_test(durations: ModuleType) -> None:
    tests = durations.parse(OUTPUT)
    assert len(tests) == 4
    slow = tests["contracts/test_topk_selection.py::test_selection[flashinfer.topk_func-long-1m-ps64-k2048]"]
    assert slow.phases == {"call": 2.5, "setup": 0.4}
    assert slow.total == pytest.approx(2.9)
    assert "contracts/test_a.py::test_d[x y]" in tests  # ids with spaces survive


def test_summary_percentiles_and_top(durations: ModuleType) -> None:
    summary = durations.summarize(durations.parse(OUTPUT), top=2)
    assert summary["tests"] == 4
    assert summary["total_s"] == pytest.approx(4.2)
    assert summary["p50_s"] == pytest.approx(0.2)  # nearest rank of [0.1, 0.2, 1.0, 2.9]
    assert summary["p90_s"] == pytest.approx(2.9)
    assert [t["total_s"] for t in summary["top"]] == pytest.approx([2.9, 1.0])
    text = durations.markdown(summary, "warm")
    assert "### warm" in text and "| 1 | `contracts/test_topk_selection.py" in text


def test_no_durations_says_how_to_get_them(durations: ModuleType) -> None:
    text = durations.markdown(durations.summarize(durations.parse("1 passed in 0.1s")))
    assert "--durations=0 --durations-min=0" in text
