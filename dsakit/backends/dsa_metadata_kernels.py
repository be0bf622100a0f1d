"""SGLang's fused DSA metadata kernels (decode, target verify, draft extend) driven as its backend drives them.

Owns a metadata case (`MetadataCase`: live lengths plus the rows SGLang's CUDA-graph runners pad
with; `index_kpool` > 1 picks the KPool variants), its inputs as those runners leave them, the one
launch of each real wrapper with the arguments `DeepseekSparseAttnBackend._apply_cuda_graph_metadata`
passes, and the wrapper to launch: the release's own, or from a copy of its module's source with a
`SourcePatch` (a reverted upstream fix) that is never written anywhere. Must not compute what the kernels compute (`dsa_metadata_reference` does)
nor judge their outputs (`dsa_invariants`). Imports torch lazily.
"""

from __future__ import annotations

import importlib
import itertools
import linecache
import types
from collections.abc import Callable
from typing import Any, Literal

from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord
from dsakit.stack.sglang_release import SGLangRelease

Mode = Literal["decode", "target_verify", "draft_extend"]
MODES: tuple[Mode, ...] = ("decode", "target_verify", "draft_extend")
WRAPPERS: dict[Mode, str] = {
    "decode": "fused_dsa_decode_metadata",
    "target_verify": "fused_dsa_target_verify_metadata",
    "draft_extend": "fused_dsa_draft_extend_metadata",
}
# SGLang's CUDA-graph runners pad a batch to the captured size with seq_len =
# attn_backend.get_cuda_graph_seq_len_fill_value() (1 for DSA, dsa_backend.py) and
# req_pool_indices = 0, the reserved slot whose req_to_token row is zeros
# (speculative/eagle_draft_extend_cuda_graph_runner.py, model_executor/runner/base_runner.py).
SEQ_LEN_FILL = 1
PADDED_REQ_POOL_INDEX = 0
POISON = -7  # what every output buffer holds before the launch: a value the kernel never writes


class MetadataCase(FrozenRecord):
    """One launch: `seq_lens` as SGLang hands it to the kernel (decode: the KV length; target
    verify: the committed prefix, the kernel adds `draft_tokens`; draft extend: the KV length with
    the drafted tokens) for the live requests, then `padded_rows` CUDA-graph padding rows.
    `width` is the page-table width (the captured buffers' `max_len` / `max_seqlen_k`)."""

    __match_args__ = ("mode", "kv_lens", "padded_rows", "draft_tokens", "page_size", "width", "index_topk",
                      "index_kpool")

    def __init__(self, mode: Mode, kv_lens: tuple[int, ...], *, padded_rows: int = 0, draft_tokens: int = 4,
                 page_size: int = 64, width: int = 4096, index_topk: int = 2048, index_kpool: int = 1) -> None:
        if mode not in MODES:
            raise UsageError(f"unknown metadata mode {mode!r}; known: {', '.join(MODES)}")
        if not kv_lens or min(kv_lens) < 1:
            raise UsageError(f"kv_lens must name at least one live request, each >= 1; got {kv_lens!r}")
        if width % page_size:
            raise UsageError(f"width {width} must be a multiple of page_size {page_size}")
        longest = max(kv_lens) + (draft_tokens if mode == "target_verify" else 0)
        if longest > width:
            raise UsageError(f"the longest row attends {longest} tokens, more than the page-table width {width}")
        if index_kpool > 1 and not (page_size == 64 and index_topk % index_kpool == 0):
            # dsa_metadata_manager.kpool_metadata_fusion_supported: otherwise SGLang keeps the plain kernels
            raise UsageError(f"index_kpool {index_kpool} needs page_size 64 and index_topk a multiple of it; got "
                             f"page_size {page_size}, index_topk {index_topk}")
        self.__dict__.update(mode=mode, kv_lens=tuple(kv_lens), padded_rows=padded_rows, draft_tokens=draft_tokens,
                             page_size=page_size, width=width, index_topk=index_topk, index_kpool=index_kpool)

    mode: Mode
    kv_lens: tuple[int, ...]
    padded_rows: int
    draft_tokens: int
    page_size: int
    width: int
    index_topk: int
    index_kpool: int

    @property
    def kpool(self) -> bool:
        return self.index_kpool > 1

    @property
    def bs(self) -> int:
        return len(self.kv_lens) + self.padded_rows

    @property
    def seq_lens(self) -> tuple[int, ...]:
        return self.kv_lens + (SEQ_LEN_FILL,) * self.padded_rows

    @property
    def rows(self) -> int:
        """Output rows: one per request in decode, one per (request, draft token) otherwise."""
        return self.bs if self.mode == "decode" else self.bs * self.draft_tokens

    @property
    def id(self) -> str:
        live = len(self.kv_lens)
        pad = f"+{self.padded_rows}pad" if self.padded_rows else ""
        kpool = f"-kpool{self.index_kpool}" if self.kpool else ""
        return f"{self.mode}{kpool}-bs{live}{pad}-ctx{max(self.kv_lens)}"

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__match_args__}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetadataCase:
        rest = {k: v for k, v in data.items() if k not in ("mode", "kv_lens")}
        return cls(data["mode"], tuple(data["kv_lens"]), **rest)


