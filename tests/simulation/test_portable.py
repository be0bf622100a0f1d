"""A simulated device on a GPU of its vendor (a portable plan): two views of one device, arch-only
kernels refused from the declared table, everything else launched for real (issue 35).

The plan's pieces are checked here in-process on their own (this box has no GPU: what "the real
GPU" answers is a stand-in function); tests/simulation/test_outcomes.py runs them through pytest.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from dsakit.gates.device_model import simulated_model
from dsakit.simulation import kernel_archs
from dsakit.simulation.kernel_archs import ARCH_ONLY, KernelFamily
from dsakit.stack.import_hooks import Patches
from dsakit.simulation.probe_patches import SimulatedKernelAbsent, SimulatedKernelLaunch

HAS_TORCH = importlib.util.find_spec("torch") is not None
if HAS_TORCH:
    # imported while this module is collected: an in-process pytester run elsewhere in the worker then
    # finds torch imported and keeps it (a torch it dropped cannot be imported again in one process)
    importlib.import_module("torch")

FAMILY = KernelFamily("sm10x-only", "an SM 10.x kernel", ("sm100", "sm103"), "tcgen05 instructions",
                      entry_points=("fake_lib:launch",), jit_names=(r"sm100_thing",))


# ---------------------------------------------------------------- the declared table


@pytest.mark.parametrize(("simulated", "real", "verdict"), [
    ("sm103", "sm100", "run"),      # both have it: it launches here
    ("sm103", "sm90", "refuse"),    # the B300 has it, this H200 not: a skip
    ("sm103", None, "refuse"),      # no GPU of the vendor here
    ("sm90", "sm90", "absent"),     # the simulated device has no such kernel: a real one fails
    ("sm120", "sm100", "absent"),
])
def test_a_family_runs_where_both_devices_have_it(simulated: str, real: str | None, verdict: str) -> None:
    assert FAMILY.verdict(simulated, real) == verdict


def test_every_family_names_devices_of_the_device_table_and_entry_points_as_module_colon_function() -> None:
    from dsakit.devices import DEVICES

    for family in ARCH_ONLY:
        assert family.devices and set(family.devices) <= set(DEVICES), family.key
        assert all(entry.count(":") == 1 and all(entry.split(":")) for entry in family.entry_points), family.key
        assert family.why and family.name
    assert len({f.key for f in ARCH_ONLY}) == len(ARCH_ONLY)


def test_jit_names_and_no_image_messages_are_recognised() -> None:
    assert kernel_archs.family_of_jit("fmha_cutlass_sm100a_bf16").key == "sm100-jit"
    assert kernel_archs.family_of_jit("trtllm_gen_fmha").key == "trtllm-gen"
    assert kernel_archs.family_of_jit("dsa_topk_v2") is None  # portable: built for this GPU
    assert kernel_archs.is_no_image("CUDA error: no kernel image is available for execution on the device")
    assert kernel_archs.is_no_image("RuntimeError: Missing TRTLLM-GEN kernel for sm_103")
    assert not kernel_archs.is_no_image("CUDA error: an illegal memory access was encountered")  # a fault fails


def test_this_machines_gpu_is_named_by_its_device_table_key() -> None:
    assert kernel_archs.real_key("nvidia", (9, 0), None) == "sm90"
    assert kernel_archs.real_key("nvidia", (10, 3), None) == "sm103"
    assert kernel_archs.real_key("amd", (9, 4), "gfx942") == "gfx942"
    assert kernel_archs.real_key("nvidia", (8, 0), None) is None  # an A100: not in the table
    assert kernel_archs.real_key("cpu", None, None) is None


# ---------------------------------------------------------------- two views of one device


def _frame_in(path: str) -> types.FunctionType:
    """A function whose frames say they are in `path` (as Triton's or SGLang's would)."""
    namespace: dict[str, object] = {}
    exec(compile("def ask(query, *args):\n    return query(*args)\n", path, "exec"), namespace)  # noqa: S102
    return namespace["ask"]  # type: ignore[return-value]


@pytest.mark.parametrize(("path", "sees"), [
    ("/site-packages/triton/backends/nvidia/driver.py", "real"),
    ("/site-packages/sglang/kernels/jit/utils/arch.py", "real"),
    ("/site-packages/flashinfer/compilation_context.py", "real"),
    ("/site-packages/torch/utils/cpp_extension.py", "real"),
    ("/site-packages/sglang/srt/layers/attention/dsa_backend.py", "simulated"),
    ("/home/me/tests/test_backend.py", "simulated"),
])
def test_the_toolchain_sees_the_real_gpu_and_everything_else_the_simulated_one(path: str, sees: str) -> None:
    from dsakit.simulation.runtime import _two_views

    query = _two_views(lambda: "simulated", lambda: "real")
    assert _frame_in(path)(query) == sees


def test_a_query_helper_answers_for_its_caller() -> None:
    """flashinfer.utils.get_device_sm_count asked by SGLang: the simulated SM count; by flashinfer
    itself (sizing its own launch): this GPU's."""
    from dsakit.simulation.runtime import _two_views

    query = _two_views(lambda: 148, lambda: 132)
    helper = _frame_in("/site-packages/flashinfer/utils.py")
    sglang = _frame_in("/site-packages/sglang/srt/layers/attention/trtllm_mla_backend.py")
    flashinfer = _frame_in("/site-packages/flashinfer/decode.py")
    assert sglang(helper, query) == 148
    assert flashinfer(helper, query) == 132


@pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] patches torch.cuda")
def test_two_views_are_installed_over_the_simulated_answers_and_restored() -> None:
    import torch

    from dsakit.simulation.runtime import install_two_views

    before = {name: getattr(torch.cuda, name) for name in ("get_device_capability", "is_current_stream_capturing")}
    patches = Patches()
    try:
        patches.set(torch.cuda, "get_device_capability", lambda *a, **k: (10, 3))
        patches.set(torch.cuda, "is_current_stream_capturing", lambda: False)
        real = {"get_device_capability": lambda *a, **k: (9, 0), "get_device_properties": lambda *a, **k: "props",
                "get_device_name": lambda *a, **k: "NVIDIA H200", "is_current_stream_capturing": before[
                    "is_current_stream_capturing"]}
        install_two_views(patches, torch, real)
        assert torch.cuda.get_device_capability() == (10, 3)
        assert _frame_in("/x/triton/runtime/driver.py")(torch.cuda.get_device_capability) == (9, 0)
        # capture is the real GPU's (the simulation had answered False)
        assert torch.cuda.is_current_stream_capturing is before["is_current_stream_capturing"]
    finally:
        patches.restore()
    assert {name: getattr(torch.cuda, name) for name in before} == before


# ---------------------------------------------------------------- arch-only entry points and JIT names


def _fake_library() -> tuple[types.ModuleType, types.ModuleType]:
    library = types.ModuleType("fake_lib")
    calls: list[str] = []
    library.calls = calls  # type: ignore[attr-defined]

    def launch(x: int) -> int:
        calls.append("launched")
        return x

    library.launch = launch  # type: ignore[attr-defined]
    user = types.ModuleType("fake_user")  # `from fake_lib import launch` bound the name here too
    user.launch = launch  # type: ignore[attr-defined]
    return library, user


@pytest.mark.parametrize(("simulated", "real", "raised"), [
    ("sm103", "sm90", SimulatedKernelLaunch),
    ("sm90", "sm90", SimulatedKernelAbsent),
])
def test_an_arch_only_entry_point_is_refused_or_failed_everywhere_it_was_bound(
        monkeypatch: pytest.MonkeyPatch, simulated: str, real: str, raised: type[Exception]) -> None:
    from dsakit.simulation.kernels import guard_entry_points

    library, user = _fake_library()
    for module in (library, user):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    patches = Patches()
    try:
        guard_entry_points(patches, library, [(FAMILY, "launch")], simulated_model(simulated), real)
        for bound in (library.launch, user.launch):  # type: ignore[attr-defined]
            with pytest.raises(raised) as caught:
                bound(1)
            assert "fake_lib.launch" in str(caught.value)
        assert library.calls == []  # type: ignore[attr-defined]
    finally:
        patches.restore()
    assert library.launch(2) == 2 and user.launch is library.launch  # type: ignore[attr-defined]
    message = str(caught.value)
    if raised is SimulatedKernelLaunch:
        assert message.startswith("[simulated-kernel-launch] fake_lib.launch (called at ")
        assert "an SM 10.x kernel exists for sm100, sm103 only and this GPU is sm90 (tcgen05 instructions)" in message
    else:
        assert "does not exist for simulated sm90 (NVIDIA H200): it exists for sm100, sm103" in message


def test_an_entry_point_both_devices_have_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.simulation.kernels import guard_entry_points

    library, user = _fake_library()
    original = library.launch  # type: ignore[attr-defined]
    patches = Patches()
    guard_entry_points(patches, library, [(FAMILY, "launch")], simulated_model("sm103"), "sm100")
    assert library.launch is original and library.launch(3) == 3  # type: ignore[attr-defined]
    patches.restore()


