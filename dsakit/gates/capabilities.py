"""`dsakit capabilities`: the device model and every declared gate, open or closed, with reasons.

Owns the report's content and layout (text and JSON); the gates themselves live in
`dsakit.gates.table`. Never imports torch or SGLang (this machine's device is read through NVML,
nvidia-smi or rocminfo: `dsakit.gates.device_model`).
"""

from __future__ import annotations

import json
from typing import Any

from dsakit.gates.device_model import DeviceModel, resolve_device, validate_device_name
from dsakit.errors import UsageError
from dsakit.gates.table import evaluate, gate_table


def _sglang_version() -> str | None:
    from dsakit.stack.sglang_release import installed_release

    try:
        return installed_release().version
    except UsageError:
        return None


def capabilities(device: DeviceModel) -> dict[str, Any]:
    """The report as data: device, SGLang version and one row per declared gate."""
    rows = []
    for code in gate_table():
        outcome = evaluate(code, device)
        rows.append({
            "code": code,
            "kind": outcome.gate.kind,
            "open": outcome.open,
            "requirement": outcome.gate.requirement,
            "reason": outcome.reason.message if outcome.reason else None,
        })
    return {"device": device.as_dict(), "sglang": _sglang_version(), "gates": rows}


def format_capabilities(report: dict[str, Any]) -> list[str]:
    device = report["device"]
    width = max(len(row["code"]) for row in report["gates"])
    lines = [
        f"device: {device['description']}" + ("" if device["simulated"] else " [real]"),
        f"SGLang: {report['sglang'] or 'not installed'}",
        "",
        f"{'gate'.ljust(width)}  state   requirement / reason when closed",
    ]
    for row in report["gates"]:
        state = "open  " if row["open"] else "closed"
        text = row["requirement"] if row["open"] else row["reason"]
        lines.append(f"{row['code'].ljust(width)}  {state}  {text}")
    opened = sum(1 for row in report["gates"] if row["open"])
    lines.append("")
    lines.append(f"{opened} of {len(report['gates'])} gates open")
    return lines


def run_capabilities(device_name: str | None, *, as_json: bool, allow_torch: bool = False) -> int:
    device = resolve_device(validate_device_name(device_name), allow_torch=allow_torch)
    report = capabilities(device)
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print("\n".join(format_capabilities(report)))
    return 0
