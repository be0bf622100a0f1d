"""The SGLang release under test, its file layout and its feature checks.

dsakit supports several SGLang releases at once (0.5.23 on CPU CI, the 0.5.17 stack on the H200),
so code asks for *features*, never for version numbers. Every check reads source files (text or
AST, through `dsakit.stack.sglang_source`) of the installed package or of a source tree: nothing here
imports SGLang or torch, so checks are cheap at collection time and work on a tree that cannot be
imported on this machine. A leaf of the layering (imports only dsakit.errors, dsakit.reasons and the source
index): the gates, the SGLang adapters in
dsakit.sglang_facts, dsakit.simulation, top-k, warm, compare and audit all read it.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord

MODEL_RUNNER_FILE = "srt/model_executor/model_runner.py"
DSA_BACKEND_FILE = "srt/layers/attention/dsa_backend.py"
DEEPSEEK_V4_BACKEND_FILE = "srt/layers/attention/deepseek_v4_backend.py"
DSA_TOPK_BACKEND_FILE = "srt/layers/attention/dsa/dsa_topk_backend.py"
TOPK_V2_FILE = "kernels/ops/attention/dsv4/topk.py"
HIP_RADIX_FILE = "srt/layers/attention/deepseek_v4_backend_hip_radix.py"
RUNTIME_CONTEXT_FILE = "srt/runtime_context.py"
ENVIRON_FILE = "srt/environ.py"
SERVER_ARGS_FILE = "srt/server_args.py"
KIT_DSA_FILE = "test/kits/attention_unittest/attention_methods/dsa_attention.py"
V41_INDEXER_FILE = "srt/layers/attention/dsv4/v41_indexer/__init__.py"
MLA_BUFFER_FILE = "kernels/ops/kvcache/mla_buffer.py"
DSV41_SPARSE_FILE = "srt/layers/attention/dsv4/dsv41_sparse.py"
# The fused DSA metadata Triton kernels (decode, target verify, draft extend): 0.5.23's place first,
# then 0.5.17-0.5.22's.
DSA_METADATA_KERNEL_FILES = ("kernels/ops/attention/dsa/metadata.py", "kernels/ops/attention/dsa_metadata.py")
# Their KPool variants (SGLANG_EXPERIMENTAL_DSA_KPOOL_METADATA_FUSION), one file per mode, from 0.5.20 on.
DSA_KPOOL_METADATA_DIRS = ("kernels/ops/attention/dsa/kpool_metadata", "kernels/ops/attention/dsa_kpool_metadata")
# Where ServerArgs fields are declared: the class body (0.5.17) or its field namespaces (0.5.23).
SERVER_ARGS_FILES = (SERVER_ARGS_FILE, "srt/arg_groups/fields")
# What the runner-read scan reads directly: the DSA and DeepSeek-V4 backends and the dsa/, nsa/ helpers.
RUNNER_READER_FILES = (DSA_BACKEND_FILE, DEEPSEEK_V4_BACKEND_FILE, "srt/layers/attention/dsa",
                       "srt/layers/attention/nsa")
# Where the backends make branch decisions (the probe scan): construction, metadata, the
# backend-class choice and the DSv4 pools (files or folders; folders not recursive).
PROBE_SCAN_FILES = (
    DSA_BACKEND_FILE,
    DEEPSEEK_V4_BACKEND_FILE,
    "srt/layers/attention/attention_registry.py",
    "srt/layers/attention/dsa",
    "srt/layers/attention/dsv4",
    "srt/layers/attention/dsv4/v41_indexer",
    "srt/mem_cache/deepseek_v4_memory_pool.py",
    "srt/mem_cache/deepseek_v4_compress_state.py",
    "kernels/ops/attention/utils.py",
    "kernels/ops/attention/flash_mla_sm120.py",
    "kernels/ops/attention/dsv4",
)

# ---------------------------------------------------------------- THE release table
# Every SGLang release dsakit is tested against, oldest first, and the one the CPU recipe pins
# (requirements/cpu-sglang-<PINNED_RELEASE>.txt, shipped as dsakit/recipes/). Read by the probe rows
# (device_probes: "from 0.5.21 on" takes a new release in), the runner-site table
# (scripts/runner_sites.py), the recipes (dsakit.recipes), and scripts/env.sh and .ci/run (through
# scripts/releases.py): CI runs the main job on each. Adding a release is one entry here
# (CONTRIBUTING.md, "Adding an SGLang release"). Compare releases with `release_key` only.
SUPPORTED_RELEASES = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
PINNED_RELEASE = "0.5.23"

# Known names of the fused top-k v2 kernel (page-table fold), newest first.
TOPK_V2_KERNEL_NAMES = ("topk_transform_paged_v2", "topk_transform_512_v2")


# a PEP 440 release as SGLang publishes them: 0.5.23, 0.6.0, 0.5.10.post1, 0.5.0rc2, 0.5.24.dev3; a
# local label (0.5.23+cu128, a build's) compares as its release
_RELEASE = re.compile(r"v?(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?(?:\+[a-zA-Z0-9.]+)?")
_PRE = {"a": 0, "b": 1, "rc": 2}

ReleaseKey = tuple[tuple[int, ...], int, int, int, int]  # numbers, pre-release phase and number, post, dev


def release_key(version: str) -> ReleaseKey:
    """`version` as a key that compares as releases compare: 0.6.0 > 0.5.23 > 0.5.9, 0.5.10rc1 <
    0.5.10 == 0.5.10.0 < 0.5.10.post1; a dev release before its release. UsageError for text that
    is no release number."""
    match = _RELEASE.fullmatch(version.strip())
    if match is None:
        raise UsageError(f"{version!r} is not an SGLang release number (e.g. 0.5.23, 0.6.0, 0.5.10.post1)")
    numbers = tuple(int(n) for n in match.group(1).split("."))
    while len(numbers) > 1 and numbers[-1] == 0:  # 0.6 is 0.6.0
        numbers = numbers[:-1]
    phase, pre, post, dev = match.group(2), match.group(3), match.group(4), match.group(5)
    pre_key = (_PRE[phase], int(pre)) if phase else (3, 0)  # a release sorts after its pre-releases
    # a dev release sorts before what it leads to: 0.5.24.dev3 < 0.5.24rc1 < 0.5.24
    if dev is not None and phase is None and post is None:
        pre_key = (-1, 0)
    return (numbers, *pre_key, -1 if post is None else int(post), int(dev) if dev is not None else 1 << 30)


def release_numbers(version: str) -> tuple[int, ...]:
    """The release numbers of `version`, as `release_key` reads them (0.5.23.post1 -> (0, 5, 23),
    0.6.0 -> (0, 6)); () for text that is no release number ("unknown", "not installed")."""
    try:
        return release_key(version)[0]
    except UsageError:
        return ()


def release_order(text: str) -> tuple[int, ReleaseKey | tuple[()], str]:
    """A sort key for shown lists: release numbers in release order, then any other text
    ("unknown", "not installed") in text order."""
    try:
        return (0, release_key(text), text)
    except UsageError:
        return (1, (), text)


def releases_from(first: str, releases: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The supported releases from `first` on: open-ended, so a release added to the table is in."""
    floor = release_key(first)
    return tuple(r for r in (SUPPORTED_RELEASES if releases is None else releases) if release_key(r) >= floor)


