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
