"""THE kernel-library table: one `KernelLibrary` record per library SGLang launches kernels through.

Owns what dsakit knows of each: its import name and distributions, the GPU vendors whose nodes install
it, its `module:` gate, whether its frames are toolchain (their device queries see the real GPU), the
JIT caches it writes (`LibraryCache`: tarball name, variable, default, SGLang's redirect) and whether
its version keys the warm cache. The simulation's stand-ins and call-site machinery, the toolchain,
the gate table, the warm's cache roots and key, and the pr-vs-base fingerprint read it; adding a
library is one record here (CONTRIBUTING.md, "Adding a kernel library"). Must not import the
libraries, torch or SGLang.
"""

from __future__ import annotations

from dsakit.errors import UsageError
from dsakit.reasons import FrozenRecord


class LibraryCache(FrozenRecord):
    """One folder a library (or SGLang, torch, the CUDA driver) keeps compiled kernels in.

    name             its name in the warm tarball (jit/<name>/...) and in `jit_caches.cache_roots()`
    variable         the variable naming the folder (with `under`: the folder's base)
    default          where it is without the variable ("~": $HOME, or `home_variable` where set;
                     "{tmp}", "{user}": the temp dir, the user name)
    under            a path below the variable's value or the default (FlashInfer's workspace base)
    home_variable    a variable that stands for "~" in the default (TRITON_HOME)
    sglang_redirect  SGLang 0.5.21+ setdefaults `variable` at `import sglang` to this folder of its
                     cache base ("": the base itself); None: not redirected
    sglang_default   the default under SGLang's cache base where SGLang redirects (its DeepGEMM
                     wrapper sets the library's variable from its own)
    """

    __match_args__ = ("name", "variable", "default", "under", "home_variable", "sglang_redirect", "sglang_default")

    def __init__(self, name: str, variable: str, default: str, *, under: str = "", home_variable: str = "",
                 sglang_redirect: str | None = None, sglang_default: str | None = None) -> None:
        self.__dict__.update(name=name, variable=variable, default=default, under=under,
                             home_variable=home_variable, sglang_redirect=sglang_redirect,
                             sglang_default=sglang_default)

    name: str
    variable: str
    default: str
    under: str
    home_variable: str
    sglang_redirect: str | None
    sglang_default: str | None

    @property
    def moved_by(self) -> str:
        """The variable(s) that move it, for messages."""
        return f"{self.variable} / {self.home_variable}" if self.home_variable else self.variable


class KernelLibrary(FrozenRecord):
    """One kernel library.

    module           its import name (gates, stand-ins, `TopkBackend.library` name it)
    name             dsakit's key for it (the toolchain's, in messages)
    distributions    what pip installs it as, recorded in a pr-vs-base fingerprint (the first: the
                     one whose version keys the warm cache, where `warm_key`)
    vendors          the GPU vendors whose nodes install it: the whole-run simulation stands it in
                     where this machine lacks it (none: installed wherever torch is)
    gate_covered_by  the covered-by clause of its `module:<module>` gate (None: no gate)
    toolchain        what its code does with device queries (compiles, selects, launches kernels for
                     the real GPU), "" where it does none
    caches           the JIT caches it writes
    warm_key         its version is a field of the warm cache's key
    """

    __match_args__ = ("module", "name", "distributions", "vendors", "gate_covered_by", "toolchain", "caches",
                      "warm_key")

    def __init__(self, module: str, name: str, distributions: tuple[str, ...], vendors: tuple[str, ...], *,
                 gate_covered_by: str | None = None, toolchain: str = "", caches: tuple[LibraryCache, ...] = (),
                 warm_key: bool = False) -> None:
        self.__dict__.update(module=module, name=name, distributions=distributions, vendors=vendors,
                             gate_covered_by=gate_covered_by, toolchain=toolchain, caches=caches,
                             warm_key=warm_key)

    module: str
    name: str
    distributions: tuple[str, ...]
    vendors: tuple[str, ...]
    gate_covered_by: str | None
    toolchain: str
    caches: tuple[LibraryCache, ...]
    warm_key: bool

    @property
    def path(self) -> str:
        """The fragment of the file path of its frames."""
        return f"/{self.module}/"

    @property
    def gate(self) -> str | None:
        """Its module gate's code (None: it has none)."""
        return None if self.gate_covered_by is None else f"module:{self.module}"


