"""Capability gates as data: the declared table of `Gate`s, capability expressions, evaluation.

Owns: which gate codes exist, what each requires, and the sentence a closed gate produces (what is
missing, what covers the case instead). Device rules: at least / exactly / same family; AMD by gfx
arch string, never by number. Never imports pytest, torch or SGLang (markers: `dsakit.gates.marks`;
which of SGLang's own skip messages mean these gates: `dsakit.gates.sglang_skips`).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from dsakit.gates.device_model import SIMULATED, DeviceModel
from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord, Reason

GateKind = Literal["device", "module", "jit", "sglang", "expression"]

# A check returns None when satisfied, else a clause saying what this machine/device lacks.
Check = Callable[[DeviceModel], "str | None"]


class Gate(FrozenRecord):
    """One gate: `requirement` says what must hold, `covered_by` what covers the case instead
    (said neutrally: it is shown to any suite's skipped tests, not only dsakit's own).

    `device_checks` depend only on the device model (real or simulated); `env_checks` look at this
    machine's Python environment and tools, also when the device is simulated. Equal and hashed
    by the first four fields (the checks are not compared)."""

    __match_args__ = ('code', 'kind', 'requirement', 'covered_by', 'device_checks', 'env_checks')
    _compared_fields = ('code', 'kind', 'requirement', 'covered_by')  # the checks are not compared

    def __init__(self, code: str,
                 kind: GateKind,
                 requirement: str,
                 covered_by: str,
                 device_checks: tuple[Check, ...] = (),
                 env_checks: tuple[Check, ...] = ()) -> None:
        self.__dict__.update(code=code, kind=kind, requirement=requirement, covered_by=covered_by,
                             device_checks=device_checks, env_checks=env_checks)

    code: str
    kind: GateKind
    requirement: str
    covered_by: str
    device_checks: tuple[Check, ...]
    env_checks: tuple[Check, ...]

    def why_closed(self, device: DeviceModel) -> str | None:
        """None when open; else the clause naming what is missing."""
        for check in (*self.device_checks, *self.env_checks):
            missing = check(device)
            if missing is not None:
                return missing
        return None

    def device_allows(self, device: DeviceModel) -> bool:
        return all(check(device) is None for check in self.device_checks)

    def reason(self, missing: str) -> Reason:
        return Reason(self.code, f"needs {self.requirement}, but {missing}; {self.covered_by}")


class GateOutcome:
    """One gate evaluated on one device. A plain class, not a dataclass: creating a dataclass
    compiles its generated methods, ~5 M instructions in every run that evaluates a gate
    (bench/bench_kit_overhead.py)."""

    __slots__ = ("gate", "open", "reason")

    def __init__(self, gate: Gate, open: bool, reason: Reason | None) -> None:
        self.gate = gate
        self.open = open
        self.reason = reason

    @property
    def code(self) -> str:
        return self.gate.code

    def _key(self) -> tuple[Gate, bool, Reason | None]:
        return (self.gate, self.open, self.reason)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GateOutcome):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"GateOutcome(gate={self.gate!r}, open={self.open!r}, reason={self.reason!r})"


# ---------------------------------------------------------------- device checks


def _not_nvidia(device: DeviceModel) -> str:
    if device.vendor == "amd":
        return (
            f"this device is {device.describe()}: AMD reports capability {device.sm_text} but is "
            "gated by gfx arch, never by that number"
        )
    return f"this device is {device.describe()}, not an NVIDIA GPU"


def _nvidia() -> Check:
    def check(device: DeviceModel) -> str | None:
        return None if device.vendor == "nvidia" else _not_nvidia(device)

    return check


def _amd() -> Check:
    def check(device: DeviceModel) -> str | None:
        return None if device.vendor == "amd" else f"this device is {device.describe()}, not an AMD GPU"

    return check


def _gpu() -> Check:
    def check(device: DeviceModel) -> str | None:
        return None if device.is_gpu else f"this device is {device.describe()}"

    return check


def _nvidia_sm(test: Callable[[tuple[int, int]], bool]) -> Check:
    """An NVIDIA-only capability test; AMD never passes, whatever number it reports."""

    def check(device: DeviceModel) -> str | None:
        if device.vendor != "nvidia" or device.sm is None:
            return _not_nvidia(device)
        return None if test(device.sm) else f"this device is {device.describe()}"

    return check


def at_least(major: int, minor: int) -> Check:
    """vLLM's has_device_capability: SM >= major.minor (NVIDIA)."""
    return _nvidia_sm(lambda sm: sm >= (major, minor))


