"""Gaps in the contract schema's tests found by mutation testing (bench/mutation_run.py --group
mocks): the contract's Markdown table, its validation errors, roles parsing, and what a strict mock
says about optional entries, empty namespaces and a contract default of the wrong type."""

from __future__ import annotations

import pytest

import dsakit
from dsakit.contracts.schema import (
    Contract,
    ContractEntry,
    Factory,
    markdown_table,
    parse_roles,
    per_role,
    validate_roles_option,
)
from dsakit.errors import UsageError
from dsakit.mocks import read_log


@pytest.fixture(autouse=True)
def _fresh_read_log():
    read_log.clear()
    yield
    read_log.clear()


def test_the_markdown_table_has_one_escaped_row_per_entry() -> None:
    contract = Contract("small", [
        ContractEntry("page_size", "int", 64, readers=("A.__init__", "B | C")),
        ContractEntry("model_config", "namespace"),
        ContractEntry("model_config.context_len", "int", **per_role(4096, 2048)),
        ContractEntry("pool", "object", None, optional=True, readers=("first line\nsecond line",)),
        ContractEntry("my_cache", "str", "a", declared_in="suite/pyproject.toml", set_by="backend"),
    ])
    assert markdown_table(contract).splitlines() == [
        "| `model_runner.` attribute | type | target default | draft default | read by |",
        "|---|---|---|---|---|",
        "| `page_size` | int | `64` | same | A.__init__; B \\| C |",
        "| `model_config` | namespace | (strict object) | (strict object) | - |",
        "| `model_config.context_len` | int | `4096` | `2048` | - |",
        "| `pool` | object or None | `None` | same | first line second line |",
        "| `my_cache` | str | `'a'` | same | - (declared in suite/pyproject.toml; set by backend) |",
    ]


@pytest.mark.parametrize(("entries", "message"), [
    ([ContractEntry("a", "int"), ContractEntry("a", "int")], "contract x: duplicate entry 'a'"),
    ([ContractEntry("a.b", "int")], "contract x: 'a.b' declared before its parent 'a'"),
    ([ContractEntry("a", "int"), ContractEntry("a.b", "int")], "contract x: parent of 'a.b' is not a namespace"),
])
def test_a_contract_refuses_duplicates_orphans_and_children_of_non_namespaces(entries, message) -> None:
    with pytest.raises(ValueError) as raised:
        Contract("x", entries)
    assert str(raised.value) == message


def test_a_contract_keeps_its_name_and_each_entry_its_parent_and_name() -> None:
    contract = Contract("small", [ContractEntry("a", "namespace"), ContractEntry("a.b", "namespace"),
                                  ContractEntry("a.b.c", "int")])
    assert contract.name == "small" and len(contract) == 3 and "a.b.c" in contract
    entry = contract.get("a.b.c")
    assert (entry.parent, entry.name) == ("a.b", "c")
    assert (contract.get("a").parent, contract.get("a").name) == ("", "a")
    assert list(contract.children("a.b")) == ["c"] and list(contract.top_level()) == ["a"]
    assert repr(Factory(lambda runner: 1, "one")) == "<one>"


def test_roles_parse_once_each_and_a_bad_option_names_itself() -> None:
    assert parse_roles("draft, target,draft") == ["draft", "target"]
    assert parse_roles(["TARGET", " "]) == ["target"]
    with pytest.raises(pytest.UsageError) as raised:
        validate_roles_option("bogus")
    assert str(raised.value) == "--dsakit-roles='bogus': unknown role 'bogus'; expected one of: target, draft"
    with pytest.raises(pytest.fail.Exception) as failed:
        validate_roles_option(" , ", what="marker dsakit_roles", collecting=True)
    assert str(failed.value) == ("marker dsakit_roles=' , ': no role given; expected a comma-separated "
                                 "subset of: target, draft")
    assert failed.value.pytrace is False  # a collection error of one line, no traceback


def test_type_errors_of_optional_entries_say_or_none() -> None:
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(contract=Contract("s", [ContractEntry("n", "int", 1, optional=True)]), n="x")
    assert str(raised.value) == "override model_runner.n='x': expected int or None, got str"
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(contract=Contract("s", [ContractEntry("ns", "namespace", optional=True)]), ns=3)
    assert str(raised.value) == (
        "override model_runner.ns=3: expected a namespace (a strict nested object: a mapping of its attributes "
        "such as ns={...} or ns__<attribute>=..., or an object with those attributes) or None, got int")


def test_an_override_below_an_empty_namespace_says_it_declares_none() -> None:
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(contract=Contract("s", [ContractEntry("ns", "namespace")]), ns__x=1)
    assert str(raised.value) == ("unknown override 'ns.x': the role contract declares no such attribute on "
                                 "model_runner.ns; declared here: none")


def test_a_contract_default_of_the_wrong_type_names_the_factory_and_the_fix() -> None:
    runner = dsakit.MockModelRunner(contract=Contract("s", [
        ContractEntry("n", "int", Factory(lambda runner: "x", "a str"), optional=True)]))
    with pytest.raises(UsageError) as raised:
        runner.n  # noqa: B018
    assert str(raised.value) == ("the contract default of model_runner.n (a str) built 'x', not the declared "
                                 "int: fix contracts/model_runner_contract.py")


def test_dir_of_an_unread_runner_lists_its_declared_names_sorted() -> None:
    runner = dsakit.MockModelRunner(contract=Contract("s", [ContractEntry("b", "int", 1), ContractEntry("a", "int", 2)]))
    assert dir(runner) == ["a", "b"]
    assert runner.b == 1 and dir(runner) == ["a", "b"]


def test_an_omitted_read_joins_several_readers() -> None:
    contract = Contract("s", [ContractEntry("n", "int", 1, readers=("A.__init__", "B.forward"))])
    with pytest.raises(dsakit.ContractViolation, match=r"\(read by: A\.__init__; B\.forward\)"):
        dsakit.MockModelRunner(contract=contract, omit=["n"]).n  # noqa: B018