# sgl_kernel first: importing it picks the binary for the real arch before the others load
KERNEL_LIBRARIES: dict[str, KernelLibrary] = {
    library.module: library
    for library in (
        KernelLibrary("sgl_kernel", "sgl-kernel", ("sgl-kernel",), ("nvidia", "amd"),
                      gate_covered_by="the torch reference implementations cover the kernel contracts",
                      toolchain="sgl-kernel's op selection"),
        KernelLibrary("flashinfer", "flashinfer", ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache"),
                      ("nvidia",),
                      gate_covered_by="the sgl_kernel and torch reference paths cover the same cases",
                      toolchain="flashinfer: its JIT arch list, kernel selection and launches",
                      caches=(LibraryCache("flashinfer", "FLASHINFER_WORKSPACE_BASE", "~", under=".cache/flashinfer",
                                           sglang_redirect=""),),
                      warm_key=True),
        KernelLibrary("flash_mla", "flash-mla", ("flash-mla",), ("nvidia",),
                      gate_covered_by="the sgl_kernel FlashMLA extension or the torch reference covers it",
                      toolchain="FlashMLA"),
        KernelLibrary("deep_gemm", "deep-gemm", ("deep-gemm",), ("nvidia",),
                      gate_covered_by="the torch reference GEMMs cover the indexer logits",
                      toolchain="DeepGEMM's JIT and runtime",
                      # SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR when its DeepGEMM wrapper imports
                      caches=(LibraryCache("deep-gemm", "SGLANG_DG_CACHE_DIR", "~/.cache/deep_gemm",
                                           sglang_default="deep_gemm"),
                              LibraryCache("deep-gemm-own", "DG_JIT_CACHE_DIR", "~/.deep_gemm"))),
        KernelLibrary("tilelang", "tilelang", ("tilelang",), ("nvidia", "amd"),
                      gate_covered_by="the CUDA kernels in sgl_kernel cover the same cases",
                      toolchain="TileLang's JIT target",
                      caches=(LibraryCache("tilelang", "TILELANG_CACHE_DIR", "~/.tilelang/cache",
                                           sglang_redirect="tilelang"),)),
        KernelLibrary("aiter", "aiter", ("aiter",), ("amd",),
                      gate_covered_by="on NVIDIA the CUDA backends cover the same contracts"),
        KernelLibrary("fast_hadamard_transform", "fast-hadamard-transform", ("fast-hadamard-transform",),
                      ("nvidia",)),
        KernelLibrary("tvm_ffi", "tvm-ffi", ("apache-tvm-ffi",), (), toolchain="tvm-ffi's C++/CUDA builds",
                      caches=(LibraryCache("tvm-ffi", "TVM_FFI_CACHE_DIR", "~/.cache/tvm-ffi"),)),
        KernelLibrary("triton", "triton", ("triton",), (),
                      toolchain="Triton's driver and compiler: the target it builds for",
                      caches=(LibraryCache("triton", "TRITON_CACHE_DIR", "~/.triton/cache", home_variable="TRITON_HOME",
                                           sglang_redirect="triton"),),
                      warm_key=True),
    )
}


def kernel_library(module: str) -> KernelLibrary:
    """The record of the library imported as `module`; UsageError naming the known ones."""
    record = KERNEL_LIBRARIES.get(module)
    if record is None:
        raise UsageError(f"kernel library {module!r} has no dsakit KernelLibrary record "
                         f"(dsakit/stack/kernel_libraries.py); known: {', '.join(KERNEL_LIBRARIES)}")
    return record


def installed_on(vendor: str) -> tuple[str, ...]:
    """The import names of the libraries a GPU node of `vendor` installs."""
    return tuple(library.module for library in KERNEL_LIBRARIES.values() if vendor in library.vendors)


def library_paths() -> tuple[str, ...]:
    """The path fragments of every library's frames."""
    return tuple(library.path for library in KERNEL_LIBRARIES.values())


def library_caches() -> tuple[LibraryCache, ...]:
    return tuple(cache for library in KERNEL_LIBRARIES.values() for cache in library.caches)


def distributions() -> tuple[str, ...]:
    return tuple(dist for library in KERNEL_LIBRARIES.values() for dist in library.distributions)
