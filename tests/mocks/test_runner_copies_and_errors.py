"""Gaps in the strict mock's tests found by mutation testing (bench/mutation_run.py --group mocks):
copies of a runner, and the exact wording of the errors a user reads when a MockModelRunner is
built wrongly. In-process and fast: the mutation run forks once per mutant and runs these."""

from __future__ import annotations

import copy
import pickle

import pytest

import dsakit
from dsakit.errors import UsageError
from dsakit.mocks import read_log


@pytest.fixture(autouse=True)
def _fresh_read_log():
    read_log.clear()
    yield
    read_log.clear()


@pytest.mark.parametrize("duplicate", [copy.copy, copy.deepcopy, lambda r: pickle.loads(pickle.dumps(r))],
                         ids=["copy", "deepcopy", "pickle"])
def test_a_copy_keeps_the_role_the_overrides_the_omits_and_the_writes(duplicate) -> None:
    runner = dsakit.MockModelRunner("draft", overrides={"page_size": 32}, omit=["max_running_requests"])
    runner.page_size = 128  # written after construction: the copy must see the write, not the override
    copied = duplicate(runner)
    assert copied is not runner and type(copied) is dsakit.MockModelRunner
    assert copied.is_draft_worker is True
    assert copied.page_size == 128
    with pytest.raises(dsakit.ContractViolation):
        copied.max_running_requests


def test_a_copy_made_before_a_write_does_not_see_it() -> None:
    runner = dsakit.MockModelRunner("target", page_size=16)
    before = copy.deepcopy(runner)
    runner.page_size = 256
    assert (before.page_size, runner.page_size, copy.deepcopy(runner).page_size) == (16, 256, 256)


def test_a_copy_of_a_draft_made_by_draft_from_is_a_draft() -> None:
    runner = dsakit.MockModelRunner.draft_from(dsakit.MockModelRunner("target"))
    assert copy.deepcopy(runner).is_draft_worker is True


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(contract=42), "contract=42: expected a dsakit Contract (dsakit.effective_contract(path), "
                        "or leave it out for the session's), got int"),
    (dict(overrides="x"), "overrides='x': expected a dict of attribute paths to values, e.g. "
                          "overrides={'server_args.dsa_decode_backend': 'trtllm'}, got str"),
    (dict(omit=[1]), "omit=[1]: expected attribute paths (str), e.g. omit=['max_running_requests']"),
])
def test_construction_errors_say_what_was_given_and_what_is_expected(kwargs, message) -> None:
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(**kwargs)
    assert str(raised.value) == message


def test_draft_from_errors_name_what_it_got() -> None:
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner.draft_from(5)  # type: ignore[arg-type]
    assert str(raised.value) == "draft_from needs a MockModelRunner, got int"
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner.draft_from(dsakit.MockModelRunner("draft"))
    assert str(raised.value) == "draft_from: this MockModelRunner already has role='draft'"


def _declaration(path: str, reader: str, set_by_line: str) -> str:
    return (
        "If your backend really reads it, declare it in your suite's pyproject.toml so every mock "
        "provides it (type, per-role default, where the real runner sets it):\n"
        f'[tool.dsakit.contract."{path}"]\n'
        'type = "int"                 # int, float, bool, str, list[str], object, namespace, or a dotted class\n'
        "target = 0                   # default for a target worker\n"
        "draft = 0                    # default for a draft worker (omit: same as target)\n"
        f'readers = ["{reader}"]\n'
        f"{set_by_line}\n"
        "then `dsakit contract check --backend-src DIR` checks your backend's reads against it."
    )


_UNKNOWN_SET_BY = 'set_by = "<file:line where the real ModelRunner sets it>"  # or "backend" when your backend sets it itself'


