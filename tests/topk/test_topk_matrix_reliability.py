"""The top-k matrix suite is order- and process-independent, and its scopes never leak.

Runs the real contract suite (`contracts/test_topk_matrix.py`, copied into a pytester project)
in a subprocess (torch and SGLang load there, never in this process): in collection order, in
a seeded shuffled order, and under `-n 2`; the outcome per test id must be identical. The
project's conftest guards every test: the SGLang global state (SGLANG_* env, the runtime
context's server-args slot and bags, parallel overrides) after a test equals the state before
it — including tests that raise inside a scope.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _plugin_args() -> tuple[str, ...]:
    from dsakit.node.pytest_invocation import plugin_args

    return tuple(plugin_args())

SUITE = Path(__file__).resolve().parents[2] / "contracts" / "test_topk_matrix.py"

CONFTEST = r'''
import json, os, random
import pytest

_OUT = {}

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    seed = os.environ.get("DSAKIT_TEST_SHUFFLE")
    if seed:
        random.Random(int(seed)).shuffle(items)

def pytest_runtest_logreport(report):
    prev = _OUT.get(report.nodeid, "passed")
    if report.failed:
        now = "failed" if report.when == "call" else "error"
    elif report.skipped:
        now = "skipped"
    else:
        now = "passed"
    order = ["passed", "skipped", "failed", "error"]
    _OUT[report.nodeid] = max(prev, now, key=order.index)

def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    with open(os.environ["DSAKIT_OUTCOMES"], "w") as fh:
        json.dump(_OUT, fh, indent=1, sort_keys=True)

@pytest.fixture(autouse=True)
def _no_sglang_leak():
    import dsakit
    before = dsakit.sglang_state()
    yield
    after = dsakit.sglang_state()
    assert after == before, "SGLang global state leaked: " + "; ".join(before.diff(after))
'''

LEAKS = r'''
import os
import pytest
import dsakit
from dsakit.sglang_facts.scope import SGLangScope


class Boom(Exception):
    pass


def test_raise_inside_cell_scope_restores_everything(monkeypatch):
    monkeypatch.setenv("SGLANG_DSA_FUSE_TOPK", "false")  # a prior value must come back, not vanish
    monkeypatch.delenv("SGLANG_OPT_USE_TOPK_V2", raising=False)
    cell = dsakit.topk_cell("draft", "flashinfer", fused=True, v2=True)  # valid on both releases
    before = dsakit.sglang_state()
    with pytest.raises(Boom):
        with cell.scope():
            inside = dsakit.sglang_state()
            assert inside.server_args != before.server_args
            assert os.environ["SGLANG_DSA_FUSE_TOPK"] == "true"
            raise Boom()
    assert dsakit.sglang_state() == before
    assert os.environ["SGLANG_DSA_FUSE_TOPK"] == "false"
    assert "SGLANG_OPT_USE_TOPK_V2" not in os.environ


def test_raise_inside_nested_scopes_restores_everything():
    before = dsakit.sglang_state()
    outer = dsakit.topk_cell("target", "torch", "torch", fused=False)
    inner = dsakit.topk_cell("target", "sgl-kernel", fused=True, v2=False)
    with pytest.raises(Boom):
        with outer.scope():
            middle = dsakit.sglang_state()
            with inner.scope():
                raise Boom()
    assert dsakit.sglang_state() == before
    assert middle != before


def test_failing_enter_applies_nothing():
    before = dsakit.sglang_state()
    with pytest.raises(dsakit.UsageError, match="SGLANG_NO_SUCH_FLAG"):
        SGLangScope(server_args={"dsa_topk_backend": "torch"},
                    env={"SGLANG_DSA_FUSE_TOPK": False, "SGLANG_NO_SUCH_FLAG": 1}).__enter__()
    assert dsakit.sglang_state() == before


@dsakit.topk_matrix(subset="pairwise", invalid="drop", gated=False)
def test_raise_inside_topk_scope_fixture(topk_scope):
    # fails on purpose; the autouse guard (teardown) must still see the state restored
    raise Boom(topk_scope.id)
'''


def _run(pytester: pytest.Pytester, tag: str, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    out = pytester.path / f"outcomes-{tag}.json"
    pytester._monkeypatch.setenv("DSAKIT_OUTCOMES", str(out))
    pytester._monkeypatch.delenv("DSAKIT_TEST_SHUFFLE", raising=False)
    for name, value in (env or {}).items():
        pytester._monkeypatch.setenv(name, value)
    result = pytester.runpytest_subprocess(*_plugin_args(), "-p", "no:cacheprovider", "-q", *args)
    assert out.is_file(), result.stdout.str()[-3000:]
    outcomes: dict[str, str] = json.loads(out.read_text())
    return outcomes


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_topk_matrix=SUITE.read_text(encoding="utf-8"), test_scope_leaks=LEAKS)
    return pytester


def test_matrix_outcomes_do_not_depend_on_order_or_processes(project: pytest.Pytester) -> None:
    plain = _run(project, "plain")
    shuffled = _run(project, "shuffled", env={"DSAKIT_TEST_SHUFFLE": "20240517"})
    xdist = _run(project, "xdist", "-n", "2", "--dsakit-workers-per-gpu=2")  # 2 workers may share 1 GPU

    assert plain, "no outcomes recorded"
    counts = {o: sum(1 for v in plain.values() if v == o) for o in ("passed", "skipped", "failed", "error")}
    assert counts["passed"] > 0 and counts["skipped"] > 0 and counts["error"] == 0, counts
    # the only failures are the on-purpose raises inside the topk_scope fixture
    failed = sorted(k for k, v in plain.items() if v == "failed")
    assert failed and all("test_raise_inside_topk_scope_fixture" in k for k in failed), failed
    for name, other in (("shuffled", shuffled), ("-n 2", xdist)):
        diff = {k: (plain.get(k), other.get(k)) for k in set(plain) | set(other) if plain.get(k) != other.get(k)}
        assert not diff, f"outcomes differ between collection order and {name}: {diff}"
