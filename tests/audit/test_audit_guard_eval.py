"""`dsakit.audit.guard_eval`: the logic that decides "fails on sm100". Membership (`in` / `not in`)
against probe values and against configuration, and the CPU no-capability rule (no SM number: every
SM comparison is false, `is` / `is not` are evaluated). Each case pins a mutant of that logic
(issue 28 item 11); nothing imports torch or SGLang.
"""

from __future__ import annotations

import pytest

from dsakit.audit.guard_eval import decided, holds_by_default, verdict
from dsakit.gates.device_model import SIMULATED


def fired(guard: str) -> list[str]:
    return [key for key, device in SIMULATED.items() if verdict(guard, key, device).fires]


# get_device_sm(): sm90 90, sm100 100, sm103 103, sm120 120, gfx90a 90, gfx942 94, gfx950 95, cpu 0
# (SGLang's own answers without a GPU: get_device_sm() 0, get_device_capability() (None, None))
@pytest.mark.parametrize("guard, devices", [
    ("get_device_sm() in (100, 103)", ["sm100", "sm103"]),
    ("get_device_sm() not in (100, 103)", ["sm90", "sm120", "gfx90a", "gfx942", "gfx950", "cpu"]),
    ("get_device_capability() in ((10, 0), (12, 0))", ["sm100", "sm120"]),
    ("get_device_capability() not in ((10, 0), (12, 0))", ["sm90", "sm103", "gfx90a", "gfx942", "gfx950", "cpu"]),
    ("_is_hip and get_device_sm() in (94, 95)", ["gfx942", "gfx950"]),
])
def test_membership_of_probe_values(guard: str, devices: list[str]) -> None:
    assert fired(guard) == devices


@pytest.mark.parametrize("guard, expected", [
    ("self.device_sm_major >= 10", False),
    ("self.device_sm_major < 10", False),
    ("self.device_sm_major != 10", False),  # not "true because None != 10": no capability, no SM branch
    ("get_device_sm() in (None, 90)", False),  # None on either side of a comparison: false
    ("get_device_capability() == None", False),
    ("self.device_sm_major is None", True),  # identity is evaluated, not ruled false
    ("self.device_sm_major is not None", False),
    ("get_device_sm() == 0", True),  # SGLang's get_device_sm() answers 0 without a GPU
    ("get_device_sm() is None", False),
    ("get_device_capability() == (None, None)", True),
    ("get_device_sm() is not True", True),
    ("not self.device_sm_major >= 10", True),
    # a subscript of the missing capability is None too (issue 34 item 9), so the rule above holds
    ("self.device_capability[0] >= 9", False),
    ("self.device_capability[0] < 9", False),
    ("self.device_capability[0] is None", True),
    ("get_device_capability()[0] >= 9", False),
    ("get_device_capability() >= (9, 0)", False),  # (None, None): no ordering, no SM branch
    ("(9, 0) <= self.device_capability < (10, 0)", False),
    ("(9, 0) <= get_device_capability() < (10, 0)", False),
])
def test_cpu_has_no_capability(guard: str, expected: bool) -> None:
    assert decided(guard, SIMULATED["cpu"]) is expected
    assert verdict(guard, "cpu", SIMULATED["cpu"]).fires is expected


def test_identity_on_a_gpu_is_evaluated_too() -> None:
    assert decided("get_device_sm() is not None", SIMULATED["sm90"]) is True
    assert decided("get_device_sm() is None", SIMULATED["sm90"]) is False


@pytest.mark.parametrize("condition, by_default", [
    ("self.dsa_decode_impl not in ('trtllm', 'fa3')", True),
    ("self.dsa_decode_impl in ('trtllm', 'fa3')", False),
    ("self.dsa_decode_impl != 'trtllm'", True),
    ("self.dsa_decode_impl == 'trtllm'", False),
    ("self.coordinator is None", True),
    ("self.coordinator is not None", False),
    ("not self.flag", True),
])
def test_configuration_membership_is_off_by_default(condition: str, by_default: bool) -> None:
    import ast

    assert holds_by_default(ast.parse(condition, mode="eval").body) is by_default
    on_sm100 = verdict(f"_is_cuda and {condition}", "sm100", SIMULATED["sm100"])
    assert on_sm100.fires is by_default
    assert on_sm100.condition == ("" if by_default else condition)


def test_needed_configuration_drops_what_holds_by_default() -> None:
    guard = "_is_hip and self.impl in ('aiter',) and self.coordinator is None and self.page not in (1,)"
    on_gfx942 = verdict(guard, "gfx942", SIMULATED["gfx942"])
    assert not on_gfx942.fires and on_gfx942.condition == "self.impl in ('aiter',)"
    assert verdict(guard, "sm90", SIMULATED["sm90"]).condition == ""  # `_is_hip` false: never


def test_decided_leaves_configuration_undecided() -> None:
    assert decided("_is_cuda and self.flag", SIMULATED["sm90"]) is None
    assert decided("_is_cuda and self.flag", SIMULATED["gfx942"]) is False
    assert decided("_is_cuda or self.flag", SIMULATED["sm90"]) is True


def test_a_tuple_with_configuration_in_it_stays_configuration() -> None:
    guard = "get_device_sm() in (100, self.extra_sm)"
    on_sm100 = verdict(guard, "sm100", SIMULATED["sm100"])
    assert not on_sm100.fires and on_sm100.condition == guard


@pytest.mark.parametrize("guard, devices", [
    ("(9, 0) <= self.device_capability < (10, 0)", ["sm90", "gfx90a", "gfx942", "gfx950"]),
    ("(10, 0) <= self.device_capability < (12, 0)", ["sm100", "sm103"]),
    ("(10, 0) <= get_device_capability() < (12, 0)", ["sm100", "sm103"]),
    ("90 <= get_device_sm() < 100 != 0", ["sm90", "gfx90a", "gfx942", "gfx950"]),
    ("100 > get_device_sm() >= 95", ["gfx950"]),
])
def test_a_chained_comparison_holds_only_where_every_link_does(guard: str, devices: list[str]) -> None:
    """`a <= b < c` is `a <= b and b < c` (issue 34 item 9: a chain was judged as configuration,
    firing on no device, and a mutant judging its first link alone survived)."""
    assert fired(guard) == devices
    assert all(decided(guard, device) is not None for device in SIMULATED.values())


def test_a_chain_with_configuration_in_a_link_needs_that_configuration() -> None:
    guard = "(9, 0) <= self.device_capability < self.limit"
    on_sm90 = verdict(guard, "sm90", SIMULATED["sm90"])
    assert not on_sm90.fires and on_sm90.condition == "self.device_capability < self.limit"
    assert verdict(guard, "sm100", SIMULATED["sm100"]).condition == "self.device_capability < self.limit"
    assert decided(guard, SIMULATED["cpu"]) is False