def releases_between(first: str, last: str, releases: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The supported releases from `first` to `last`, both included (what a later release dropped)."""
    low, high = release_key(first), release_key(last)
    return tuple(r for r in (SUPPORTED_RELEASES if releases is None else releases) if low <= release_key(r) <= high)


class Feature(FrozenRecord):
    """A checked capability of the SGLang source; `missing` says what lacks it and what has it."""

    __match_args__ = ('code', 'description', 'missing')

    def __init__(self, code: str, description: str, missing: str) -> None:
        self.__dict__.update(code=code, description=description, missing=missing)

    code: str
    description: str
    missing: str


FEATURES: dict[str, Feature] = {
    f.code: f
    for f in (
        Feature(
            "dsa-backend",
            "DeepseekSparseAttnBackend (srt/layers/attention/dsa_backend.py)",
            "this SGLang has no DSA backend; SGLang 0.5.17 and 0.5.23 have one",
        ),
        Feature(
            "deepseek-v4-backend",
            "DeepseekV4AttnBackend (srt/layers/attention/deepseek_v4_backend.py)",
            "this SGLang has no DeepSeek-V4 backend; SGLang 0.5.17 and 0.5.23 have one",
        ),
        Feature(
            "topk-role-split",
            "DSATopKBackend.resolve(model_runner): target reads --dsa-topk-backend, draft reads "
            "--speculative-dsa-topk-backend",
            "needs the per-role top-k split (DSATopKBackend.resolve); SGLang 0.5.17 has one flag "
            "for both roles, 0.5.23 has the split",
        ),
        Feature(
            "runtime-context-overrides",
            "sglang.srt.runtime_context.get_context().override_server_args(...)",
            "needs runtime_context.override_server_args; present in 0.5.17 and 0.5.23",
        ),
        Feature(
            "dsv4-verify-without-prep",
            "DeepseekV4AttnBackend.init_forward_metadata_target_verify_old: the target-verify metadata "
            "path SGLANG_PREP_IN_CUDA_GRAPH=0 selects",
            "SGLang 0.5.23 removed SGLANG_PREP_IN_CUDA_GRAPH and init_forward_metadata_target_verify_old "
            "(verify metadata is always built by make_forward_metadata_from_raw_verify); 0.5.17 has both",
        ),
        Feature(
            "kv-index-translator",
            "ModelRunner.init_kv_index_translator: runner.kv_index_translator (a KVIndexTranslator)",
            "needs ModelRunner.kv_index_translator; SGLang 0.5.23 has it, 0.5.17 does not",
        ),
        Feature(
            "runner-draft-attention-backend",
            "ModelRunner.draft_attention_backend (the draft runner's own attention backend name)",
            "needs ModelRunner.draft_attention_backend; SGLang 0.5.23 has it, 0.5.17 does not",
        ),
        Feature(
            "runner-tp-size",
            "ModelRunner.tp_size (set by ModelRunner itself; 0.5.21's EAGLE draft CUDA-graph runner reads it)",
            "needs ModelRunner to set tp_size; SGLang 0.5.21 does, 0.5.23 does not",
        ),
        Feature(
            "runner-capture-tail-hooks",
            "ModelRunner.capture_tail_hooks (hooks run after each captured CUDA-graph forward)",
            "needs ModelRunner to set capture_tail_hooks; SGLang 0.5.17-0.5.23 do, 0.5.14 does not",
        ),
        Feature(
            "runner-tp-group",
            "ModelRunner.tp_group (set by ModelRunner itself)",
            "needs ModelRunner to set tp_group; SGLang 0.5.17 does, 0.5.23 does not",
        ),
        Feature(
            "runner-parallel-state",
            "ModelRunner.ps (a ParallelState: tp/dp/pp sizes and ranks of this worker)",
            "needs ModelRunner.ps; SGLang 0.5.17 has it, 0.5.23 reads the parallel context instead",
        ),
        Feature(
            "attention-unittest-kit",
            "SGLang's attention unit-test kit with DSA fixtures (sglang/test/kits/attention_unittest)",
            "needs sglang/test/kits/attention_unittest/attention_methods/dsa_attention.py; the wheels "
            "of SGLang 0.5.17 and 0.5.23 ship it",
        ),
        Feature(
            "topk-v2-fold",
            "the fused top-k v2 JIT kernel that folds the page table into selection",
            "needs the top-k v2 JIT (kernels/ops/attention/dsv4/topk.py: topk_transform_512_v2 in "
            "0.5.17, topk_transform_paged_v2 in 0.5.23)",
        ),
        Feature(
            "dsv4-builds-without-gpu",
            "DeepseekV4AttnBackend.__init__ building on a host without CUDA (dsv4/v41_indexer's "
            "is_sm100_or_newer asks is_cuda() before torch.cuda.get_device_capability())",
            "SGLang 0.5.21's DeepseekV4AttnBackend.__init__ calls torch.cuda.get_device_capability() "
            "unguarded (dsv4/v41_indexer is_sm100_or_newer), so it needs a GPU; 0.5.17-0.5.20 have no "
            "v41 indexer and 0.5.22 guards it with is_cuda()",
        ),
        Feature(
            "mla-kv-write-without-triton",
            "DSATokenToKVPool.set_mla_kv_buffer on a host without a GPU (kernels/ops/kvcache/mla_buffer.py: "
            "the torch scatter set_mla_kv_buffer_naive where the platform has no Triton)",
            "this SGLang writes the MLA KV cache only through a Triton kernel, which needs a GPU driver; "
            "0.5.22 and 0.5.23 fall back to a torch scatter on CPU",
        ),
        Feature(
            "dsa-metadata-kernels",
            "the fused DSA metadata Triton kernels fused_dsa_{decode,target_verify,draft_extend}_metadata "
            "(kernels/ops/attention/dsa/metadata.py; dsa_metadata.py before 0.5.23)",
            "this SGLang has no fused DSA metadata kernels; SGLang 0.5.17-0.5.23 have them",
        ),
        Feature(
            "dsa-kpool-metadata-kernels",
            "the KPool variants of the fused DSA metadata kernels (kernels/ops/attention/dsa/kpool_metadata/; "
            "dsa_kpool_metadata/ before 0.5.23)",
            "this SGLang has no KPool metadata kernels; SGLang 0.5.20-0.5.23 have them, 0.5.17-0.5.19 do not",
        ),
        Feature(
            "dsv41-low-ratio-sources",
            "DeepseekV4AttnBackend.forward_low_ratio_sources with DeepSeek-V4.1's compressor "
            "(srt/layers/attention/dsv4/dsv41_sparse.py: DeepseekV41Compressor), the low-ratio layers' "
            "index-key and latent store",
            "this SGLang has no DeepSeek-V4.1 low-ratio sources (forward_low_ratio_sources, "
            "dsv4/dsv41_sparse.py); SGLang 0.5.21-0.5.23 have them, 0.5.17-0.5.20 do not",
        ),
        Feature(
            "hip-radix-reads-model",
            "DeepseekV4HipRadixBackend.__init__ reading model_runner.model (the AMD DeepSeek-V4 backend)",
            "this SGLang's AMD DeepSeek-V4 backend does not read model_runner.model (0.5.17 does not, "
            "0.5.23 does)",
        ),
    )
}


def _reads_text(path: Path, text: str) -> bool:
    return text in sglang_source.text(path)


def _defined_in_text(text: str, name: str) -> bool:
    """True where the text plainly defines `name` at its place (a `def` / `class` at column 0; a
    method's `def` at its class body's indentation): no parse, which costs a run that evaluates
    `sglang:topk-role-split` ~22 M instructions (bench/README.md, "Kit overhead"). False means "not
    found this way": the caller asks the AST (`_defined_names`), whose answer is the exact one."""
    owner, _, leaf = name.rpartition(".")
    if not owner:
        found = re.search(rf"^(?:(?:async\s+)?def|class)\s+{re.escape(leaf)}\b", text, re.M)
        return found is not None and _outside_strings(text[:found.start()])
    header = re.search(rf"^class\s+{re.escape(owner)}\b[^\n]*\n", text, re.M)
    if header is None or "." in owner or not _outside_strings(text[:header.start()]):
        return False
    indent = None
    offset = header.end()
    for line in text[header.end():].splitlines(keepends=True):
        start, offset = offset, offset + len(line)
        stripped = line.lstrip()
        if not stripped.strip() or stripped.startswith("#"):
            continue
        width = len(line) - len(stripped)
        if width == 0:
            return False  # the class body ended (or a string at column 0: the AST decides)
        if indent is None:
            indent = width
        if width == indent and re.match(rf"(?:async\s+)?def\s+{re.escape(leaf)}\s*\(", stripped):
            return _outside_strings(text[:start])
    return False


def _outside_strings(before: str) -> bool:
    """Is what follows `before` outside a triple-quoted string (an even count of each quote)?"""
    return before.count('"""') % 2 == 0 and before.count("'''") % 2 == 0


def _defined_names(path: Path) -> frozenset[str]:
    """Top-level function/class names and method names (as Class.method) defined in a file."""
    tree = sglang_source.tree(path)
    if tree is None:
        return frozenset()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    names.add(f"{node.name}.{item.name}")
    return frozenset(names)


def _capability_read_guarded(path: Path, function: str) -> bool:
    """Does top-level `function` of `path` ask is_cuda() before reading the device capability?

    True where the file or the function is absent (nothing reads it); False where a
    `get_device_capability` call is reached without an `is_cuda()` call in the same expression
    or an earlier statement of the function."""
    tree = sglang_source.tree(path)
    if tree is None:
        return True
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == function):
            continue
        guarded = False
        for statement in node.body:
            calls = {_called_name(c) for c in ast.walk(statement) if isinstance(c, ast.Call)}
            guarded = guarded or "is_cuda" in calls
            if "get_device_capability" in calls and not guarded:
                return False
    return True


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


