"""Contract suite: SGLang's hardware branches on any machine, per simulated device x role.

Under `dsakit.simulate_device(...)` the real backends take the SM 10.x / 12.x / AMD branch. Each
device builds the real DeepseekSparseAttnBackend (and the DeepSeek-V4 backend SGLang's registry
picks) (a) from the full strict mock and (b) with each device-conditional contract entry omitted:
where the device reads it, ContractViolation names the entry, the reading file:line and the
device (the B300 trap: fine on sm90, fails on sm103); elsewhere it constructs. Kernels skip.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest

import dsakit
from dsakit.backends.batch_builder import BatchShape, build_forward_batch
from dsakit.backends.dsa_invariants import check_dsa_metadata
from dsakit.backends.harness import (
    DEEPSEEK_V4_RUNNER_OVERRIDES,
    deepseek_v4_kv_pool,
    dsa_backend,
    full_to_swa_mapping,
)
from dsakit.contracts.model_runner_contract import DSA, HIP_RADIX, MODEL_RUNNER_CONTRACT
from dsakit.contracts.schema import ContractEntry
from dsakit.gates.device_model import DeviceModel, real_device
from dsakit.gates.table import evaluate
from dsakit.mocks import read_log
from dsakit.simulation.probe_patches import SimulatedKernelLaunch, active_simulation, is_this_machine

pytestmark = [pytest.mark.dsakit_simulate(), dsakit.gate("sglang:dsa-backend")]

DSV4 = "DeepseekV4AttnBackend"


def _topk_args() -> dict[str, str]:
    """torch top-k for both roles: the default sgl-kernel backend plans top-k with a JIT kernel."""
    from dsakit.stack.sglang_release import installed_release

    args = {"dsa_topk_backend": "torch"}
    if installed_release().has("topk-role-split"):
        args["speculative_dsa_topk_backend"] = "torch"
    return args


def conditional_entries(backend: str) -> list[ContractEntry]:
    """Entries the contract declares as read by `backend` only on some devices."""
    return [e for e in MODEL_RUNNER_CONTRACT if any(b == backend for b, _ in e.device_reads)]


def reads_on(entry: ContractEntry, backend: str, device: DeviceModel) -> bool:
    """Does `backend` read `entry` on `device`? Every gate of one of its declared conditions opens."""
    return any(b == backend and all(evaluate(code, device).open for code in codes)
               for b, codes in entry.device_reads)


@functools.lru_cache(maxsize=1)
def _conditional_read_sites() -> dict[str, set[str]]:
    """path -> file:line of every device-conditional read the source scan finds in this SGLang."""
    from dsakit.stack.sglang_release import installed_release
    from dsakit.sglang_facts.backend_reads import scan_runner_reads

    sites: dict[str, set[str]] = {}
    for read in scan_runner_reads(installed_release()):
        if read.hardware_conditional and not read.soft:
            sites.setdefault(read.path, set()).add(str(read.site))
    return sites


@pytest.fixture
def no_new_violations() -> Iterator[None]:
    before = len(read_log.contract_reads())
    yield
    hard = [r for r in read_log.contract_reads()[before:] if r.kind != read_log.SOFT]
    assert hard == [], f"contract violations during construction: {hard}"


def _runner(role: str, **kwargs: Any) -> dsakit.MockModelRunner:
    return dsakit.MockModelRunner(role, device=_tensor_device(), **kwargs)


def _tensor_device() -> str:
    """Where the backend's tensors live: the GPU when the simulated device is this machine's own
    arch (sm90 on an H200: its kernels really run there), else the CPU (inside a GPU simulation
    torch.cuda.is_available() says True, but no kernel runs)."""
    simulated = active_simulation()
    return "cuda" if simulated is not None and is_this_machine(simulated, real_device()) else "cpu"


def _needs_gpu_profile(device: DeviceModel) -> None:
    if not device.is_gpu:
        pytest.skip(str(dsakit.Reason(
            "simulated-no-gpu", "DeepseekSparseAttnBackend.__init__ needs a CUDA or ROCm device "
            "(torch.cuda.get_device_capability); test_dsa_needs_a_gpu covers simulated cpu")))


def _assert_violation(raised: Any, entry: ContractEntry, device: DeviceModel) -> None:
    violation = raised.value
    message = str(violation)
    assert violation.attribute == entry.path
    assert violation.device == device.key
    assert f"simulated {device.key}" in message
    site = violation.reading_site.split(" in ")[0]
    assert site in message


# ---------------------------------------------------------------- DeepseekSparseAttnBackend


def test_dsa_constructs_from_the_full_mock(
    simulated_device: DeviceModel, model_runner_role: str, no_new_violations: None
) -> None:
    _needs_gpu_profile(simulated_device)
    runner = _runner(model_runner_role)
    with dsa_backend(runner) as backend:
        assert simulated_device.sm is not None
        assert backend.device_sm_major == simulated_device.sm[0]
        # the branch the device took is visible in what __init__ built
        trtllm = reads_on(MODEL_RUNNER_CONTRACT.entries["max_running_requests"], DSA, simulated_device)
        assert (backend._multi_ctas_kv_counter_buffer is not None) is trtllm
        assert hasattr(backend, "kv_indptr") is (simulated_device.vendor == "amd")


def test_dsa_needs_a_gpu(simulated_device: DeviceModel) -> None:
    """Simulated cpu: the real backend refuses, as it does on a host without CUDA or ROCm."""
    if simulated_device.is_gpu:
        pytest.skip(str(dsakit.Reason("simulated-gpu", "only the simulated cpu has no device capability")))
    with pytest.raises(RuntimeError, match="get_device_capability"):
        with dsa_backend(_runner("target")):
            pass


@pytest.mark.parametrize("entry", conditional_entries(DSA), ids=lambda e: e.path)
def test_dsa_without_a_device_conditional_entry(
    simulated_device: DeviceModel, model_runner_role: str, entry: ContractEntry
) -> None:
    _needs_gpu_profile(simulated_device)
    runner = _runner(model_runner_role, omit=[entry.path])
    if not reads_on(entry, DSA, simulated_device):
        with dsa_backend(runner) as backend:  # not read on this device: a mock without it passes here
            assert backend.device_sm_major == (simulated_device.sm or (0, 0))[0]
        return
    with pytest.raises(dsakit.ContractViolation) as raised:
        with dsa_backend(runner):
            pass
    _assert_violation(raised, entry, simulated_device)
    # the read is one the source scan finds, guarded by the device
    site = raised.value.reading_site.split(" in ")[0]  # absolute where SGLang is not in site-packages
    scanned = _conditional_read_sites().get(entry.path, set())
    assert any(site == s or site.endswith("/" + s) for s in scanned), (site, scanned)


SHAPES = {
    "extend": BatchShape("extend", (17, 64, 130), prefix_lens=(0, 32, 64)),
    "decode": BatchShape("decode", (17, 64, 100)),
}


@pytest.mark.parametrize("mode", list(SHAPES))
def test_dsa_forward_metadata(simulated_device: DeviceModel, model_runner_role: str, mode: str) -> None:
    """init_forward_metadata on the device's branch; where it would launch a kernel, the skip says so."""
    _needs_gpu_profile(simulated_device)
    shape = SHAPES[mode]
    runner = _runner(model_runner_role, max_running_requests=16, model_config__context_len=4096)
    with dsa_backend(runner, server_args=_topk_args()) as backend:
        batch, placement = build_forward_batch(runner, shape, seed=7)
        try:
            backend.init_forward_metadata(batch)
        except SimulatedKernelLaunch as launch:
            pytest.skip(str(launch.reason))
        reasons = check_dsa_metadata(backend.forward_metadata, shape, placement, runner,
                                     index_topk=backend.dsa_index_topk)
    assert reasons == [], "\n".join(map(str, reasons))


