"""The device model: simulated profiles, selection by name or env, the lazy reading of this machine's device."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.gates import device_model
from dsakit.devices import DEVICES
from dsakit.gates.device_model import SIMULATED, resolve_device, simulated_model, validate_device_name
from dsakit.errors import UsageError


def test_simulated_profiles_cover_the_supported_fleet() -> None:
    assert list(SIMULATED) == ["sm90", "sm100", "sm103", "sm120", "gfx90a", "gfx942", "gfx950", "cpu"]
    assert all(d.simulated for d in SIMULATED.values())
    reported = {key: (d.vendor, d.sm, d.gfx) for key, d in SIMULATED.items()}
    assert reported == {
        "sm90": ("nvidia", (9, 0), None),
        "sm100": ("nvidia", (10, 0), None),
        "sm103": ("nvidia", (10, 3), None),
        "sm120": ("nvidia", (12, 0), None),
        # MI200 reports the same number as Hopper; MI355 reports 9.5: both carry their gfx arch
        "gfx90a": ("amd", (9, 0), "gfx90a"),
        "gfx942": ("amd", (9, 4), "gfx942"),
        "gfx950": ("amd", (9, 5), "gfx950"),
        "cpu": ("cpu", None, None),
    }


def test_describe_names_device_and_simulation() -> None:
    assert SIMULATED["sm90"].describe() == "NVIDIA H200 (SM 9.0, CUDA 12.8, 141 GiB) [simulated sm90]"
    assert SIMULATED["gfx90a"].describe() == "AMD Instinct MI250X (gfx90a, reports 9.0, HIP 6.3, 64 GiB) [simulated gfx90a]"
    assert SIMULATED["cpu"].describe() == "CPU (no CUDA or ROCm GPU) [simulated cpu]"
    data = SIMULATED["sm103"].as_dict()
    assert data["sm"] == "10.3" and data["simulated"] is True and "B300" in data["description"]


def test_aliases_and_case() -> None:
    assert simulated_model("H200").key == "sm90"
    assert simulated_model("b300").key == "sm103"
    assert simulated_model("MI355").key == "gfx950"


def test_unknown_device_lists_the_valid_names() -> None:
    with pytest.raises(UsageError) as info:
        simulated_model("sm91")
    message = str(info.value)
    assert "unknown dsakit device 'sm91'" in message
    for name in ("real", *DEVICES):  # every key of the device table
        assert name in message


def test_option_beats_env_and_env_beats_real(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAKIT_DEVICE", "gfx942")
    assert validate_device_name(None) == "gfx942"
    assert resolve_device(None).key == "gfx942"
    assert validate_device_name("sm100") == "sm100"
    monkeypatch.setenv("DSAKIT_DEVICE", "nope")
    with pytest.raises(UsageError):
        validate_device_name(None)
    monkeypatch.delenv("DSAKIT_DEVICE")
    assert validate_device_name(None) == "real"


def _fake_tool(directory: Path, name: str, output: str) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}\nOUT\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)


def test_nvidia_smi_reading_gets_capability_without_cuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_tool(tmp_path, "nvidia-smi", "NVIDIA H200, 143771, 9.0\nNVIDIA H200, 143771, 9.0")
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    found = device_model._read_nvidia_smi()
    assert found is not None
    assert (found.vendor, found.name, found.sm, found.device_count, found.simulated) == (
        "nvidia", "NVIDIA H200", (9, 0), 2, False)
    assert found.memory_bytes == 143771 << 20


def test_rocminfo_reading_gets_the_gfx_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = "*******\nAgent 2\n*******\n  Name:                    gfx942\n  Marketing Name:          AMD Instinct MI300X\n  Device Type:             GPU\n"
    cpu = "*******\nAgent 1\n*******\n  Name:                    AMD EPYC\n  Device Type:             CPU\n"
    _fake_tool(tmp_path, "rocminfo", cpu + agent)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    found = device_model._read_rocminfo()
    assert found is not None
    assert (found.vendor, found.gfx, found.sm, found.name) == ("amd", "gfx942", (9, 4), "AMD Instinct MI300X")


def test_gfx_capability_matches_what_torch_reports() -> None:
    assert device_model._gfx_capability("gfx90a") == (9, 0)
    assert device_model._gfx_capability("gfx942") == (9, 4)
    assert device_model._gfx_capability("gfx950") == (9, 5)


def test_no_tools_means_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(device_model, "_read_nvml", lambda: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    device_model.real_device.cache_clear()
    try:
        found = device_model.real_device()
    finally:
        device_model.real_device.cache_clear()
    assert (found.vendor, found.key, found.simulated) == ("cpu", "real", False)


def test_nothing_heavy_is_imported_by_the_plugin_or_a_simulated_device() -> None:
    code = (
        "import sys, dsakit.plugin, dsakit.gates.table, dsakit.gates.marks, dsakit.gates.inventory\n"
        "from dsakit.gates.device_model import resolve_device\n"
        "from dsakit.gates.table import closed_reasons, gate_table\n"
        "closed_reasons(list(gate_table()), resolve_device('sm90'))\n"
        "heavy = [m for m in ('torch', 'sglang', 'pynvml') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