class SGLangRelease(FrozenRecord):
    """One SGLang source tree: the installed package or an unpacked one.

    `package_dir` is the directory of the `sglang` package itself (holding `srt/`)."""

    __match_args__ = ('package_dir', 'version')

    def __init__(self, package_dir: Path, version: str) -> None:
        self.__dict__.update(package_dir=package_dir, version=version)

    package_dir: Path
    version: str

    def file(self, relative: str) -> Path:
        return self.package_dir / relative

    def defines(self, relative: str, name: str) -> bool:
        """Does the file define `name` (a top-level function or class, or `Class.method`)?"""
        path = self.file(relative)
        return _defined_in_text(sglang_source.text(path), name) or name in _defined_names(path)

    def python_files(self, entries: tuple[str, ...]) -> list[Path]:
        """The `.py` files of `entries` (files, or folders: not recursive) that this tree has, in order."""
        found: list[Path] = []
        for entry in entries:
            path = self.file(entry)
            if path.is_dir():
                found.extend(sorted(path.glob("*.py")))
            elif path.is_file():
                found.append(path)
        return found

    @property
    def dsa_metadata_kernel_file(self) -> str | None:
        """Where this tree's fused DSA metadata kernels live (relative to the package), None where it has none."""
        for relative in DSA_METADATA_KERNEL_FILES:
            if self.defines(relative, "fused_dsa_draft_extend_metadata"):
                return relative
        return None

    @property
    def dsa_kpool_metadata_dir(self) -> str | None:
        """Where this tree's KPool metadata kernels live (a folder: decode.py, verify.py, draft_extend.py)."""
        for relative in DSA_KPOOL_METADATA_DIRS:
            if self.file(f"{relative}/draft_extend.py").is_file():
                return relative
        return None

    @property
    def topk_v2_kernel_name(self) -> str | None:
        for name in TOPK_V2_KERNEL_NAMES:
            if self.defines(TOPK_V2_FILE, name):
                return name
        return None

    def assigns_on_runner(self, name: str) -> bool:
        """Does model_runner.py assign `self.<name> = ...` (a text check: no AST, no import)?"""
        text = sglang_source.text(self.file(MODEL_RUNNER_FILE))
        return re.search(rf"\bself\.{re.escape(name)}\s*(:[^=]*)?=[^=]", text) is not None

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise UsageError(
                f"unknown SGLang feature {feature!r}; known features: {', '.join(sorted(FEATURES))}"
            )
        checks: dict[str, Callable[[], bool]] = {
            "dsa-backend": lambda: self.file(DSA_BACKEND_FILE).is_file(),
            "deepseek-v4-backend": lambda: self.file(DEEPSEEK_V4_BACKEND_FILE).is_file(),
            "topk-role-split": lambda: self.defines(DSA_TOPK_BACKEND_FILE, "DSATopKBackend.resolve"),
            "runtime-context-overrides": lambda: self.defines(
                RUNTIME_CONTEXT_FILE, "RuntimeContext.override_server_args"
            ),
            "topk-v2-fold": lambda: self.topk_v2_kernel_name is not None,
            "dsa-metadata-kernels": lambda: self.dsa_metadata_kernel_file is not None,
            "dsa-kpool-metadata-kernels": lambda: self.dsa_kpool_metadata_dir is not None,
            "dsv4-verify-without-prep": lambda: self.defines(
                DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4AttnBackend.init_forward_metadata_target_verify_old"
            ),
            "kv-index-translator": lambda: self.defines(MODEL_RUNNER_FILE, "ModelRunner.init_kv_index_translator"),
            "runner-draft-attention-backend": lambda: self.assigns_on_runner("draft_attention_backend"),
            "runner-tp-size": lambda: self.assigns_on_runner("tp_size"),
            "runner-tp-group": lambda: self.assigns_on_runner("tp_group"),
            "runner-capture-tail-hooks": lambda: self.assigns_on_runner("capture_tail_hooks"),
            "runner-parallel-state": lambda: self.assigns_on_runner("ps"),
            "attention-unittest-kit": lambda: self.file(KIT_DSA_FILE).is_file(),
            "hip-radix-reads-model": lambda: _reads_text(self.file(HIP_RADIX_FILE), "model_runner.model."),
            "dsv4-builds-without-gpu": lambda: _capability_read_guarded(self.file(V41_INDEXER_FILE),
                                                                        "is_sm100_or_newer"),
            "mla-kv-write-without-triton": lambda: self.defines(MLA_BUFFER_FILE, "set_mla_kv_buffer_naive"),
            "dsv41-low-ratio-sources": lambda: (
                self.defines(DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4AttnBackend.forward_low_ratio_sources")
                and self.defines(DSV41_SPARSE_FILE, "DeepseekV41Compressor")
            ),
        }
        return bool(checks[feature]())

    def features(self) -> dict[str, bool]:
        return {code: self.has(code) for code in FEATURES}

    def describe(self) -> str:
        on = [code for code, present in self.features().items() if present]
        return f"SGLang {self.version} at {self.package_dir} (features: {', '.join(on) or 'none'})"


def _version_from_tree(package_dir: Path) -> str:
    """`__version__` from the generated `_version.py` (wheels, built checkouts) or `version.py`."""
    for name in ("_version.py", "version.py"):
        tree = sglang_source.tree(package_dir / name)
        if tree is None:
            continue
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) else [])
            value = getattr(node, "value", None)
            if (
                any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in targets)
                and isinstance(value, ast.Constant)
            ):
                return str(value.value)
    return "unknown"


