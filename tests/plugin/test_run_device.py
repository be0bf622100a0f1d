"""The run's device as the session resolves it (issue 45 item 3): every spelling of 'real' is this
machine, --dsakit-device-from-torch reaches the real device's reading, and a real CPU run is keyed
"cpu" (the device table's entry) in the skip paragraph and in the report's `table_key`, never
"real". pytester runs in-process; this machine's device is a stand-in (the same on a GPU node)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dsakit.gates import device_model
from dsakit.gates.device_model import DeviceModel
from dsakit.gates.skip_causes import table_key
from dsakit.session import RunDevice

pytestmark = pytest.mark.usefixtures("no_kernel_modules")
CPU = DeviceModel("real", "cpu", "CPU")  # what real_device() reads on a machine without a GPU


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each reading of this machine's device (its keyword arguments); the device read is CPU."""
    calls: list[dict[str, Any]] = []

    def real_device(**kwargs: Any) -> DeviceModel:
        calls.append(kwargs)
        return CPU

    monkeypatch.setattr(device_model, "real_device", real_device)
    return calls


@pytest.mark.parametrize("raw", [None, "", "real", "REAL", " Real "])
def test_every_spelling_of_real_is_this_machine(raw: str | None, readings: list[dict[str, Any]]) -> None:
    device = RunDevice(raw, allow_torch=False)
    assert (device.selected, device.simulated, device.fleet, device.plan) == ("real", None, None, None)
    assert device.model is CPU


@pytest.mark.parametrize("raw", ["sm103", "SM103", " b300 "])
def test_a_device_name_is_simulated_in_any_case(raw: str) -> None:
    device = RunDevice(raw, allow_torch=False)
    assert device.selected == "sm103" and device.simulated is not None and device.simulated.key == "sm103"


@pytest.mark.parametrize(("allow", "asked"), [(True, [{"allow_torch": True}]), (False, [{}])])
def test_device_from_torch_reaches_the_reading_of_this_machine(allow: bool, asked: list[dict[str, Any]],
                                                                readings: list[dict[str, Any]]) -> None:
    device = RunDevice(None, allow_torch=allow)
    assert device.real is CPU and device.real is CPU  # read once
    assert readings == asked


SEES_THE_OPTION = """
from dsakit.session import session_of


def test_sees(pytestconfig):
    assert session_of(pytestconfig).device.allow_torch is {expected}
"""


@pytest.mark.parametrize(("args", "env", "expected"), [
    (("--dsakit-device-from-torch",), None, True),
    ((), "1", True),
    ((), None, False),
])
def test_the_session_hands_device_from_torch_to_its_device(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                           args: tuple[str, ...], env: str | None,
                                                           expected: bool) -> None:
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    if env is None:
        monkeypatch.delenv("DSAKIT_DEVICE_FROM_TORCH", raising=False)
    else:
        monkeypatch.setenv("DSAKIT_DEVICE_FROM_TORCH", env)
    pytester.makepyfile(test_option=SEES_THE_OPTION.format(expected=expected))
    pytester.runpytest("-p", "no:cacheprovider", *args).assert_outcomes(passed=1)


GATED = """
import dsakit


@dsakit.gate("sm~10")
def test_blackwell():
    pass
"""


def test_a_real_cpu_run_is_keyed_cpu_in_the_paragraph_and_the_report(pytester: pytest.Pytester,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    readings: list[dict[str, Any]]) -> None:
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyfile(test_gated=GATED)
    result = pytester.runpytest("-p", "no:cacheprovider", "--dsakit-report", "report.json")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["why these skipped on cpu (real): sm~10 needs the SM 10.x family on NVIDIA (1)"])
    assert "skipped on real" not in result.stdout.str()
    report = json.loads((pytester.path / "report.json").read_text())
    assert (report["device"]["key"], report["device"]["table_key"]) == ("real", "cpu")


def test_the_table_key_of_a_real_device_is_its_entry() -> None:
    assert table_key(CPU.as_dict()) == "cpu"
    h200 = DeviceModel("real", "nvidia", "NVIDIA H200", (9, 0))
    assert table_key(h200.as_dict()) == "sm90"
    assert table_key(DeviceModel("real", "amd", "AMD Instinct MI300X", (9, 4), "gfx942").as_dict()) == "gfx942"
    assert table_key(DeviceModel("real", "nvidia", "NVIDIA A100", (8, 0)).as_dict()) is None  # not in the table
