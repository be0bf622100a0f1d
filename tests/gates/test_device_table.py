"""The device table (`dsakit.devices`) is the one place device facts live: the audit's static
answer and the simulation's dynamic one agree on every device x probe, and a device added as one
entry reaches gates, audit, simulation and the CLI.

Runs that enter a simulation import torch and SGLang, so they run in a subprocess.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dsakit
from dsakit.audit.command import select_devices
from dsakit.audit.device_guards import SPELLINGS, spelling_for
from dsakit.audit.guard_eval import verdict
from dsakit import devices
from dsakit.gates.device_model import SIMULATED, device_names, simulated_model, validate_device_name
from dsakit.devices import ANSWERS, DeviceEntry
from dsakit.gates.table import evaluate, known_devices_opening
from dsakit.options import OPTIONS
from dsakit.simulation import probes as device_probes

ROOT = Path(__file__).resolve().parents[2]

# A device the shipped table lacks, with a toolkit below what SGLang's SM 12.x probes need
# (is_sm120_supported: CUDA >= 12.8): the case where a probe that skips the toolkit goes wrong.
EXTRA_FACTS = ("sm121", "nvidia", "NVIDIA DGX Spark GB10", (12, 1), None, 128, "12.6", 48, ("gb10",))
EXTRA = DeviceEntry(*EXTRA_FACTS)


sglang = pytest.mark.usefixtures("installed_sglang")  # skips [sglang-not-installed] where there is none


@pytest.fixture
def extra_device(monkeypatch: pytest.MonkeyPatch) -> DeviceEntry:
    monkeypatch.setitem(devices.DEVICES, EXTRA.key, EXTRA)
    return EXTRA


def test_every_spelling_and_probe_row_asks_a_question_the_table_answers() -> None:
    for entry in SPELLINGS:
        assert entry.answer in ANSWERS, entry.spellings
    for probe in device_probes.PROBES:
        assert probe.answer is None or probe.answer in ANSWERS, probe.name
        assert (probe.answer is None) == (probe.kind == "cached"), probe.name


def test_a_constant_the_audit_can_spell_asks_what_the_simulation_patches(extra_device: DeviceEntry) -> None:
    """Static (audit) and dynamic (simulation) side of one module constant: the same value on every
    device, the added one included."""
    checked = 0
    for probe in device_probes.PROBES:
        known = spelling_for(ast.Name(probe.name))
        if probe.kind != "constant" or known is None:
            continue
        for key, device in SIMULATED.items():
            assert known.value(device) == probe.value(device), (probe.name, probe.modules, key)
            checked += 1
    assert checked >= 8 * len(SIMULATED)


# ---------------------------------------------------------------- dynamic: SGLang's own probes, simulated

_AGREEMENT = r"""
import ast, functools, json, sys, types
import dsakit
from dsakit.audit.device_guards import SPELLINGS, spelling_for
from dsakit import devices
from dsakit.gates.device_model import SIMULATED
from dsakit.devices import DeviceEntry
from dsakit.stack.sglang_release import installed_release
from dsakit.simulation import probes as device_probes

fields = json.loads(sys.argv[2])
fields[3], fields[8] = tuple(fields[3]) or None, tuple(fields[8])
devices.DEVICES[sys.argv[1]] = DeviceEntry(*fields)
release = installed_release()
sites = {(p.module, p.name): p.site for p in device_probes.scan_probes(release) if p.kind == "constant"}


def static(spelling, device):
    known = spelling_for(ast.parse(spelling, mode="eval").body)
    return None if known is None else known.value(device)


def call(fn):
    try:
        value = fn()
    except Exception:  # a CPU device: torch.cuda raises
        return None
    return list(value) if isinstance(value, tuple) else value


@functools.lru_cache(maxsize=None)
def parsed(path):  # each probe module's source once, not once per device x probe (1,240 parses: ~16 CPU-s)
    return ast.parse(open(release.package_dir.parent / path, encoding="utf-8").read())


def definition(module, name):
    return _definition(module.__name__, name)


