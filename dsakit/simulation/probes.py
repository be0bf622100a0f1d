"""SGLang's device probes as data: what the DSA / DeepSeek-V4 backends read to choose a hardware branch.

Owns: the declared probe table (name, module(s), kind, the question it asks of the device table,
releases that define it) and the AST scan that finds probes in a source tree, so a new probe fails
loudly (`missing_probes`). Never imports torch or SGLang: values are the device table's answers.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dsakit.gates.device_model import SIMULATED, DeviceModel
from dsakit.devices import Answer, answer
from dsakit.stack import sglang_source
from dsakit.stack.sglang_release import (PROBE_SCAN_FILES, SUPPORTED_RELEASES, SGLangRelease, releases_between,
                                   releases_from)

ProbeKind = Literal["constant", "cached", "torch"]

ATT = "sglang.srt.layers.attention"
KOPS = "sglang.kernels.ops.attention"
COMMON = "sglang.srt.utils.common"


@dataclass(frozen=True)
class SGLangProbe:
    """One probe SGLang reads to choose a branch.

    name      the module global (constant), function (cached) or torch attribute (torch)
    kind      constant: computed at import, patched in each module that holds it;
              cached: an lru/functools/cache_once probe function, cleared on enter and exit;
              torch: a torch.cuda / torch.version fact every runtime probe bottoms out in
    modules   where it is patched / cleared (dotted); empty for torch facts
    answer    the question it asks, a code of the device table's `ANSWERS` (None for cached
              probes: they follow the torch facts)
    releases  supported SGLang releases whose source defines it in (one of) these modules
    note      what reads it
    patched   False for forward-only kernel constants (dtypes): listed so the scan stays complete
    """

    name: str
    kind: ProbeKind
    modules: tuple[str, ...]
    answer: str | None
    releases: tuple[str, ...] = SUPPORTED_RELEASES
    note: str = ""
    patched: bool = True

    def value(self, device: DeviceModel) -> Answer:
        """Its answer on `device` (only for probes with an `answer`)."""
        if self.answer is None:
            raise ValueError(f"{self.name} is a cached probe: it follows the torch facts, it has no value")
        return answer(self.answer, device)

    def value_text(self, device: DeviceModel) -> str:
        if self.answer is None:
            return "follows"
        value = self.value(device)
        if value is True:
            return "T"
        if value is False:
            return "F"
        return str(value)


ALL = SUPPORTED_RELEASES  # a row "from 0.5.21 on" is releases_from("0.5.21"): a new release needs no edit

PROBES: tuple[SGLangProbe, ...] = (
    # ---- module constants (computed at import; patched where they are read)
    SGLangProbe("_is_cuda", "constant", (f"{ATT}.dsa_backend",), "is_cuda", releases_from("0.5.22"),
                "gates the SM>=10 TRT-LLM branch that reads max_running_requests (0.5.23)"),
    SGLangProbe("_is_cuda", "constant", (f"{ATT}.deepseek_v4_backend", f"{ATT}.dsa.dsa_backend_mtp_precompute",
                                         f"{ATT}.dsa.dsa_indexer", f"{KOPS}.utils"), "is_cuda", ALL,
                "DSv4 needs_cpu_seq_lens; indexer / MTP precompute paths"),
    SGLangProbe("_is_cuda", "constant", (f"{ATT}.dsa.dsa_prefill_cuda_graph", f"{ATT}.dsa.kpool_fp8_index",
                                         f"{ATT}.dsa.head_gate"), "is_cuda", releases_from("0.5.18")),
    SGLangProbe("_is_hip", "constant", (f"{ATT}.dsa_backend", f"{ATT}.dsa.dsa_backend_mtp_precompute",
                                        f"{ATT}.dsa.dsa_indexer", f"{KOPS}.flash_mla_sm120",
                                        f"{ATT}.attention_registry", f"{KOPS}.dsv4.norm_rope",
                                        f"{ATT}.dsv4.compressor", f"{ATT}.dsv4.compressor_v2",
                                        "sglang.srt.mem_cache.deepseek_v4_memory_pool",
                                        "sglang.srt.mem_cache.deepseek_v4_compress_state"), "is_hip", ALL,
                "DSA HIP buffers at __init__; the DSv4 backend class (HipRadix); pool ring sizes"),
    SGLangProbe("_is_hip", "constant", (f"{ATT}.dsa.dsa_metadata_manager", f"{ATT}.dsa.dsa_topk_backend",
                                        f"{ATT}.dsa.dsa_prefill_cuda_graph", f"{ATT}.dsa.head_gate"), "is_hip",
                releases_from("0.5.19")),
    SGLangProbe("_is_xpu", "constant", (f"{ATT}.dsa_backend",), "other_platform", releases_from("0.5.20")),
    SGLangProbe("_is_xpu", "constant", (f"{ATT}.deepseek_v4_backend", f"{ATT}.dsa.dsa_indexer",
                                        f"{KOPS}.dsv4.norm_rope", f"{KOPS}.dsv4.compress"), "other_platform", ALL),
    SGLangProbe("_is_npu", "constant", (f"{ATT}.dsa.dsa_indexer", f"{ATT}.attention_registry",
                                        f"{ATT}.dsv4.compressor"), "other_platform", ALL),
    SGLangProbe("_is_npu", "constant", ("sglang.srt.mem_cache.deepseek_v4_compress_state",), "other_platform",
                releases_between("0.5.17", "0.5.17")),
    SGLangProbe("_is_musa", "constant", (f"{ATT}.attention_registry",), "other_platform", releases_from("0.5.18")),
    SGLangProbe("_IS_GFX95", "constant", (f"{ATT}.dsa_backend",), "is_gfx95", ALL,
                "MHA one-shot prefill on gfx95x (0.5.23 set_dsa_prefill_impl)"),
    SGLangProbe("_is_gfx95_supported", "constant", (f"{ATT}.dsa.dsa_indexer",), "is_gfx95", ALL),
    SGLangProbe("_is_gfx1250_supported", "constant", (f"{ATT}.dsa.dsa_indexer", f"{ATT}.dsa.dsa_prefill_cuda_graph"),
                "is_gfx1250", releases_from("0.5.22")),
    SGLangProbe("_is_fp8_fnuz", "constant", (f"{ATT}.dsa.dsa_indexer",), "is_fp8_fnuz", ALL),
    SGLangProbe("_is_hip", "constant", ("sglang.kernels.ops.quantization.fp8_kernel",), "is_hip", ALL,
                "is_fp8_fnuz() reads it: called after import, it answers the simulated device too"),
    SGLangProbe("_use_aiter", "constant", (f"{ATT}.dsa.dsa_indexer", f"{ATT}.dsv4.compressor"), "not_simulated", ALL,
                "off: AITER kernels are not simulated"),
    SGLangProbe("DUAL_STREAM_TOKEN_THRESHOLD", "constant", (f"{ATT}.dsa.dsa_indexer",),
                "dual_stream_threshold", ALL),
    SGLangProbe("DUAL_STREAM_TOKEN_THRESHOLD", "constant", (f"{ATT}.dsa.dsa_indexer_kpool",),
                "dual_stream_threshold", releases_from("0.5.20"), "re-exported from dsa_indexer"),
    SGLangProbe("_is_sm120", "constant", (f"{ATT}.deepseek_v4_backend",), "is_sm120_supported",
                releases_between("0.5.17", "0.5.18"),
                "DSv4 FlashMLA metadata is skipped on SM 12.x"),
    SGLangProbe("_IS_SM120", "constant", (f"{ATT}.dsv4.metadata",), "is_sm120_supported", releases_from("0.5.20")),
    SGLangProbe("ONLINE_C128", "constant", ("sglang.srt.mem_cache.deepseek_v4_memory_pool",), "not_simulated", ALL,
                "off: the online C128 compression flag is not simulated"),
    SGLangProbe("_is_musa", "constant", (f"{ATT}.attention_registry",), "other_platform",
                releases_between("0.5.17", "0.5.17")),
    SGLangProbe("_is_cuda", "constant", (f"{ATT}.dsa.dsa_prefill_cuda_graph",), "is_cuda",
                releases_between("0.5.17", "0.5.17")),
    SGLangProbe("_is_gfx95_supported", "constant", (f"{KOPS}.dsv4.tilelang_fp8_attention",), "is_gfx95",
                releases_from("0.5.23"),
                "forward-only (tilelang kernel)"),
    SGLangProbe("_is_hip", "constant", (f"{KOPS}.dsv4.elementwise", f"{KOPS}.dsv4.gemm"), "is_hip",
                releases_between("0.5.17", "0.5.22"),
                "forward-only (kernels)"),
    SGLangProbe("_is_xpu", "constant", (f"{KOPS}.dsv4.elementwise", f"{KOPS}.dsv4.moe"), "other_platform",
                releases_between("0.5.17", "0.5.22"),
                "forward-only (kernels)"),
    SGLangProbe("_use_aiter", "constant", (f"{KOPS}.dsv4.gemm",), "not_simulated", releases_between("0.5.17", "0.5.20"),
                "forward-only (kernels)"),
    SGLangProbe("FP8_DTYPE", "constant", (f"{ATT}.dsv4.indexer",), "fp8_dtype", ALL,
                "forward-only (indexer kernels)", patched=False),
    SGLangProbe("fp8_dtype", "constant", (f"{KOPS}.dsv4.dequant_k_cache",), "fp8_dtype", ALL,
                "forward-only (dequant kernel)", patched=False),
    SGLangProbe("fp8_dtype", "constant", (f"{ATT}.deepseek_v4_backend",), "fp8_dtype", releases_from("0.5.19"),
                "forward-only (re-exported from fp8_kernel)", patched=False),
    SGLangProbe("fp8_dtype", "constant", (f"{KOPS}.dsv4.index_buf_accessor", f"{KOPS}.dsv4.quant_k_cache"),
                "fp8_dtype", releases_between("0.5.17", "0.5.22"), "forward-only (kernels)", patched=False),
    # ---- cached probe functions (cleared on enter and on exit)
    SGLangProbe("resolve_num_sms", "cached", (f"{ATT}.dsa.utils",), None, releases_from("0.5.22"), "schedule sizing"),
    SGLangProbe("resolve_paged_mqa_logits_metadata_fn", "cached", (f"{ATT}.dsa.utils",), None, releases_from("0.5.23"),
                "DeepGEMM / JIT schedule: launches a kernel"),
    SGLangProbe("is_sm100_or_newer", "cached", (f"{ATT}.dsv4.v41_indexer",), None, releases_from("0.5.21"),
                "DeepGEMM decode indexer (sm100, sm103 and sm120)"),
    SGLangProbe("has_dense_fp4_indexer", "cached", (f"{ATT}.dsv4.v41_indexer",), None, releases_from("0.5.21")),
    SGLangProbe("_use_deep_gemm_prefill", "cached", (f"{ATT}.dsv4.v41_indexer",), None, releases_from("0.5.23")),
    SGLangProbe("_num_sms", "cached", (f"{ATT}.deepseek_v4_backend",), None, releases_from("0.5.21")),
    SGLangProbe("aiter_can_use_preshuffle_paged_mqa", "cached", (f"{ATT}.dsa.utils",), None, ALL),
    SGLangProbe("is_unified_kv_triton", "cached", (f"{ATT}.dsv4.unified_kv_gate",), None, releases_from("0.5.23")),
    SGLangProbe("is_unified_kv_fp8", "cached", (f"{ATT}.dsv4.unified_kv_gate",), None, releases_from("0.5.23")),
    SGLangProbe("_is_sm100", "cached", (f"{KOPS}.dsv4.index_logits",), None, releases_from("0.5.23")),
    SGLangProbe("_jit_topk_v2_module", "cached", (f"{KOPS}.dsv4.topk",), None, releases_from("0.5.21"),
                "the top-k v2 JIT module"),
    SGLangProbe("_hpc_gemm_bf16xfp32_available", "cached", (f"{KOPS}.dsv4.gemm",), None, releases_between("0.5.17", "0.5.20")),
    SGLangProbe("is_fp8_fnuz", "cached", ("sglang.kernels.ops.quantization.fp8_kernel",), None, ALL,
                "lru-cached: cleared, a call after import answers the simulated device"),
    # ---- torch facts (every runtime probe, lru-cached or not, reads these)
    SGLangProbe("torch.cuda.is_available", "torch", (), "torch.cuda.is_available", ALL),
    SGLangProbe("torch.cuda.get_device_capability", "torch", (), "torch.cuda.get_device_capability", ALL,
                "dsa_backend __init__ -> device_sm_major"),
    SGLangProbe("torch.cuda.get_device_properties", "torch", (), "torch.cuda.get_device_properties", ALL),
    SGLangProbe("torch.cuda.get_device_name", "torch", (), "torch.cuda.get_device_name", ALL),
    SGLangProbe("torch.cuda.current_device", "torch", (), "torch.cuda.current_device", ALL),
    SGLangProbe("torch.cuda.device_count", "torch", (), "torch.cuda.device_count", ALL),
    SGLangProbe("torch.version.cuda", "torch", (), "torch.version.cuda", ALL,
                "is_sm100_supported and friends also compare the CUDA version"),
    SGLangProbe("torch.version.hip", "torch", (), "torch.version.hip", ALL),
)


def probes_for(version: str) -> list[SGLangProbe]:
    """The declared probes a supported release defines (SUPPORTED_RELEASES); a release outside
    them (a newer one, a checkout) gets every probe: its table is not known, so none is left out."""
    if version not in SUPPORTED_RELEASES:
        return list(PROBES)
    return [p for p in PROBES if version in p.releases]


# ---------------------------------------------------------------- the source scan

PROBE_FUNCTIONS = frozenset({
    "is_cuda", "is_hip", "is_npu", "is_xpu", "is_musa", "is_cuda_alike", "is_sm90_supported",
    "is_sm100_supported", "is_sm120_supported", "is_blackwell", "is_blackwell_supported",
    "get_device_sm", "get_device_capability", "is_gfx95_supported", "is_gfx942_supported",
    "is_gfx1250_supported", "is_flashinfer_available", "get_device_core_count", "is_hip_runtime",
    "is_fp8_fnuz", "is_sm100_or_newer", "get_num_sms",
})
TORCH_FACTS = frozenset(p.name for p in PROBES if p.kind == "torch")
_CACHE_DECORATORS = frozenset({"lru_cache", "cache", "cache_once"})
# Top-level functions and classes, and names assigned anywhere: a name in the first and not the
# second is a callable, so a re-export of it is no constant (a text check: no parse needed).
_DEFINED = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.MULTILINE)
_ASSIGNED = re.compile(r"^\s*(\w+)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


@dataclass(frozen=True)
class FoundProbe:
    """A probe the scan found: `module.name` of `kind`, defined or read at `site`."""

    module: str
    name: str
    kind: ProbeKind
    site: str


def _module_name(relative: Path) -> str:
    parts = ("sglang",) + relative.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _uses_probe(expr: ast.AST, probe_names: set[str]) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in probe_names:
            return True
        if isinstance(node, ast.Attribute) and _dotted(node) in TORCH_FACTS:
            return True
    return False


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@dataclass(frozen=True)
class _Summary:
    """imports: local name -> (module, name) of every `from ... import`; loaded: names read;
    marked: cache-decorated functions and torch-fact attributes, in walk order."""

    imports: dict[str, tuple[str, str]]
    loaded: frozenset[str]
    marked: tuple[ast.FunctionDef | ast.Attribute, ...]


def _cache_decorated(node: ast.FunctionDef) -> bool:
    return any((_dotted(d.func if isinstance(d, ast.Call) else d) or "").rsplit(".", 1)[-1] in _CACHE_DECORATORS
               for d in node.decorator_list)


def _summarize(module: str, is_package: bool, tree: ast.Module) -> _Summary:
    imports: dict[str, tuple[str, str]] = {}
    loaded: set[str] = set()
    marked: list[ast.FunctionDef | ast.Attribute] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = _resolve_from(module, is_package, node)
            for alias in node.names:
                imports[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loaded.add(node.id)
        elif isinstance(node, ast.FunctionDef) and _cache_decorated(node):
            marked.append(node)
        elif isinstance(node, ast.Attribute) and _dotted(node) in TORCH_FACTS:
            marked.append(node)
    return _Summary(imports, frozenset(loaded), tuple(marked))


class _ProbeScan:
    """Module constants derived from probes (following re-exports), cached probe functions, torch facts."""

    def __init__(self, release: SGLangRelease) -> None:
        self.release = release
        self._constants: dict[str, dict[str, int]] = {}
        self._in_progress: set[str] = set()
        self._summaries: dict[str, _Summary] = {}
        self._callables: dict[Path, frozenset[str]] = {}

    def path_of(self, module: str) -> Path | None:
        base = self.release.package_dir.joinpath(*module.split(".")[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    def parsed(self, module: str) -> ast.Module | None:
        path = self.path_of(module)
        return sglang_source.tree(path) if path is not None else None

    def defines_callable(self, module: str, name: str) -> bool:
        """Is `name` a function or class of `module` (a text check)? Then it is no constant, and
        the module need not be parsed: following every import would parse most of SGLang."""
        path = self.path_of(module)
        if path is None:
            return False
        if path not in self._callables:  # one pass per file, not one regex per (file, name)
            text = sglang_source.text(path)
            defined = set(_DEFINED.findall(text))
            self._callables[path] = frozenset(defined - set(_ASSIGNED.findall(text)))
        return name in self._callables[path]

    def imports(self, module: str, tree: ast.Module) -> dict[str, tuple[str, str]]:
        return self.summary(module, tree).imports

    def summary(self, module: str, tree: ast.Module) -> _Summary:
        """What the scan needs of a module, from one walk of its tree."""
        if module not in self._summaries:
            path = self.path_of(module)
            self._summaries[module] = _summarize(module, path is not None and path.name == "__init__.py", tree)
        return self._summaries[module]

    def constants(self, module: str) -> dict[str, int]:
        """Module-level names computed from a probe, with their line (0: re-exported)."""
        if module in self._constants:
            return self._constants[module]
        tree = self.parsed(module)
        if tree is None or module in self._in_progress:
            return {}
        self._in_progress.add(module)
        imports = self.imports(module, tree)
        names = {local for local, (_, name) in imports.items() if name in PROBE_FUNCTIONS}
        names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in PROBE_FUNCTIONS}
        found: dict[str, int] = {}
        for local, (source, name) in imports.items():
            # a re-export: `from x import _is_hip` where x computed it (names of probes, not functions)
            if (source.startswith("sglang.") and name not in PROBE_FUNCTIONS
                    and not self.defines_callable(source, name) and name in self.constants(source)):
                found[local] = 0

        def walk(body: list[ast.stmt]) -> None:
            for stmt in body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
                    if _uses_probe(stmt.value, names | set(found)):
                        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                        for target in targets:
                            for n in ast.walk(target):
                                if isinstance(n, ast.Name) and n.id != "_":
                                    found.setdefault(n.id, stmt.lineno)
                elif isinstance(stmt, (ast.If, ast.Try)):
                    walk(stmt.body + stmt.orelse + getattr(stmt, "finalbody", [])
                         + [s for h in getattr(stmt, "handlers", []) for s in h.body])

        walk(tree.body)
        self._in_progress.discard(module)
        self._constants[module] = found
        return found

    def scan(self) -> list[FoundProbe]:
        found: list[FoundProbe] = []
        for path in self.release.python_files(PROBE_SCAN_FILES):
            relative = path.relative_to(self.release.package_dir)
            module = _module_name(relative)
            tree = self.parsed(module)
            if tree is None:
                continue
            site = f"sglang/{relative}"
            summary = self.summary(module, tree)
            for name, line in self.constants(module).items():
                if line:  # defined here; re-exports count where they are read too
                    found.append(FoundProbe(module, name, "constant", f"{site}:{line}"))
                elif name in summary.loaded:
                    found.append(FoundProbe(module, name, "constant", f"{site} (re-exported)"))
            probe_names = {local for local, (_, name) in summary.imports.items() if name in PROBE_FUNCTIONS}
            for node in summary.marked:
                if isinstance(node, ast.FunctionDef):
                    if any(_uses_probe(s, probe_names) for s in node.body):
                        found.append(FoundProbe(module, node.name, "cached", f"{site}:{node.lineno}"))
                else:
                    found.append(FoundProbe("torch", str(_dotted(node)), "torch", f"{site}:{node.lineno}"))
        return found


def scan_probes(release: SGLangRelease) -> list[FoundProbe]:
    """Every probe the backends' branch-deciding modules (`PROBE_SCAN_FILES`) define or read; one
    scan per tree and process while the scanned files keep their mtime and size."""
    stamps = tuple((str(p), p.stat().st_mtime_ns, p.stat().st_size) for p in release.python_files(PROBE_SCAN_FILES))
    return list(_scan_cached(release, stamps))


@functools.lru_cache(maxsize=8)
def _scan_cached(release: SGLangRelease, stamps: tuple[tuple[str, int, int], ...]) -> tuple[FoundProbe, ...]:
    return tuple(_ProbeScan(release).scan())


def missing_probes(release: SGLangRelease) -> list[FoundProbe]:
    """Probes the scan finds in `release` that the declared table lacks (for that release)."""
    declared = probes_for(release.version)
    constants = {(m, p.name) for p in declared if p.kind == "constant" for m in p.modules}
    cached = {(m, p.name) for p in declared if p.kind == "cached" for m in p.modules}
    torch_facts = {p.name for p in declared if p.kind == "torch"}
    missing: list[FoundProbe] = []
    for probe in scan_probes(release):
        key = (probe.module, probe.name)
        known = (key in constants if probe.kind == "constant" else key in cached if probe.kind == "cached"
                 else probe.name in torch_facts)
        if not known and probe not in missing:
            missing.append(probe)
    return missing


def probe_table_markdown(version: str) -> str:
    """The README table of one release: probe, kind, where, value per simulated device."""
    devices = list(SIMULATED.values())
    head = f"| probe | kind | module(s) | {' | '.join(d.key for d in devices)} |"
    rule = "|" + "---|" * (3 + len(devices))
    rows = []
    for p in probes_for(version):
        where = ", ".join(m.replace(f"{ATT}.", "").replace(f"{KOPS}.", "kops.").replace("sglang.srt.", "")
                          for m in p.modules) or "torch"
        rows.append(f"| `{p.name}` | {p.kind} | {where} | {' | '.join(p.value_text(d) for d in devices)} |")
    return "\n".join([head, rule, *rows])
