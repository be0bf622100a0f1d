"""`dsakit.simulate_device`: the probe table, restore on exit and on exceptions, nesting, names,
and the pytest wiring (`simulated_device` fixture, `dsakit_simulate` marker, --dsakit-device).

Runs that enter a simulation import torch and SGLang, so they run in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dsakit
from dsakit.devices import DEVICES
from dsakit.simulation import probes as device_probes
from dsakit.stack.sglang_release import installed_release

ROOT = Path(__file__).resolve().parents[2]

sglang = pytest.mark.usefixtures("installed_sglang")  # skips [sglang-not-installed] where there is none


def test_unknown_device_is_a_usage_error_listing_the_valid_names() -> None:
    with pytest.raises(dsakit.UsageError) as raised:
        with dsakit.simulate_device("sm999"):
            pass
    message = str(raised.value)
    assert "'sm999'" in message
    for name in DEVICES:  # the device table's keys, each named
        assert name in message


@sglang
def test_the_probe_table_has_every_probe_the_scan_finds_in_the_installed_release() -> None:
    release = installed_release()
    assert device_probes.missing_probes(release) == []


@sglang
def test_a_probe_missing_from_the_table_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    dsa = "sglang.srt.layers.attention.dsa_backend"
    table = tuple(p for p in device_probes.PROBES if not (p.name == "_is_cuda" and p.modules == (dsa,)))
    monkeypatch.setattr(device_probes, "PROBES", table)
    missing = device_probes.missing_probes(installed_release())
    if installed_release().version != "0.5.23":
        pytest.skip("[sglang-release] the dropped row is the 0.5.23 dsa_backend._is_cuda")
    assert [(m.module, m.name) for m in missing] == [("sglang.srt.layers.attention.dsa_backend", "_is_cuda")]
    assert "dsa_backend.py:" in missing[0].site


def test_the_reference_probe_tables_match_the_code() -> None:
    page = (ROOT / "docs" / "reference" / "simulated-probes.md").read_text(encoding="utf-8")
    for version in ("0.5.17", "0.5.23"):
        assert device_probes.probe_table_markdown(version) in page, (
            f"docs/reference/simulated-probes.md's {version} probe table drifted: regenerate it with "
            f"`python -c 'from dsakit.simulation.probes import probe_table_markdown as t; print(t(\"{version}\"))'`")


_SCRIPT = r"""
import json, torch, dsakit
from dsakit.simulation import probe_patches as sim
from sglang.srt.utils import common
from sglang.srt.layers.attention import dsa_backend as dsa
from sglang.srt.layers.attention import trtllm_mla_backend as trt
from sglang.srt.runtime_context import get_context

def facts():
    return [torch.cuda.is_available(), torch.version.cuda, torch.version.hip, common.is_cuda(), common.is_hip(),
            common.is_sm100_supported(), common.get_device_sm(), dsa._is_hip, dsa._IS_GFX95,
            trt._multi_ctas_kv_counter_bytes.__qualname__,
            repr(vars(dsa).get("resolve_num_sms") or vars(dsa).get("deep_gemm")),  # 0.5.23 / 0.5.17
            id(get_context().resources.buffers), sorted(get_context().resources.buffers)]

out = {"before": facts()}
for name in ("sm103", "gfx950"):
    try:
        with dsakit.simulate_device(name) as device:
            out[name] = facts()
            get_context().resources.buffers["dsakit-test"] = 1
            with dsakit.simulate_device("sm90"):  # nests: the inner device answers until it exits
                out[name + "-nested"] = [list(torch.cuda.get_device_capability()), sim.active_simulation().key]
            out[name + "-outer-again"] = [list(torch.cuda.get_device_capability()), sim.active_simulation().key]
            raise KeyError("boom")
    except KeyError:
        pass
    out[name + "-after"] = facts()
    out[name + "-active"] = sim.active_simulation() is not None
print("RESULT" + json.dumps(out))
"""


@sglang
def test_simulation_answers_as_the_device_and_restores_everything_even_on_exceptions() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env,
                          timeout=600, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, done.stderr[-3000:]
    out = json.loads(line[len("RESULT"):])
    before = out["before"]
    # (is_available, version.cuda, version.hip, is_cuda, is_hip, is_sm100, sm, dsa._is_hip, _IS_GFX95)
    # torch.version.cuda stays the torch build's (a B300 running this torch reports it too)
    assert out["sm103"][:9] == [True, before[1] or "12.9", None, True, False, True, 103, False, False]
    assert out["gfx950"][:9] == [True, None, "7.0", False, True, False, 95, True, True]
    for name in ("sm103", "gfx950"):
        assert out[name][9] != before[9] and out[name][10] != before[10], "sizing helper and kernel guard patched"
        assert out[name][11] != before[11], "the get_buffer registry is isolated inside the simulation"
        assert out[f"{name}-after"] == before, f"{name} left state behind: {out[f'{name}-after']} != {before}"
        assert not out[f"{name}-active"]
        assert out[f"{name}-nested"] == [[9, 0], "sm90"]
        assert out[f"{name}-outer-again"] == [list(divmod(out[name][6], 10)), name]  # the outer device again


# ---------------------------------------------------------------- pytest wiring (no SGLang needed)

_WIRING = """
import pytest