def test_a_portable_jit_builds_for_this_gpu_and_is_recorded_an_arch_only_one_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.simulation import kernels

    loader = types.ModuleType("fake_loader")
    built: list[tuple[str, ...]] = []
    loader.load_jit = lambda *names: built.append(names) or "module"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fake_loader", loader)
    monkeypatch.setattr(kernel_archs, "ARCH_ONLY", (FAMILY,))
    monkeypatch.setattr(kernels, "family_of_jit", lambda name: FAMILY if "sm100_thing" in name else None)
    kernels.RAN.clear()
    patches = Patches()
    try:
        kernels._guard_sglang_jit(patches, loader, simulated_model("sm103"), real="sm90", portable=True)
        assert loader.load_jit("dsa", "topk_v2") == "module"  # type: ignore[attr-defined]
        with pytest.raises(SimulatedKernelLaunch, match=r"SGLang's JIT kernel sm100_thing \(load_jit\)"):
            loader.load_jit("sm100_thing")  # type: ignore[attr-defined]
        assert built == [("dsa", "topk_v2")]
        assert list(kernels.RAN) == ["JIT dsa/topk_v2"]
    finally:
        patches.restore()
        kernels.RAN.clear()


# ---------------------------------------------------------------- stand-ins: configuration runs, launches refuse


@pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] a launch takes tensors")
def test_a_stand_in_runs_configuration_calls_and_refuses_launches() -> None:
    import torch

    from dsakit.simulation.kernels import StandIn

    tilelang = StandIn("tilelang", simulated_model("sm103"))
    assert tilelang.set_log_level("WARNING") is not None  # configuration: runs, answers a stand-in
    kernel = tilelang.jit(out_idx=[-1])(lambda: None)  # a decorator factory, then the decoration
    with pytest.raises(SimulatedKernelLaunch, match=r"tilelang\.jit\(\)\(\) \(called at .*\) would launch"):
        kernel(torch.zeros(2))


def test_a_real_answer_stays_real_through_torchs_own_nested_queries() -> None:
    """torch.cuda.get_device_capability calls the module's get_device_properties, which the
    simulation patched too: the toolchain's question must be answered by the real GPU throughout."""
    from dsakit.simulation.runtime import _two_views

    cuda = types.SimpleNamespace()
    cuda.get_device_properties = _two_views(lambda: (10, 3), lambda: (9, 0))
    cuda.get_device_capability = _two_views(lambda: (10, 3), lambda: cuda.get_device_properties())
    assert _frame_in("/x/sglang/kernels/jit/utils/arch.py")(cuda.get_device_capability) == (9, 0)
    assert _frame_in("/x/sglang/srt/layers/attention/dsa_backend.py")(cuda.get_device_capability) == (10, 3)


@pytest.mark.skipif(not HAS_TORCH, reason="[module:torch] a launch takes tensors")
def test_a_stand_in_submodule_that_shadows_a_callable_is_called_like_it() -> None:
    """`from tilelang.jit.adapter.base import ...` makes `tilelang.jit` the submodule; SGLang then
    decorates with `@tilelang.jit(...)` (0.5.21's tilelang_kernel.py)."""
    import torch

    from dsakit.simulation.kernels import StandIn

    device = simulated_model("sm103")
    jit = StandIn("tilelang.jit", device)
    kernel = jit(out_idx=[-1])(lambda: None)
    with pytest.raises(SimulatedKernelLaunch, match=r"tilelang\.jit\(\)\(\) \(called at "):
        kernel(torch.zeros(2))


def test_a_report_record_carries_the_kernels_a_test_ran_for_real() -> None:
    """--dsakit-report and dsakit compare read the recorder: a portable run's test says what ran where."""
    from types import SimpleNamespace

    from dsakit.gates.outcomes import RAN_ON_THIS_GPU, next_outcome

    ran = {"arch": "sm90", "kernels": ["Triton _fused_dsa_decode_metadata_kernel", "JIT dpsk_v4_topk_v2/true"]}
    report = SimpleNamespace(nodeid="t.py::test_x", when="call", duration=0.5, skipped=False, failed=False,
                             passed=True, user_properties=[(RAN_ON_THIS_GPU, ran)], longrepr=None)
    record = next_outcome(None, report)  # type: ignore[arg-type]
    assert record is not None and record["ran_on_this_gpu"] == ran and record["outcome"] == "passed"
    report.user_properties = []
    assert "ran_on_this_gpu" not in (next_outcome(None, report) or {})  # type: ignore[arg-type]