def exactly(major: int, minor: int) -> Check:
    """vLLM's is_device_capability: SM == major.minor (NVIDIA)."""
    return _nvidia_sm(lambda sm: sm == (major, minor))


def family(major: int) -> Check:
    """vLLM's is_device_capability_family: same major (NVIDIA)."""
    return _nvidia_sm(lambda sm: sm[0] == major)


def gfx_in(*archs: str) -> Check:
    """AMD by gfx arch string (gcnArchName without feature flags)."""
    allowed = frozenset(archs)

    def check(device: DeviceModel) -> str | None:
        if device.vendor != "amd":
            return f"this device is {device.describe()}, not an AMD GPU"
        if device.gfx in allowed:
            return None
        return f"this device is {device.describe()}, not one of {', '.join(archs)}"

    return check


def any_of(*checks: Check) -> Check:
    def check(device: DeviceModel) -> str | None:
        misses = [c(device) for c in checks]
        return None if any(m is None for m in misses) else misses[0]

    return check


# ---------------------------------------------------------------- environment checks

_SIMULATED_NOTE = " (module and tool gates check this machine even with a simulated device)"


def _note(device: DeviceModel) -> str:
    return _SIMULATED_NOTE if device.simulated else ""


def _find_spec(name: str) -> Any:
    """The module's spec on this machine: a whole-run simulation's stand-in for an absent kernel
    library (its loader says `dsakit_stand_in`) counts as absent."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    return None if spec is None or getattr(spec.loader, "dsakit_stand_in", False) else spec


@functools.lru_cache(maxsize=None)
def _package_dir(name: str) -> Path | None:
    """The directory of a top-level package, found without importing it (None if absent)."""
    spec = _find_spec(name)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin).parent if spec.origin else None


@functools.lru_cache(maxsize=None)
def _importable(name: str) -> bool:
    return _find_spec(name) is not None


@functools.lru_cache(maxsize=None)
def _package_has_file(package: str, pattern: str) -> bool:
    directory = _package_dir(package)
    return directory is not None and any(directory.rglob(pattern))


def module(name: str) -> Check:
    def check(device: DeviceModel) -> str | None:
        if _importable(name):
            return None
        return f"Python module {name!r} is not installed here{_note(device)}"

    return check


def package_file(package: str, pattern: str, what: str) -> Check:
    """An extension inside a package, found by file name so the package is not imported."""

    def check(device: DeviceModel) -> str | None:
        if _package_dir(package) is None:
            return f"Python module {package!r} is not installed here{_note(device)}"
        if _package_has_file(package, pattern):
            return None
        return f"the installed {package} has no {what} ({pattern}){_note(device)}"

    return check


def _flash_mla_build() -> Check:
    standalone = module("flash_mla")
    bundled = package_file("sgl_kernel", "flashmla_ops*", "FlashMLA extension")

    def check(device: DeviceModel) -> str | None:
        if standalone(device) is None or bundled(device) is None:
            return None
        return (
            "neither the flash_mla package nor sgl_kernel's flashmla_ops extension is installed "
            f"here{_note(device)}"
        )

    return check


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return None


def _jit_toolchain() -> Check:
    def check(device: DeviceModel) -> str | None:
        missing = []
        if not _importable("tvm_ffi"):
            missing.append("tvm_ffi is not importable")
        if _nvcc() is None:
            missing.append("no nvcc on PATH or under $CUDA_HOME/bin")
        return " and ".join(missing) + _note(device) if missing else None

    return check


def _sglang_feature(code: str) -> Check:
    def check(device: DeviceModel) -> str | None:
        from dsakit.stack.sglang_release import FEATURES, installed_release

        try:
            release = installed_release()
        except UsageError as error:
            return str(error)
        if release.has(code):
            return None
        return f"installed SGLang {release.version} lacks it ({FEATURES[code].missing})"

    return check


# ---------------------------------------------------------------- the table


def _device(code: str, requirement: str, covered_by: str, *checks: Check, env: Sequence[Check] = ()) -> Gate:
    return Gate(code, "device", requirement, covered_by, tuple(checks), tuple(env))


def _module_gate(name: str, covered_by: str) -> Gate:
    def check(device: DeviceModel) -> str | None:
        return None if _importable(name) else f"it is not installed in this environment{_note(device)}"

    return Gate(f"module:{name}", "module", f"the Python module {name!r}", covered_by, (), (check,))


# The attention unit-test kit (sglang/test/kits/attention_unittest) imports sglang.test.test_utils
# (-> benchmark/datasets -> datasets -> pyarrow) and, in its runner_modes, eagle_worker_v2 ->
# managers/scheduler.py -> setproctitle: SGLang requirements a --no-deps install may lack.
SGLANG_KIT_IMPORT_CHAIN = ("datasets", "pyarrow", "setproctitle")


def _sglang_kit_modules() -> Check:
    def check(device: DeviceModel) -> str | None:
        missing = [name for name in SGLANG_KIT_IMPORT_CHAIN if not _importable(name)]
        if not missing:
            return None
        from dsakit.stack.sglang_release import installed_release

        try:
            version = installed_release().version  # the imported tree's, not the distribution's
        except UsageError:
            return "SGLang is not installed in this environment"
        return (f"SGLang {version}'s sglang.test.test_utils / attention kit runner_modes import "
                f"{', '.join(repr(m) for m in missing)}, not installed in this environment{_note(device)}")

    return check


_SGLANG_COVERED_BY = {
    "dsa-backend": "the DeepSeek-V4 backend suites cover the sparse-attention contracts where it exists",
    "deepseek-v4-backend": "the DSA backend suites cover the shared contracts",
    "topk-role-split": "the single-flag tests (one --dsa-topk-backend for both roles) cover this SGLang",
    "runtime-context-overrides": "tests that pass server args directly cover this SGLang",
    "topk-v2-fold": "the unfused top-k then page-table gather path covers this SGLang",
    "hip-radix-reads-model": "the CUDA DeepSeek-V4 backend covers the shared contract entries",
}


def _sglang_import_chain() -> Check:
    def check(device: DeviceModel) -> str | None:
        from dsakit.stack.import_chain import gate_check

        return gate_check()

    return check


def _triton_interpreter() -> Check:
    def check(device: DeviceModel) -> str | None:
        from dsakit.gates.interpreter_probe import loop_probe_clause

        return loop_probe_clause()

    return check


def _import_chain_covered_by() -> str:
    from dsakit.stack.import_chain import COVERED_BY

    return COVERED_BY


def _build_table() -> dict[str, Gate]:
    from dsakit.stack.kernel_libraries import KERNEL_LIBRARIES
    from dsakit.stack.sglang_release import FEATURES

    gates = [
        _device("cuda", "an NVIDIA GPU (CUDA)",
                "it runs on a node with an NVIDIA GPU",
                _nvidia()),
        _device("rocm", "an AMD GPU (ROCm)", "it runs on a node with an AMD GPU", _amd()),
        # FA3 is Hopper-only: exactly the SM 9.x family on NVIDIA (MI200 and MI355 report 9.x too).
        _device("fa3", "exactly SM 9.x on NVIDIA (Hopper) with sgl_kernel's flash_ops extension",
                "on SM 10.x trtllm-dsa-decode and flashmla-sparse cover DSA attention, on AMD aiter does",
                family(9), env=(package_file("sgl_kernel", "flash_ops*", "FA3 flash_ops extension"),)),
        # Same family, not ">= 10.0": sm_100a/sm_103a cubins (tcgen05) run on 10.0 and 10.3 but not
        # on 12.x, although 12.0 >= 10.0 (FlashInfer's conftest makes the same point).
        _device("trtllm-dsa-decode", "the SM 10.x family on NVIDIA (B200 10.0, B300 10.3)",
                "on SM 9.0 flashmla-sparse and fa3 cover DSA decode",
                family(10)),
        _device("flashmla-sparse", "SM 9.0 or the SM 10.x family on NVIDIA with a FlashMLA build",
                "on SM 12.x and AMD the tilelang and aiter sparse paths cover it",
                any_of(exactly(9, 0), family(10)), env=(_flash_mla_build(),)),
        _device("flashinfer-gvr-topk", "SM 10.0 or later on NVIDIA",
                "on SM 9.0 the sgl_kernel fused top-k (topk-v2-cluster) covers top-k",
                at_least(10, 0)),
        _device("aiter", "an AMD gfx942 (MI300) or gfx950 (MI355) GPU",
                "on NVIDIA the CUDA backends cover the same contracts; gfx90a (MI200) has no aiter MLA",
                gfx_in("gfx942", "gfx950")),
        _device("fp8-kv", "an FP8 KV cache: NVIDIA SM 8.9 or later, or AMD gfx942/gfx950",
                "the bf16 KV-cache tests cover older GPUs",
                any_of(at_least(8, 9), gfx_in("gfx942", "gfx950"))),
        # Thread-block clusters exist from Hopper on.
        _device("topk-v2-cluster", "SM 9.0 or later on NVIDIA (thread-block clusters)",
                "the v1 top-k kernel (no clusters) covers older NVIDIA GPUs and AMD",
                at_least(9, 0)),
        _device("cuda-graphs", "an NVIDIA or AMD GPU to capture CUDA/HIP graphs",
                "the eager-mode tests cover the same logic without graphs", _gpu()),
        # one per kernel library that has one (dsakit.stack.kernel_libraries)
        *(_module_gate(library.module, library.gate_covered_by)
          for library in KERNEL_LIBRARIES.values() if library.gate_covered_by is not None),
        Gate("module:sgl_kernel.flashmla_ops", "module", "sgl_kernel's FlashMLA extension (sgl_kernel/flashmla_ops*), "
             "which DeepSeek-V4 metadata and attention call through sgl_kernel.flash_mla",
             "the DeepSeek-V4 page-table, SWA and compression kernel cases cover its metadata without FlashMLA",
             (), (package_file("sgl_kernel", "flashmla_ops*", "FlashMLA extension"),)),
        Gate("module:sglang.test.test_utils", "module",
             "SGLang's test utilities and attention unit-test kit importable (" + ", ".join(SGLANG_KIT_IMPORT_CHAIN)
             + " installed)",
             "it runs where SGLang's test dependencies are installed",
             (), (_sglang_kit_modules(),)),
        # Imports SGLang, so it answers only inside a running test (dsakit.require); a mark or
        # `dsakit capabilities` reads it open.
        Gate("sglang:import-chain", "sglang", "SGLang's own import chain (configs, pools, backends) "
             "loading in this environment (checked inside tests only: it imports SGLang)",
             _import_chain_covered_by(), (), (_sglang_import_chain(),)),
        Gate("jit:triton-interpreter", "jit", "Triton's interpreter (TRITON_INTERPRET=1) running SGLang's fused "
             "DSA metadata kernels: a loop over a count read from memory (Triton 3.8's does; 3.6's does not)",
             "on a GPU node the compiled kernels are judged by the same postconditions "
             "(contracts/test_dsa_speculative_graphs.py, --dsakit-kernel-contracts)", (), (_triton_interpreter(),)),
        Gate("jit:tvm-ffi-nvcc", "jit", "the JIT toolchain (tvm_ffi importable and nvcc on PATH or $CUDA_HOME)",
             "the ahead-of-time sgl_kernel ops cover the kernels without JIT", (), (_jit_toolchain(),)),
    ]
    for code, feature in FEATURES.items():
        gates.append(Gate(f"sglang:{code}", "sglang", f"SGLang with {feature.description}",
                          _SGLANG_COVERED_BY.get(code, "other SGLang releases cover it"),
                          (), (_sglang_feature(code),)))
    return {gate.code: gate for gate in gates}


@functools.lru_cache(maxsize=1)
def gate_table() -> dict[str, Gate]:
    """Every declared gate by code, in declaration order."""
    return _build_table()


# ---------------------------------------------------------------- capability expressions

EXPRESSION_SYNTAX = (
    "capability expressions: 'sm>=MAJOR.MINOR' (at least), 'sm==MAJOR.MINOR' (exactly), "
    "'sm~MAJOR' (same family), 'gfx in gfxA,gfxB' (AMD arch); NVIDIA only for sm, e.g. "
    "'sm>=9.0', 'sm==9.0', 'sm~10', 'gfx in gfx942,gfx950'"
)

_SM = re.compile(r"sm\s*(>=|==|~)\s*(\d+)(?:\.(\d+))?")
_GFX = re.compile(r"gfx\s+in\s+(gfx[0-9a-f]+(?:\s*,\s*gfx[0-9a-f]+)*)")


def _looks_like_expression(code: str) -> bool:
    return code.startswith(("sm", "gfx")) and not code.startswith("sglang")


def parse_expression(text: str) -> Gate:
    """A gate from a capability expression; UsageError naming the valid syntax otherwise."""
    stripped = text.strip()
    if match := _SM.fullmatch(stripped):
        op, major_text, minor_text = match.groups()
        major = int(major_text)
        if op == "~":
            if minor_text is not None:
                raise UsageError(f"bad capability expression {text!r}: 'sm~' takes a major only (sm~{major}); "
                                 + EXPRESSION_SYNTAX)
            return Gate(f"sm~{major}", "expression", f"the SM {major}.x family on NVIDIA",
                        "other devices run the tests without this gate", (family(major),))
        if minor_text is None:
            raise UsageError(f"bad capability expression {text!r}: '{op}' needs MAJOR.MINOR "
                             f"(e.g. sm{op}{major}.0); " + EXPRESSION_SYNTAX)
        minor = int(minor_text)
        if op == ">=":
            return Gate(f"sm>={major}.{minor}", "expression", f"SM {major}.{minor} or later on NVIDIA",
                        "other devices run the tests without this gate", (at_least(major, minor),))
        return Gate(f"sm=={major}.{minor}", "expression", f"exactly SM {major}.{minor} on NVIDIA",
                    "other devices run the tests without this gate", (exactly(major, minor),))
    if match := _GFX.fullmatch(stripped):
        archs = [a.strip() for a in match.group(1).split(",")]
        return Gate(f"gfx in {','.join(archs)}", "expression", f"an AMD GPU with arch {' or '.join(archs)}",
                    "other devices run the tests without this gate", (gfx_in(*archs),))
    raise UsageError(f"bad capability expression {text!r}; " + EXPRESSION_SYNTAX)


def gate_for(code: str) -> Gate:
    """The gate for a code or capability expression; UsageError listing valid codes otherwise."""
    table = gate_table()
    if code in table:
        return table[code]
    if _looks_like_expression(code.strip()):
        return _parse_cached(code.strip())
    raise UsageError(f"unknown dsakit gate {code!r}; valid codes: {', '.join(table)}; or " + EXPRESSION_SYNTAX)


@functools.lru_cache(maxsize=None)
def _parse_cached(text: str) -> Gate:
    return parse_expression(text)


def validate_codes(codes: Iterable[str]) -> tuple[str, ...]:
    """Canonical codes (expressions normalised); UsageError on the first unknown one."""
    result: list[str] = []
    for code in codes:
        if not isinstance(code, str):
            raise UsageError(f"dsakit gate codes are strings, got {code!r}")
        canonical = gate_for(code).code
        if canonical not in result:
            result.append(canonical)
    return tuple(result)


def split_codes(text: str, what: str, *, given: bool = False) -> list[str]:
    """Codes from the comma-separated value of option `what`, keeping 'gfx in gfxA,gfxB' whole.
    A value of commas only (`,,`) names no code: UsageError; so does an empty one the user `given`
    (`--dsakit-must-run=''`), else an empty value is no codes (the default)."""
    pieces: list[str] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if pieces and re.fullmatch(r"gfx[0-9a-f]+", piece) and pieces[-1].startswith("gfx in"):
            pieces[-1] = f"{pieces[-1]},{piece}"
        else:
            pieces.append(piece)
    if not pieces and (text.strip() or given):
        raise UsageError(f"{what} {text!r} names no gate code: pass CODE[,CODE...] (for example cuda,fa3; "
                         f"`dsakit capabilities` lists the codes), or leave {what} out")
    return pieces


# ---------------------------------------------------------------- evaluation


def evaluate(code: str, device: DeviceModel) -> GateOutcome:
    gate = gate_for(code)
    missing = gate.why_closed(device)
    if missing is None:
        return GateOutcome(gate, True, None)
    return GateOutcome(gate, False, gate.reason(missing))


def closed_reasons(codes: Iterable[str], device: DeviceModel) -> list[Reason]:
    """One Reason per closed gate among `codes` (empty when all are open)."""
    return [o.reason for o in (evaluate(c, device) for c in validate_codes(codes)) if o.reason is not None]


def known_devices_opening(codes: Iterable[str]) -> list[str]:
    """Simulated profiles on which the device part of every gate in `codes` opens together."""
    gates = [gate_for(code) for code in codes]
    return [key for key, device in SIMULATED.items() if all(g.device_allows(device) for g in gates)]


def never_open_explanation(codes: Sequence[str]) -> str | None:
    """None if some known device could open all `codes` together; else why none can."""
    if known_devices_opening(codes):
        return None
    return (
        f"gates {', '.join(codes)} can never open together on any known device "
        f"({', '.join(SIMULATED)}): the tests behind them are skipped everywhere; split the "
        "parametrization or fix the capability requirement"
    )