class SourcePatch(FrozenRecord):
    """One textual edit of the source of one mode's kernel, applied to a copy of its module only."""

    __match_args__ = ("name", "mode", "old", "new")

    def __init__(self, name: str, mode: Mode, old: str, new: str) -> None:
        self.__dict__.update(name=name, mode=mode, old=old, new=new)

    name: str
    mode: Mode
    old: str
    new: str

    def apply(self, source: str, where: str) -> str:
        found = source.count(self.old)
        if found != 1:
            raise UsageError(f"{self.name}: expected the line {self.old.strip()!r} once in {where}, found it "
                             f"{found} times (this SGLang's kernel differs from the one the patch was written for)")
        return source.replace(self.old, self.new)


# The MTP crash fix ("clamp padded-row seq_lens to >= 0") in the draft-extend kernels (plain and KPool).
CLAMP_REVERT = SourcePatch("clamp-reverted", "draft_extend", "        expanded_seq = tl.maximum(expanded_seq, 0)\n", "")
PATCHES = {CLAMP_REVERT.name: CLAMP_REVERT}
_copies = itertools.count()


_KPOOL_FILES: dict[Mode, str] = {"decode": "decode.py", "target_verify": "verify.py", "draft_extend": "draft_extend.py"}


def kernel_file(release: SGLangRelease, mode: Mode, *, kpool: bool = False) -> str:
    """The file (relative to the package) holding `mode`'s kernel: one for the three plain ones,
    one per mode for the KPool variants."""
    relative = release.dsa_kpool_metadata_dir if kpool else release.dsa_metadata_kernel_file
    if relative is None:
        what = "KPool metadata kernels" if kpool else "fused DSA metadata kernels"
        raise UsageError(f"SGLang {release.version} at {release.package_dir} has no {what}")
    return f"{relative}/{_KPOOL_FILES[mode]}" if kpool else relative


def _module(release: SGLangRelease, relative: str, patch: SourcePatch | None) -> types.ModuleType:
    name = "sglang." + relative.removesuffix(".py").replace("/", ".")
    if patch is None:
        return importlib.import_module(name)
    path = release.file(relative)
    source = patch.apply(path.read_text(), str(path))
    filename = f"<dsakit {patch.name} copy {next(_copies)} of {path}>"
    # Triton reads a kernel's source through `inspect`: the copy's text lives in linecache only
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(f"_dsakit_{patch.name.replace('-', '_')}_{name.replace('.', '_')}")
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def load_kernel(release: SGLangRelease, mode: Mode, *, kpool: bool = False, patch: SourcePatch | None = None,
                loaded: dict[tuple[str, str], types.ModuleType] | None = None) -> Callable[..., None]:
    """`mode`'s wrapper from the release's module (imported by its name), or where `patch` edits
    this mode from a copy of that module's source exec'd into a module of its own (not in
    sys.modules; nothing of SGLang's changes). `loaded` keeps modules between calls."""
    relative = kernel_file(release, mode, kpool=kpool)
    applied = patch if patch is not None and patch.mode == mode else None
    key = (relative, applied.name if applied else "")
    cache = {} if loaded is None else loaded
    if key not in cache:
        cache[key] = _module(release, relative, applied)
    module = cache[key]
    # 0.5.23 names the KPool wrappers fused_dsa_<mode>_metadata_kpool, 0.5.20-0.5.22 as the plain ones
    for name in (f"{WRAPPERS[mode]}_kpool", WRAPPERS[mode]) if kpool else (WRAPPERS[mode],):
        if hasattr(module, name):
            wrapper: Callable[..., None] = getattr(module, name)
            return wrapper
    raise UsageError(f"{relative} of SGLang {release.version} defines no {WRAPPERS[mode]}")


