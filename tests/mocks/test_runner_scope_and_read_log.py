"""Gaps found by mutation testing in the runner fixtures' SGLang scope (mocks/runner_scope.py) and
the read log (mocks/read_log.py): in-process tests of what the pytester suites only covered from a
subprocess. This module imports SGLang's runtime context, so the runner fixtures' rule "the test's
module uses SGLang" holds for it."""

from __future__ import annotations

import sys
import types

import pytest

import dsakit
from dsakit.contracts.schema import Contract, ContractEntry, Factory, per_role
from dsakit.mocks import read_log, runner_scope
from dsakit.sglang_facts.scope import SGLangScope

runtime_context = pytest.importorskip("sglang.srt.runtime_context",
                                      reason="sglang:not-installed: the runner scope needs SGLang's runtime context")


# what opening a scope imports (SGLang's server args and config namespaces), imported with this
# module so each test stays fast (the mutation run leaves out tests slower than 3 s)
with SGLangScope(server_args={}):
    pass


def _published() -> bool:
    return bool(runtime_context.get_context().is_config_namespace_published("exec"))


@pytest.fixture(autouse=True)
def _fresh_read_log():
    read_log.clear()
    yield
    read_log.clear()


def test_role_server_args_are_the_per_role_server_args_this_sglang_has() -> None:
    assert runner_scope.role_server_args(dsakit.MockModelRunner("draft")) == {"speculative_eagle_topk": 1}
    assert runner_scope.role_server_args(dsakit.MockModelRunner("target")) == {"speculative_eagle_topk": None}


def test_role_server_args_leave_out_shared_nested_unknown_and_non_server_args_entries() -> None:
    contract = Contract("small", [
        ContractEntry("server_args", "namespace"),
        ContractEntry("server_args.speculative_eagle_topk", "int", optional=True,
                      **per_role(None, Factory(lambda runner: 3, "three"))),
        ContractEntry("server_args.page_size", "int", 1),  # the same for both roles
        ContractEntry("server_args.not_a_server_arg", "int", **per_role(1, 2)),
        ContractEntry("server_args.speculative_eagle_topk_extra", "namespace"),
        ContractEntry("server_args.speculative_eagle_topk_extra.page_size", "int", **per_role(1, 2)),
        ContractEntry("speculative_eagle_topk", "int", **per_role(1, 2)),  # not below server_args
    ])
    draft = dsakit.MockModelRunner("draft", contract=contract)
    assert runner_scope.role_server_args(draft) == {"speculative_eagle_topk": 3}  # a Factory is built
    assert runner_scope.role_server_args(dsakit.MockModelRunner("target", contract=contract)) == {
        "speculative_eagle_topk": None}


def test_a_runner_fixture_opens_a_scope_with_its_roles_server_args_and_closes_it() -> None:
    assert _published() is False
    body = runner_scope.scoped_runner("draft")
    runner = next(body)
    assert _published() is True
    assert runner.is_draft_worker is True
    assert runner.server_args.speculative_eagle_topk == 1  # pinned as an override
    with pytest.raises(StopIteration):
        next(body)
    assert _published() is False


def test_a_runner_fixture_inside_a_published_scope_opens_none_of_its_own() -> None:
    with SGLangScope(server_args={}):
        body = runner_scope.scoped_runner("target")
        runner = next(body)
        assert runner.is_draft_worker is False
        with pytest.raises(StopIteration):
            next(body)
        assert _published() is True  # the outer scope is not closed by the fixture
    assert _published() is False


def test_published_is_none_without_the_runtime_context_or_its_namespaces(monkeypatch) -> None:
    assert runner_scope._published() is False
    monkeypatch.setattr(runtime_context, "get_context", lambda: types.SimpleNamespace())
    assert runner_scope._published() is None  # 0.5.17-0.5.20: no config namespaces
    monkeypatch.delitem(sys.modules, runner_scope.RUNTIME_CONTEXT)
    assert runner_scope._published() is None


def test_a_module_uses_sglang_when_it_holds_an_sglang_module_or_a_name_from_one() -> None:
    from sglang.srt.server_args import ServerArgs

    plain, by_module, by_name, lookalike = (types.ModuleType(n) for n in ("plain", "by_module", "by_name", "x"))
    plain.os = sys
    by_module.ctx = runtime_context
    by_name.ServerArgs = ServerArgs
    lookalike.thing = types.SimpleNamespace(__module__="sglangish.tools")
    assert [runner_scope._module_uses_sglang(m) for m in (plain, by_module, by_name, lookalike)] == [
        False, True, True, False]
    by_module.ctx = None  # asked once per module: the answer is kept
    assert runner_scope._module_uses_sglang(by_module) is True
    assert runner_scope._module_uses_sglang("not a module") is False


def test_the_current_test_module_is_found_from_pytest_current_test(monkeypatch) -> None:
    assert runner_scope._current_test_module() is sys.modules[__name__]
    assert runner_scope._current_test_module() is sys.modules[__name__]  # the cached answer
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/no_such_file.py::test_x (call)")
    assert runner_scope._current_test_module() is None
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/notes.txt::test_x (call)")
    assert runner_scope._current_test_module() is None
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert runner_scope._current_test_module() is None


def test_the_read_log_summary_counts_repeats_and_sorts_by_kind_path_and_site() -> None:
    reads = [read_log.ContractRead(read_log.UNDECLARED, "target", "b", "x.py:2"),
             read_log.ContractRead(read_log.SOFT, "draft", "a", "x.py:9"),
             read_log.ContractRead(read_log.UNDECLARED, "target", "b", "x.py:2"),
             read_log.ContractRead(read_log.UNDECLARED, "target", "a", "x.py:3")]
    for read in reads:
        read_log.record(read)
    assert read_log.contract_reads(read_log.SOFT) == [reads[1]]
    assert read_log.contract_reads() == reads
    assert read_log.format_summary() == [
        "soft-read: model_runner.a (draft) at x.py:9",
        "undeclared-read: model_runner.a (target) at x.py:3",
        "undeclared-read: model_runner.b (target) at x.py:2 x2",
    ]
    read_log.clear()
    assert read_log.contract_reads() == [] and read_log.format_summary() == []


def test_the_read_log_travels_from_an_xdist_worker_to_the_controller() -> None:
    read = read_log.ContractRead(read_log.WRITE, "draft", "page_sizes", "y.py:1 in f")
    read_log.record(read)
    handed = read_log.worker_output()  # the run's session carries it in its one hand-over
    assert handed == [{"kind": "undeclared-write", "role": "draft", "path": "page_sizes", "site": "y.py:1 in f"}]
    read_log.clear()
    read_log.merge(handed)
    read_log.merge([])  # a worker that built no mock
    assert read_log.contract_reads() == [read]