def test_an_undeclared_read_says_where_it_was_read_where_the_runner_sets_it_and_how_to_declare_it() -> None:
    from dsakit.contracts.runner_sites import runner_site  # the declared table the mock words

    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.no_such_thing  # noqa: B018
    site = raised.value.reading_site
    assert site.endswith(" in test_an_undeclared_read_says_where_it_was_read_where_the_runner_sets_it_and_how_to_declare_it")
    assert __name__.rpartition(".")[2] + ".py:" in site
    assert str(raised.value) == (
        f"model_runner.no_such_thing is not in the dsakit role contract (role=target): read at {site}; "
        f"the real ModelRunner: {runner_site('no_such_thing').phrase}. "
        + _declaration("no_such_thing", site.rsplit(" in ", 1)[1], _UNKNOWN_SET_BY))


def test_an_undeclared_write_of_what_no_runner_sets_is_declared_as_set_by_the_backend() -> None:
    from dsakit.contracts.runner_sites import runner_site  # the declared table the mock words

    runner = dsakit.MockModelRunner("draft")
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.model_config.no_such = 1
    site = raised.value.reading_site
    assert (raised.value.code, raised.value.attribute) == ("contract-undeclared-write", "model_config.no_such")
    assert str(raised.value) == (
        f"cannot set model_runner.model_config.no_such (role=draft) at {site}: not in the dsakit role "
        f"contract (the real ModelRunner: {runner_site('model_config.no_such').phrase}). "
        + _declaration("model_config.no_such", site.rsplit(" in ", 1)[1],
                       'set_by = "backend"             # your backend sets it itself'))


@pytest.mark.parametrize("write", [False, True], ids=["read", "write"])
def test_an_attribute_the_real_runner_sets_is_declared_with_its_assignment_site(write: bool) -> None:
    from dsakit.sglang_facts.runner_source import runner_site

    real = runner_site("mem_fraction_static")  # ModelRunner.__init__ sets it; the contract does not declare it
    assert real.endswith(" (ModelRunner sets it)"), real
    assignment = real.split(" (", 1)[0]
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation) as raised:
        if write:
            runner.mem_fraction_static = 0.8
        else:
            runner.mem_fraction_static  # noqa: B018
    message = str(raised.value)
    assert f'\nset_by = "{assignment}"  # or "backend" when your backend sets it itself\n' in message
    assert message.count("model_runner.py:") == 2  # the finding and the declaration, nothing else


def test_setting_a_namespace_or_the_draft_flag_wrongly_says_what_would_be_right() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(UsageError) as raised:
        runner.model_config = 1
    assert str(raised.value) == (
        "setting model_runner.model_config=1: expected a namespace (a strict nested object: a mapping of "
        "its attributes such as model_config={...} or model_config__<attribute>=..., or an object with "
        "those attributes), got int")
    with pytest.raises(UsageError) as raised:
        runner.is_draft_worker = True
    assert str(raised.value) == (
        "setting model_runner.is_draft_worker=True contradicts role='target': build "
        "MockModelRunner(role='draft') instead, or turn a target into a draft with "
        "MockModelRunner.draft_from(runner)")
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner("draft", is_draft_worker=False)
    assert "override model_runner.is_draft_worker=False contradicts role='draft': build " \
           "MockModelRunner(role='target') instead" in str(raised.value)


def test_override_errors_name_the_path_and_the_declared_children() -> None:
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(page_size__x=1)
    assert str(raised.value) == "override page_size.x: page_size is a int, not a nested object"
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(model_config__nope=1)
    message = str(raised.value)
    assert message.startswith("unknown override 'model_config.nope': the role contract declares no such "
                              "attribute on model_runner.model_config; declared here: ")
    declared = message.rpartition("declared here: ")[2].split(", ")
    assert declared == sorted(declared) and "hf_config" in declared and "nope" not in declared
    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner(nope=1)
    assert str(raised.value).startswith("unknown override 'nope': the role contract declares no such attribute "
                                        "on model_runner; declared here: ")