# ---------------------------------------------------------------- DeepSeek-V4 (the registry's class)


def _dsv4_from_registry(role: str, **kwargs: Any) -> Any:
    """The DeepSeek-V4 backend SGLang's own factory builds for the device (HIP: the radix backend)."""
    import torch
    from sglang.srt.layers.attention.attention_registry import create_dsv4_backend

    from dsakit.sglang_facts.scope import SGLangScope

    overrides = {**DEEPSEEK_V4_RUNNER_OVERRIDES, "kv_cache_dtype": torch.float8_e4m3fn}
    with SGLangScope(server_args={"model_path": "dsakit/mock-deepseek-v4", **_topk_args()}):
        runner = _runner(role, overrides=overrides, **kwargs)
        runner.token_to_kv_pool = deepseek_v4_kv_pool(runner)
        runner.token_to_kv_pool.register_mapping(full_to_swa_mapping(runner))
        return create_dsv4_backend(runner)


def _dsv4_class(device: DeviceModel) -> str:
    return HIP_RADIX if device.vendor == "amd" else DSV4


def _dsv4_refuses_without_a_gpu(device: DeviceModel, role: str, **kwargs: Any) -> bool:
    """Simulated cpu on a release whose DeepSeek-V4 backend asks the device capability unguarded
    (0.5.21): the real backend refuses, as on a host without CUDA. True when it checked that."""
    from dsakit.stack.sglang_release import installed_release

    if device.is_gpu or installed_release().has("dsv4-builds-without-gpu"):
        return False
    with pytest.raises(RuntimeError, match="get_device_capability"):
        _dsv4_from_registry(role, **kwargs)
    return True


def test_dsv4_constructs_from_the_full_mock(
    simulated_device: DeviceModel, model_runner_role: str, no_new_violations: None
) -> None:
    dsakit.require("sglang:deepseek-v4-backend")
    if _dsv4_refuses_without_a_gpu(simulated_device, model_runner_role):
        return
    backend = _dsv4_from_registry(model_runner_role)
    assert type(backend).__name__ == _dsv4_class(simulated_device)


@pytest.mark.parametrize("entry", conditional_entries(HIP_RADIX), ids=lambda e: e.path)
def test_dsv4_without_a_device_conditional_entry(
    simulated_device: DeviceModel, model_runner_role: str, entry: ContractEntry
) -> None:
    dsakit.require("sglang:deepseek-v4-backend")
    if _dsv4_refuses_without_a_gpu(simulated_device, model_runner_role, omit=[entry.path]):
        return
    if not reads_on(entry, HIP_RADIX, simulated_device):
        backend = _dsv4_from_registry(model_runner_role, omit=[entry.path])
        assert type(backend).__name__ == _dsv4_class(simulated_device)
        return
    with pytest.raises(dsakit.ContractViolation) as raised:
        _dsv4_from_registry(model_runner_role, omit=[entry.path])
    _assert_violation(raised, entry, simulated_device)
    assert "deepseek_v4_backend_hip_radix.py:" in raised.value.reading_site
