"""The interpreter gate (jit:triton-interpreter): SGLang's metadata kernels loop over a count read from
memory, which Triton 3.6's interpreter cannot (measured on the H200 node's Triton 3.6: the interpreted
contract suite's child died with `TypeError: only 0-dimensional arrays can be converted to Python
scalars`); the gate runs that loop in a child and names what this Triton lacks."""

from __future__ import annotations

import importlib.util

import pytest

from dsakit.gates.device_model import simulated_model
from dsakit.gates.table import gate_table
from dsakit.gates import interpreter_probe as triton_interpreter

needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None or importlib.util.find_spec("torch") is None,
                                  reason="needs torch and Triton (CPU is enough)")


@pytest.fixture
def fresh_probe():
    triton_interpreter.loop_probe_clause.cache_clear()
    yield
    triton_interpreter.loop_probe_clause.cache_clear()


@needs_triton
def test_this_tritons_interpreter_runs_the_loop_and_the_gate_is_open(fresh_probe: None) -> None:
    import triton

    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 8):
        pytest.skip(f"Triton {triton.__version__}: the probe's failure is what the next test shows")
    assert triton_interpreter.loop_probe_clause() is None
    assert gate_table()["jit:triton-interpreter"].why_closed(simulated_model("sm90")) is None


@needs_triton
def test_an_interpreter_that_cannot_loop_over_a_loaded_count_closes_the_gate_with_its_error(
        fresh_probe: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Triton 3.6's failure, raised where the probe's loop would run
    monkeypatch.setattr(triton_interpreter, "LOOP_PROBE", triton_interpreter.LOOP_PROBE.replace(
        "    for block in tl.range(split, blocks, 2, num_stages=3):",
        "    raise TypeError('only 0-dimensional arrays can be converted to Python scalars')\n"
        "    for block in tl.range(split, blocks, 2, num_stages=3):"))
    clause = gate_table()["jit:triton-interpreter"].why_closed(simulated_model("sm103"))
    assert clause is not None and clause.startswith("this Triton's interpreter cannot loop over a count read from memory")
    assert clause.endswith("only 0-dimensional arrays can be converted to Python scalars')"), clause


def test_a_wrong_answer_is_named_with_the_version(fresh_probe: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # an interpreter that runs the loop but counts wrong (a child that prints what a Triton would)
    monkeypatch.setattr(triton_interpreter, "LOOP_PROBE", "print('9.9.9', [6, 4, 0, 2])")
    clause = triton_interpreter.loop_probe_clause()
    assert clause == "Triton 9.9.9's interpreter loops over a count read from memory wrongly: 9.9.9 [6, 4, 0, 2]"
    monkeypatch.setattr(triton_interpreter, "LOOP_PROBE", "print('9.9.9', [6, 4, 0, 1])")
    triton_interpreter.loop_probe_clause.cache_clear()
    assert triton_interpreter.loop_probe_clause() is None
