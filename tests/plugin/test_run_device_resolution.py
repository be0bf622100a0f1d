"""The run's device as `RunDevice` resolves it, in-process (issue 45 item 4: the mutation run's
core): a fleet of devices, one device named with a stray comma (refused), an unknown name, and the plan made
once from the simulated device and this machine's (a stand-in here: a machine without a GPU)."""

from __future__ import annotations

from typing import Any

import pytest

from dsakit.gates import device_model
from dsakit.gates.device_model import DeviceModel
from dsakit.session import RunDevice

CPU = DeviceModel("real", "cpu", "CPU")


@pytest.fixture
def cpu_box(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_model, "real_device", lambda **kwargs: CPU)


def test_a_fleet_names_each_device_and_simulates_none_itself() -> None:
    device = RunDevice("sm90, b300", allow_torch=False)
    assert (device.fleet, device.selected, device.simulated, device.simulated_key) == (["sm90", "sm103"], "real", None, None)


def test_one_device_with_a_stray_comma_is_refused_not_run_as_a_fleet() -> None:
    with pytest.raises(pytest.UsageError, match="sm103,"):
        RunDevice("sm103,", allow_torch=False)


def test_an_unknown_device_is_a_usage_error_naming_it() -> None:
    with pytest.raises(pytest.UsageError, match="h999"):
        RunDevice("h999", allow_torch=False)


def test_the_plan_is_made_once_from_the_simulated_device_and_this_machine(cpu_box: Any) -> None:
    device = RunDevice("sm103", allow_torch=False)
    assert device.model is device.simulated and device.real is CPU
    plan = device.plan
    assert plan is not None and plan is device.plan  # made once
    assert (plan.device.key, plan.real, plan.placement) == ("sm103", CPU, "cpu")
    assert RunDevice(None, allow_torch=False).plan is None  # nothing simulated: no plan
