"""`dsakit capabilities`: the device model and the gate table, as text and JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dsakit.cli import main
from dsakit.gates.table import gate_table

# `main(["capabilities", ...])` runs in this test's process, which is a pytest session; the command
# runs in its own process, where the sglang:import-chain gate does not import SGLang
pytestmark = pytest.mark.usefixtures("as_its_own_process")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["capabilities", *argv, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_text_report_for_b300(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capabilities", "--device", "sm103"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "device: NVIDIA B300 (SM 10.3, CUDA 12.9, 288 GiB) [simulated sm103]"
    assert lines[1].startswith("SGLang: ")
    rows = {line.split()[0]: line.split()[1] for line in lines[4:] if line and not line[0].isdigit()}
    assert list(rows) == list(gate_table())
    assert rows["trtllm-dsa-decode"] == "open" and rows["flashinfer-gvr-topk"] == "open"
    assert rows["fa3"] == "closed" and rows["aiter"] == "closed"
    fa3 = next(line for line in lines if line.startswith("fa3 "))
    assert "needs exactly SM 9.x on NVIDIA" in fa3 and "trtllm-dsa-decode and flashmla-sparse cover" in fa3
    assert lines[-1].endswith(f"of {len(gate_table())} gates open")


@pytest.mark.parametrize(
    ("device", "opened"),
    [
        ("sm90", {"cuda", "fp8-kv", "topk-v2-cluster", "cuda-graphs"}),
        ("gfx90a", {"rocm", "cuda-graphs"}),
        ("gfx950", {"rocm", "aiter", "fp8-kv", "cuda-graphs"}),
        ("cpu", set()),
    ],
)
def test_json_report(capsys: pytest.CaptureFixture[str], device: str, opened: set[str]) -> None:
    data = _json(capsys, "--device", device)
    assert isinstance(data["device"], dict) and data["device"]["key"] == device
    rows = data["gates"]
    assert isinstance(rows, list)
    plain_device_gates = {"cuda", "rocm", "trtllm-dsa-decode", "flashinfer-gvr-topk", "aiter", "fp8-kv",
                          "topk-v2-cluster", "cuda-graphs"}
    assert {row["code"] for row in rows if row["open"] and row["code"] in plain_device_gates} == opened
    for row in rows:
        assert (row["reason"] is None) == row["open"]


def test_env_var_and_unknown_device(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAKIT_DEVICE", "mi355")
    data = _json(capsys)
    assert isinstance(data["device"], dict) and data["device"]["key"] == "gfx950"
    assert main(["capabilities", "--device", "h300"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsakit: error: unknown dsakit device 'h300'; valid names: real")


def test_real_device_on_this_machine() -> None:
    # A subprocess: reading the real device must not import torch to describe the device.
    code = (
        "import sys, json, contextlib, io\n"
        "from dsakit.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    assert main(['capabilities', '--json']) == 0\n"
        "data = json.loads(out.getvalue())\n"
        "assert data['device']['simulated'] is False and data['device']['key'] == 'real'\n"
        "assert 'torch' not in sys.modules\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "DSAKIT_DEVICE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("flag", ["--device-from-torch", "--probe-torch"])
def test_torch_may_name_the_device_under_the_new_flag_and_the_old(flag: str, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import dsakit.gates.capabilities as capabilities

    asked: list[bool] = []
    monkeypatch.setattr(capabilities, "run_capabilities",
                        lambda device, *, as_json, allow_torch: asked.append(allow_torch) or 0)
    assert main(["capabilities", flag]) == 0 and asked == [True]