@functools.lru_cache(maxsize=None)  # the source is the same on every device; its evaluation is not
def _definition(module_name, name):
    site = sites.get((module_name, name), "")
    path, _, line = site.rpartition(":")
    if not line.isdigit():
        return None
    tree = parsed(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and node.lineno == int(line):
            return ast.unparse(node.value)
    return None


common_spellings = [s for e in SPELLINGS for s in e.spellings if s.endswith("()")]
out = {"mismatch": [], "checked": 0, "devices": list(SIMULATED)}
for key, device in SIMULATED.items():
    with dsakit.simulate_device(key):
        from sglang.srt.utils import common
        for spelling in common_spellings:
            fn = getattr(common, spelling[:-2], None)
            if fn is None:
                continue
            got, want = call(fn), static(spelling, device)
            want = list(want) if isinstance(want, tuple) else want
            out["checked"] += 1
            if got != want:
                out["mismatch"].append([key, spelling, "sglang", got, "audit", want])
        for probe in device_probes.PROBES:
            if probe.kind != "constant" or not probe.patched:
                continue
            for name in probe.modules:
                module = sys.modules.get(name)
                if module is None or probe.name not in vars(module):
                    continue
                patched = vars(module)[probe.name]
                source = definition(module, probe.name)
                if source is not None:  # what SGLang's own definition computes under the simulation
                    computed = eval(source, dict(vars(module)))
                    out["checked"] += 1
                    if computed != patched:
                        out["mismatch"].append([key, f"{name}.{probe.name} = {source}", "computed", computed,
                                                "patched", patched])
                want = static(probe.name, device)
                if want is not None:
                    out["checked"] += 1
                    if want != patched:
                        out["mismatch"].append([key, f"{name}.{probe.name}", "patched", patched, "audit", want])
        import torch
        for fact in ("is_available", "device_count", "get_device_capability", "get_device_name",
                     "current_device"):
            got = call(getattr(torch.cuda, fact))
            want = devices.answer(f"torch.cuda.{fact}", device)
            want = list(want) if isinstance(want, tuple) else want
            out["checked"] += 1
            if got != want and not (got is None and want == "raises"):
                out["mismatch"].append([key, f"torch.cuda.{fact}()", "simulated", got, "table", want])
        hip = devices.answer("torch.version.hip", device)
        if str(torch.version.hip) != str(hip):
            out["mismatch"].append([key, "torch.version.hip", "simulated", torch.version.hip, "table", hip])
print("RESULT" + json.dumps(out, default=repr))
"""


@sglang
def test_static_and_dynamic_answers_agree_on_every_device_and_probe() -> None:
    """For every device (an added one too) and every probe: SGLang's own probe functions and the
    constants' own definitions, evaluated under the simulation, equal what the simulation patches
    and what the audit answers statically."""
    entry = [EXTRA.key, EXTRA.vendor, EXTRA.name, list(EXTRA.sm or ()), EXTRA.gfx, EXTRA.memory_gib,
             EXTRA.toolkit, EXTRA.multiprocessors, list(EXTRA.aliases)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _AGREEMENT, EXTRA.key, json.dumps(entry)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, done.stderr[-3000:]
    out = json.loads(line[len("RESULT"):])
    assert EXTRA.key in out["devices"]
    assert out["mismatch"] == []
    assert out["checked"] >= 20 * len(out["devices"])


# ---------------------------------------------------------------- adding a device is one entry


def test_a_device_added_as_one_entry_reaches_names_gates_audit_simulation_and_cli(
    extra_device: DeviceEntry, capsys: pytest.CaptureFixture[str]
) -> None:
    import dsakit.cli

    device = simulated_model("GB10")  # the alias, as a user types it
    assert device.key == "sm121" and device.sm == (12, 1) and device.toolkit == "12.6" and device.simulated
    assert "sm121" in device_names() and validate_device_name("gb10") == "sm121"
    # gates
    assert evaluate("sm~12", device).open and not evaluate("sm==12.0", device).open
    assert "sm121" in known_devices_opening(["cuda"])
    # audit: every-device selection and the guard's static answer (toolkit 12.6 < 12.8)
    assert "sm121" in select_devices(None)
    assert not verdict("is_sm120_supported()", "sm121", device).fires
    assert verdict("get_device_sm() == 121", "sm121", device).fires
    # simulation: the probe table's column and the sizing facts the simulation reads
    head = device_probes.probe_table_markdown("0.5.23").splitlines()[0]
    assert head.endswith("| cpu | sm121 |")
    assert devices.DEVICES[device.key].multiprocessors == 48
    # CLI: the help lists it (`dsakit capabilities --device gb10` resolves through simulated_model, above)
    with pytest.raises(SystemExit):
        dsakit.cli.main(["audit", "--help"])
    assert "sm121" in capsys.readouterr().out
    # the run options: --dsakit-device's help (pytest --help) names it
    assert "sm121" in next(o for o in OPTIONS if o.flag == "--dsakit-device").text


def test_pr_check_runs_the_table_s_pr_gate_devices_by_default(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import dsakit.cli
    from dsakit.compare.pr_check import parse_devices

    assert parse_devices(None) == ["sm90", "sm100", "sm103", "gfx942"]
    monkeypatch.setitem(devices.DEVICES, EXTRA.key, DeviceEntry(*EXTRA_FACTS, pr_gate=True))
    assert parse_devices(None) == ["sm90", "sm100", "sm103", "gfx942", "sm121"]
    with pytest.raises(SystemExit):
        dsakit.cli.main(["pr-check", "--help"])
    assert "default: sm90,sm100,sm103,gfx942,sm121" in " ".join(capsys.readouterr().out.split())


def test_an_unknown_device_lists_the_table_with_its_aliases(extra_device: DeviceEntry) -> None:
    with pytest.raises(dsakit.UsageError) as raised:
        simulated_model("sm999")
    message = str(raised.value)
    assert "sm121" in message and "gb10=sm121" in message and "b300=sm103" in message