@pytest.mark.dsakit_simulate("sm90", "b300")
def test_marked(simulated_device):
    pass

def test_unmarked(simulated_device):
    pass
"""


def test_marker_parametrizes_over_devices(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_WIRING)
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*test_marked?device=sm90?", "*test_marked?device=sm103?", "*test_unmarked"])


def test_dsakit_device_narrows_the_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_WIRING)
    result = pytester.runpytest("--collect-only", "-q", "--dsakit-device", "sm103")
    result.stdout.fnmatch_lines(["*test_marked?device=sm103?"])
    assert "device=sm90" not in result.stdout.str()


def test_a_marker_naming_other_devices_nests_them_inside_the_runs_device(pytester: pytest.Pytester) -> None:
    """Simulations nest (README): a marker's devices the run's device is not among are each
    simulated inside it (before: dropped, `[NOTSET]`, "got empty parameter set")."""
    pytester.makepyfile(_WIRING)
    result = pytester.runpytest("--collect-only", "-q", "--dsakit-device", "sm90", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_marked?device=sm90?"])  # the run's device, named: narrowed to it
    pytester.makepyfile(test_other='import pytest\n\n@pytest.mark.dsakit_simulate("b300", "gfx942")\n'
                                   'def test_nested(simulated_device):\n    pass\n')
    result = pytester.runpytest("--collect-only", "-q", "--dsakit-device", "sm90", "test_other.py",
                                "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*test_nested?device=sm103?", "*test_nested?device=gfx942?"])
    assert "NOTSET" not in result.stdout.str()


NESTED = """
import pytest


@pytest.mark.dsakit_simulate("sm103")
def test_nested(simulated_device, request):
    assert simulated_device.key == "sm103" and request.node.callspec.id == "device=sm103"
"""


def test_a_nested_marker_device_runs_under_a_whole_run_and_in_a_fleet(pytester: pytest.Pytester,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyfile(test_nested=NESTED)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dsakit-device", "sm90").assert_outcomes(passed=1)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--dsakit-device", "sm90,sm103")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(["dsakit fleet: sm90 (simulated sm90): 1 passed*",
                                 "dsakit fleet: sm103 (simulated sm103): 1 passed*"])


def test_the_ini_device_is_the_fixtures_device(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """`dsakit_device = "sm103"` in the ini simulates the whole run, so an unmarked `simulated_device`
    is that device, as with --dsakit-device sm103 (before: it skipped, "needs a simulated device")."""
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ndsakit_device = "sm103"\n')
    pytester.makepyfile(test_ini="def test_unmarked(simulated_device):\n    assert simulated_device.key == 'sm103'\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1)
    assert "simulation-not-selected" not in result.stdout.str()


def test_fixture_without_a_device_skips_with_a_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(_WIRING)
    result = pytester.runpytest("-rs", "-k", "unmarked")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*simulation-not-selected*--dsakit-device NAME*"])


def test_unknown_device_in_the_marker_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
import pytest

@pytest.mark.dsakit_simulate("sm999")
def test_bad(simulated_device):
    pass
""")
    result = pytester.runpytest("--collect-only")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*unknown dsakit device 'sm999'*"])


def test_kernels_are_guarded_except_on_this_machines_own_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A simulated sm90 on an sm90 machine (an H200) runs its kernels for real; sm103 there, and any
    GPU on this CPU box, refuses them with [simulated-kernel-launch]."""
    dsa = pytest.importorskip("sglang.srt.layers.attention.dsa_backend")
    if "resolve_num_sms" not in vars(dsa):
        pytest.skip("[sglang:dsa-resolve-num-sms] this SGLang's dsa_backend has no resolve_num_sms to guard")
    from dsakit.simulation import probe_patches as sim

    import importlib

    kops = importlib.import_module(sim.KOPS)
    real = vars(dsa)["resolve_num_sms"]
    bound = {name: vars(module).get(name) for module, name in ((dsa, "deep_gemm"), (kops, "flash_mla_interface"))}
    with dsakit.simulate_device("sm90"):
        assert vars(dsa)["resolve_num_sms"] is not real  # this box is no sm90: guarded
        assert vars(kops).get("flash_mla_interface") is not bound["flash_mla_interface"]  # a stand-in
    monkeypatch.setattr(sim, "real_device", lambda: sim.simulated_model("sm90"))
    with dsakit.simulate_device("sm90"):
        assert vars(dsa)["resolve_num_sms"] is real
        # the names its import bound on the real host stay (DeepGEMM, FlashMLA): they are this arch's
        assert {"deep_gemm": vars(dsa).get("deep_gemm"),
                "flash_mla_interface": vars(kops).get("flash_mla_interface")} == bound
    with dsakit.simulate_device("sm103"):
        with pytest.raises(sim.SimulatedKernelLaunch, match=r"\[simulated-kernel-launch\].*simulated sm103"):
            vars(dsa)["resolve_num_sms"]()
    assert vars(dsa)["resolve_num_sms"] is real