def release_from_tree(path: str | Path) -> SGLangRelease:
    """An SGLang source tree: a checkout (`python/sglang` inside), an unpacked wheel, or the package dir."""
    root = Path(path).expanduser()
    candidates = [root, root / "sglang", root / "python" / "sglang"]
    for candidate in candidates:
        if (candidate / MODEL_RUNNER_FILE).is_file():
            return SGLangRelease(candidate.resolve(), _version_from_tree(candidate))
    raise UsageError(
        f"{root} is not an SGLang source tree: expected {MODEL_RUNNER_FILE} under it, under "
        f"{root}/sglang or under {root}/python/sglang (an SGLang checkout or an unpacked wheel)"
    )


@functools.lru_cache(maxsize=1)
def installed_release() -> SGLangRelease:
    """The SGLang this interpreter would import, located without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(
            "SGLang is not installed in this environment: install it (`dsakit env` prints the "
            "pinned CPU recipe) or pass --sglang-src DIR pointing at an SGLang tree"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    # The imported tree's own version file first: a release put on PYTHONPATH over an installed one
    # is what runs, while the distribution metadata still names the installed one.
    version = _version_from_tree(package_dir)
    if version == "unknown":
        try:
            version = importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            pass
    return SGLangRelease(package_dir.resolve(), version)
