"""`dsakit report merge` over the reports' `device_branches` sections (issue 42 item 3): per simulated
device, a branch ran if it ran in any shard or host; one that ran nowhere keeps the reason of the run
that got furthest; the text, the markdown and the JSON count and list them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())
pytestmark = pytest.mark.usefixtures("no_kernel_modules")
FILE = "srt/layers/attention/dsa_backend.py"


def _branch(line: int, guard: str, status: str, code: str | None = None, message: str = "") -> dict[str, Any]:
    return {"site": f"sglang/{FILE}:{line}", "file": FILE, "line": line, "end": line + 3, "guard": guard,
            "function": "Backend.f", "takes": "body", "status": status, "why": message,
            "reason": {"code": code, "message": message} if code else None}


def _template(pytester: pytest.Pytester) -> dict[str, Any]:
    pytester.makepyfile(test_suite="def test_x():\n    pass\n")
    report = pytester.path / "good.json"
    pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu", f"--dsakit-report={report}")
    return dict(json.loads(report.read_text()))


def _report(template: dict[str, Any], pytester: pytest.Pytester, name: str, host: str, device: str,
            branches: list[dict[str, Any]], shard: tuple[int, int] | None = None) -> Path:
    path = pytester.path / name
    section = {"device": device, "real": "CPU (no CUDA or ROCm GPU)", "watched": True, "why_not_watched": "",
               "ran": sum(b["status"] == "ran" for b in branches), "total": len(branches), "branches": branches}
    data = {**template, "host": host, "device": {**template["device"], "key": device, "simulated": True,
                                                 "description": f"simulated {device}"},
            "device_branches": section}
    if shard:
        data["shard"] = {"group": shard[0], "splits": shard[1]}
    path.write_text(json.dumps(data))
    return path


def test_branches_merge_per_device_over_shards_and_hosts(pytester: pytest.Pytester) -> None:
    from tests.conftest import _dsakit_in_process

    template = _template(pytester)
    never = "Backend.f() never ran: the suite never builds that configuration"
    shard1 = _report(template, pytester, "g1.json", "h200", "sm103", [
        _branch(10, "self.device_sm_major >= 10", "ran"),
        _branch(20, "is_sm100_supported()", "not-reached", "configuration-never-built", never),
        _branch(30, "_is_cuda", "other-arm", "probe-cached-before-simulation", "`_is_cuda` ... holds False"),
    ], (1, 2))
    shard2 = _report(template, pytester, "g2.json", "h200", "sm103", [
        _branch(10, "self.device_sm_major >= 10", "not-reached", "configuration-never-built", never),
        _branch(20, "is_sm100_supported()", "not-reached", "guard-not-reached", "the gate was never reached: ..."),
        _branch(30, "_is_cuda", "not-reached", "configuration-never-built", never),
    ], (2, 2))
    other = _report(template, pytester, "ci.json", "ci", "sm100", [_branch(20, "is_sm100_supported()", "ran")])
    done = _dsakit_in_process(pytester.path, "report", "merge", str(shard1), str(shard2), str(other),
                              "--json", "m.json", "--markdown", "m.md")
    assert done.returncode == 0, done.stdout + done.stderr
    merged = json.loads((pytester.path / "m.json").read_text())["device_branches"]
    assert sorted(merged) == ["sm100", "sm103"]
    sm103 = merged["sm103"]
    assert (sm103["nodes"], sm103["reports"], sm103["ran"], sm103["total"]) == (["h200 (sm103 simulated)"], 2, 1, 3)
    assert [(b["line"], b["status"], (b["reason"] or {}).get("code")) for b in sm103["branches"]] == [
        (10, "ran", None),  # ran in shard 1: it ran
        (20, "never-ran", "guard-not-reached"),  # shard 2 got further than shard 1
        (30, "never-ran", "probe-cached-before-simulation"),
    ]
    assert merged["sm100"]["ran"] == 1 and merged["sm100"]["nodes"] == ["ci (sm100 simulated)"]
    out = done.stdout
    assert ("device branches under simulated sm103 (3 that it decides otherwise than CPU (no CUDA or ROCm GPU); "
            "2 report(s): h200 (sm103 simulated)): 1 ran, 2 never ran (probe-cached-before-simulation 1, "
            "guard-not-reached 1)") in out
    assert any(line.startswith("sm103 ") and "sglang/srt/layers/attention/dsa_backend.py:20  " in line
               and line.endswith("if is_sm100_supported() -> body: [guard-not-reached] the gate was never reached: ...")
               for line in out.splitlines())
    assert not any(line.startswith("sm103 ") and "dsa_backend.py:10 " in line for line in out.splitlines())  # it ran
    markdown = (pytester.path / "m.md").read_text()
    assert "### Device branches that never ran" in markdown
    assert any(row.startswith("| sm103 |") and "| 1 | 2 | probe-cached-before-simulation 1, guard-not-reached 1 |" in row
               for row in markdown.splitlines())


def test_reports_without_the_section_merge_as_before(pytester: pytest.Pytester) -> None:
    from tests.conftest import _dsakit_in_process

    template = _template(pytester)
    path = pytester.path / "plain.json"
    path.write_text(json.dumps(template))
    done = _dsakit_in_process(pytester.path, "report", "merge", str(path), "--json", "m.json")
    assert done.returncode == 0 and "device branches" not in done.stdout
    assert json.loads((pytester.path / "m.json").read_text())["device_branches"] == {}