def test_deleting_or_copying_a_node_on_its_own_is_refused_with_what_to_do_instead() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(UsageError) as raised:
        del runner.page_size
    assert str(raised.value) == "cannot delete model_runner.page_size: build the mock with omit=(...) instead"
    with pytest.raises(TypeError) as raised_type:
        copy.copy(runner.model_config)
    assert str(raised_type.value) == (
        "cannot copy or pickle <strict model_runner.model_config role=target> on its own: it belongs to a "
        "MockModelRunner; copy the runner (copy.deepcopy(runner), pickle.dumps(runner)) and read the "
        "attribute from the copy")
    assert (repr(runner), repr(runner.model_config.hf_config)) == (
        "<strict model_runner role=target>", "<strict model_runner.model_config.hf_config role=target>")


def test_a_violation_under_a_simulated_device_names_the_device() -> None:
    from dsakit.gates.device_model import simulated_model
    from dsakit.simulation.probe_patches import announced

    runner = dsakit.MockModelRunner("target")
    device = simulated_model("sm100")
    with announced(device), pytest.raises(dsakit.ContractViolation) as raised:
        runner.no_such_thing  # noqa: B018
    assert raised.value.device == device.key == "sm100"
    site = raised.value.reading_site
    assert f"read at {site} on simulated sm100 ({device.name}); the real ModelRunner: " in str(raised.value)
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.no_such_thing  # noqa: B018
    assert raised.value.device == "" and " on simulated " not in str(raised.value)


def _small_contract() -> object:
    from dsakit.contracts.schema import Contract, ContractEntry

    return Contract("small", [
        ContractEntry("batch", "int", 5, optional=True, readers=("MyBackend.__init__",)),
        ContractEntry("quiet", "int", 7),  # nobody declared as reading it
    ])


def test_an_optional_attribute_overridden_with_none_reads_none_not_its_default() -> None:
    assert dsakit.MockModelRunner(contract=_small_contract(), batch=None).batch is None
    assert dsakit.MockModelRunner(contract=_small_contract()).batch == 5


def test_an_omitted_read_names_the_declared_readers_or_says_where_to_look() -> None:
    runner = dsakit.MockModelRunner(contract=_small_contract(), omit=["batch", "quiet"])
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.batch  # noqa: B018
    site = raised.value.reading_site
    assert str(raised.value).startswith(
        f"model_runner.batch was omitted from this MockModelRunner (role=target) but is read at {site}. "
        "The role contract declares it (read by: MyBackend.__init__); the real ModelRunner: ")
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.quiet  # noqa: B018
    assert "The role contract declares it (read by: see the contract); the real ModelRunner: " in str(raised.value)


def test_an_undeclared_read_below_a_namespace_asks_for_the_assignment_site() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.model_config.no_such  # noqa: B018 - ModelRunner sets model_config, not this
    assert f"\n{_UNKNOWN_SET_BY}\n" in str(raised.value)


def test_listing_a_runner_keeps_what_was_written() -> None:
    runner = dsakit.MockModelRunner("target")
    runner.page_size = 5
    assert "page_size" in dir(runner)
    assert runner.page_size == 5


def test_a_default_read_twice_is_the_same_value() -> None:
    runner = dsakit.MockModelRunner("target")
    first = runner.max_running_requests
    assert runner.max_running_requests == first == 64
    assert runner.model_config.hf_config is runner.model_config.hf_config


def test_copying_probes_dunder_names_without_logging_contract_reads() -> None:
    runner = dsakit.MockModelRunner("target")
    runner.model_config.context_len  # noqa: B018 - build a level below the runner
    copy.deepcopy(runner)
    copy.copy(runner)
    assert read_log.contract_reads() == []
    with pytest.raises(AttributeError) as raised:
        runner.__array_interface__  # noqa: B018 - numpy's probe
    assert type(raised.value) is AttributeError


def test_a_soft_read_without_a_default_raises_the_soft_read_violation() -> None:
    runner = dsakit.MockModelRunner("draft")
    with pytest.raises(dsakit.ContractViolation) as raised:
        getattr(runner, "no_such_soft")  # noqa: B009 - the soft-read form the mock recognises
    assert raised.value.code == "contract-soft-read" and raised.value.attribute == "no_such_soft"
    assert str(raised.value) == "model_runner.no_such_soft is not in the role contract (soft read)"
    assert [r.kind for r in read_log.contract_reads()] == [read_log.SOFT]