def build_inputs(case: MetadataCase, device: str, *, seed: int = 0) -> dict[str, Any]:
    """The kernel's inputs and output buffers on `device`, as SGLang's CUDA-graph replay leaves
    them: live requests in shuffled physical pages at shuffled req_to_token rows (row 0 reserved,
    zeros), padded rows after them with seq_len fill 1 at row 0; outputs poisoned."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    live = len(case.kv_lens)
    pages_per_row = case.width // case.page_size
    pool_rows = live + 1
    page_ids = torch.randperm(pool_rows * pages_per_row, generator=generator, dtype=torch.int64) + 1
    offsets = torch.arange(case.page_size, dtype=torch.int64)
    req_to_token = torch.zeros(pool_rows, case.width, dtype=torch.int32)
    for row in range(1, pool_rows):
        pages = page_ids[(row - 1) * pages_per_row: row * pages_per_row]
        req_to_token[row] = (pages[:, None] * case.page_size + offsets[None, :]).reshape(-1).to(torch.int32)
    live_rows = torch.randperm(live, generator=generator, dtype=torch.int64) + 1
    req_pool_indices = torch.cat([live_rows, torch.full((case.padded_rows,), PADDED_REQ_POOL_INDEX, dtype=torch.int64)])
    rows = case.rows

    def poisoned(*shape: int) -> Any:
        return torch.full(shape, POISON, dtype=torch.int32, device=device)

    return {
        "seq_lens": torch.tensor(case.seq_lens, dtype=torch.int64, device=device),
        "req_pool_indices": req_pool_indices.to(device),
        "req_to_token": req_to_token.to(device),
        "extend_seq_lens": torch.full((case.bs,), case.draft_tokens, dtype=torch.int32, device=device),
        "cache_seqlens": poisoned(case.bs),
        "cu_seqlens_k": poisoned(case.bs + 1),
        "page_table_1": poisoned(rows, case.width),
        "seqlens_expanded": poisoned(rows),
        "dsa_cache_seqlens": poisoned(rows),
        "dsa_cu_seqlens_k": poisoned(rows + 1),
        "real_page_table": poisoned(rows, pages_per_row),
    }


OUTPUTS: dict[Mode, tuple[str, ...]] = {
    "decode": ("cache_seqlens", "cu_seqlens_k", "page_table_1", "dsa_cache_seqlens", "dsa_cu_seqlens_k",
               "real_page_table"),
    "target_verify": ("cache_seqlens", "cu_seqlens_k", "page_table_1", "seqlens_expanded", "dsa_cache_seqlens",
                      "dsa_cu_seqlens_k", "real_page_table"),
    "draft_extend": ("cache_seqlens", "cu_seqlens_k", "page_table_1", "seqlens_expanded", "dsa_cache_seqlens",
                     "dsa_cu_seqlens_k", "real_page_table"),
}


def call_arguments(case: MetadataCase, inputs: dict[str, Any], page_keyword: str = "physical_page_size") -> dict[str, Any]:
    """The keyword arguments SGLang's replay passes the wrapper (dsa_backend.py,
    `_apply_cuda_graph_metadata`; draft extend: a static extend length of draft_tokens per request;
    KPool: the partial(..., index_kpool=) of dsa_metadata_manager). `page_keyword`: physical_page_size
    (0.5.23), real_page_size (before)."""
    args = {name: inputs[name] for name in ("seq_lens", "req_pool_indices", "req_to_token", "cache_seqlens",
                                            "cu_seqlens_k", "page_table_1", "dsa_cache_seqlens",
                                            "dsa_cu_seqlens_k", "real_page_table")}
    args.update(bs=case.bs, dsa_index_topk=case.index_topk, **{page_keyword: case.page_size})
    if case.kpool:
        args["index_kpool"] = case.index_kpool
    if case.mode == "decode":
        args.update(max_len=case.width)
    elif case.mode == "target_verify":
        args.update(seqlens_expanded=inputs["seqlens_expanded"], max_seqlen_k=case.width, next_n=case.draft_tokens,
                    paged_mqa_ctx_lens_2d=None)
    else:
        args.update(extend_seq_lens=inputs["extend_seq_lens"], seqlens_expanded=inputs["seqlens_expanded"],
                    total_len=case.rows, max_seqlen_k=case.width, max_extend_len=case.draft_tokens,
                    max_total_len=case.rows, static_extend_len=True)
    return args


def launch(wrapper: Callable[..., None], case: MetadataCase, inputs: dict[str, Any]) -> None:
    """One call of the real wrapper, with the arguments SGLang's replay passes (`call_arguments`)."""
    import inspect

    page_keyword = "physical_page_size" if "physical_page_size" in inspect.signature(wrapper).parameters \
        else "real_page_size"
    wrapper(**call_arguments(case, inputs, page_keyword))


def outputs_of(case: MetadataCase, inputs: dict[str, Any]) -> dict[str, Any]:
    """What the kernel wrote, as CPU tensors."""
    return {name: inputs[name].detach().to("cpu").clone() for name in OUTPUTS[case.mode]}
