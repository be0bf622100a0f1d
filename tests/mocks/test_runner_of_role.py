"""`MockModelRunner.of_role`, what the runner fixtures build for every test: the same runner as
`MockModelRunner(role)` (reads, writes, violations, copies, repr), one per call, each isolated."""

from __future__ import annotations

import copy

import pytest

import dsakit
from dsakit.contracts.schema import Role
from dsakit.errors import ContractViolation


@pytest.mark.parametrize("role", [Role.TARGET, Role.DRAFT])
def test_of_role_is_the_plain_constructors_runner(role: Role) -> None:
    fast, plain = dsakit.MockModelRunner.of_role(role), dsakit.MockModelRunner(role.value)
    assert type(fast) is type(plain) and repr(fast) == repr(plain)
    assert fast.is_draft_worker is plain.is_draft_worker is (role is Role.DRAFT)
    assert fast.model_config.context_len == plain.model_config.context_len
    assert fast.__reduce__() == plain.__reduce__()
    with pytest.raises(ContractViolation, match="not_an_attribute"):
        fast.not_an_attribute  # noqa: B018 - the read is the test


def test_of_role_runners_share_nothing() -> None:
    first, second = (dsakit.MockModelRunner.of_role(Role.TARGET) for _ in range(2))
    first.max_running_requests = 8
    assert second.max_running_requests != 8
    assert copy.deepcopy(first).max_running_requests == 8  # a write is kept by a copy, as for any runner
    assert dsakit.MockModelRunner.draft_from(second).is_draft_worker is True
    assert first.is_draft_worker is False


class MyRunner(dsakit.MockModelRunner):
    """A suite's own subclass: built the same way, sealed as itself."""

    __slots__ = ()


@pytest.mark.parametrize("build", [
    lambda: dsakit.MockModelRunner.of_role(Role.DRAFT),
    lambda: dsakit.MockModelRunner("draft", max_running_requests=8),
    lambda: MyRunner.of_role(Role.TARGET),
    lambda: MyRunner("target", overrides={"server_args.dsa_decode_backend": "trtllm"}),
], ids=["of_role", "constructor", "subclass-of_role", "subclass-constructor"])
def test_a_built_runner_and_its_namespaces_are_strict_once_built(build: object) -> None:
    """The fields are set through the class's twin without the strict `__setattr__` (plain slot
    stores), then the runner and every namespace built below it are their strict class: writes,
    deletes and stray attributes are refused exactly as before."""
    from dsakit.errors import UsageError
    from dsakit.mocks.strict_node import StrictNamespace

    runner = build()  # type: ignore[operator]
    assert type(runner) in (dsakit.MockModelRunner, MyRunner)
    assert type(runner.server_args) is StrictNamespace and type(runner.model_config) is StrictNamespace
    for node, name in ((runner, "undeclared_knob"), (runner.server_args, "undeclared_arg")):
        with pytest.raises(ContractViolation, match=name):
            setattr(node, name, 1)
        with pytest.raises(UsageError, match="cannot delete"):
            delattr(node, name)
    with pytest.raises(dsakit.UsageError, match="max_running_requests"):
        runner.max_running_requests = "many"  # the declared type is still checked
    with pytest.raises(AttributeError):
        runner.__dict__  # noqa: B018 - slots only: no instance dict that would let a write past the contract
