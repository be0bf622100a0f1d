"""Where each JIT library keeps its compiled kernels on this node, resolved the way the library does.

Owns: the cache-root table (name in the warm tarball, path, what moves it), which root owns a
file when roots nest, listing each root's files once, and which roots record their own absolute
path (usable only there). Must not import torch, SGLang or any JIT library: SGLang's own redirect
of the third-party caches is read from its source, not run.
"""

from __future__ import annotations

import getpass
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dsakit.stack.kernel_libraries import LibraryCache, library_caches

# SGLang's own caches, torch's and the CUDA driver's; each kernel library's comes from its record
# (dsakit.stack.kernel_libraries). SGLANG_CACHE_DIR (default ~/.cache/sglang) is the base of them all.
_STACK_CACHES = (
    # sglang.kernels.jit: SGLANG_JIT_CACHE_DIR or ~/.cache/sglang/jit, not under SGLANG_CACHE_DIR
    LibraryCache("sglang-jit", "SGLANG_JIT_CACHE_DIR", "~/.cache/sglang/jit"),
    LibraryCache("inductor", "TORCHINDUCTOR_CACHE_DIR", "{tmp}/torchinductor_{user}", sglang_redirect="inductor"),
    LibraryCache("cuda", "CUDA_CACHE_PATH", "~/.nv/ComputeCache", sglang_redirect="nv"),
)
_REDIRECT_CALL = "_redirect_third_party_caches()"


def _caches() -> tuple[LibraryCache, ...]:
    return (*_STACK_CACHES[:1], *library_caches(), *_STACK_CACHES[1:])


def cache_names() -> tuple[str, ...]:
    """The name of every cache a JIT or Triton build can write (0.5.21+ keeps them all under SGLANG_CACHE_DIR)."""
    return ("sglang", *(cache.name for cache in _caches()))


def sglang_redirects() -> dict[str, str]:
    """The variables SGLang 0.5.21+ sets (setdefault) when `sglang` is imported, relative to its cache
    base (sglang.srt.environ.third_party_cache_defaults; "": the base itself)."""
    return {cache.variable: cache.sglang_redirect for cache in _caches() if cache.sglang_redirect is not None}


@dataclass(frozen=True)
class CacheRoot:
    name: str  # the member prefix in the warm tarball: jit/<name>/...
    path: Path
    moved_by: str  # the variable(s) that move it, for messages


def _expand(path: str, env: Mapping[str, str], home: str | None = None) -> Path:
    # expanduser through the given env's HOME (or `home`), as the libraries' os.path.expanduser does
    if path == "~" or path.startswith("~/"):
        return Path(home or env.get("HOME") or str(Path.home()), path[2:])
    return Path(path)


def sglang_redirects_caches(sglang_dir: Path | None) -> bool:
    """Whether this SGLang points Triton, inductor, FlashInfer, TileLang and the CUDA cache at
    its own cache dir on import (0.5.21 and later: `sglang/__init__.py` calls the redirect)."""
    if sglang_dir is None:
        return False
    try:
        return _REDIRECT_CALL in (sglang_dir / "__init__.py").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _sglang_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def env_after_sglang_import(env: Mapping[str, str] | None = None, *, redirects: bool | None = None) -> dict[str, str]:
    """The cache variables a test process sees once it imported SGLang: `env` plus SGLang's
    setdefault redirect where the installed release makes one."""
    out = dict(os.environ if env is None else env)
    if redirects is None:
        redirects = sglang_redirects_caches(_sglang_dir())
    if redirects:
        base = _expand(out.get("SGLANG_CACHE_DIR") or "~/.cache/sglang", out)
        for name, sub in sglang_redirects().items():
            out.setdefault(name, str(base / sub) if sub else str(base))
    return out


def _user() -> str:
    try:
        name = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        name = f"uid_{os.getuid()}"
    return re.sub(r'[\\/:*?"<>|]', "_", name)


def cache_roots(env: Mapping[str, str] | None = None, *, redirects: bool | None = None) -> dict[str, CacheRoot]:
    """Every JIT cache a warm node holds, by tarball name. Defaults are the libraries' own (none of
    them reads XDG_CACHE_HOME); `redirects` says whether SGLang's import redirect applies (read
    from the installed SGLang when None)."""
    e = env_after_sglang_import(env, redirects=redirects)
    sglang = _expand(e.get("SGLANG_CACHE_DIR") or "~/.cache/sglang", e)
    redirected = sglang_redirects_caches(_sglang_dir()) if redirects is None else redirects
    roots = (CacheRoot("sglang", sglang, "SGLANG_CACHE_DIR (default ~/.cache/sglang)"),
             *(CacheRoot(cache.name, _path(cache, e, sglang if redirected else None), cache.moved_by)
               for cache in _caches()))
    out = {root.name: root for root in roots}
    if redirected:
        # SGLang's redirect is a setdefault at `import sglang`: a library loaded before it (FlashInfer
        # fixes its workspace at its own import; Triton, inductor, TileLang, CUDA read theirs when they
        # build) still writes to its own default
        before = dict(os.environ if env is None else env)
        plain = cache_roots(before, redirects=False)
        for cache in _caches():
            name = cache.name
            if cache.sglang_redirect is not None and cache.variable not in before \
                    and plain[name].path != out[name].path:
                out[f"{name}-before-sglang"] = CacheRoot(
                    f"{name}-before-sglang", plain[name].path, f"{plain[name].moved_by} (loaded before `import sglang`)")
    return out


def _path(cache: LibraryCache, e: Mapping[str, str], sglang: Path | None) -> Path:
    """Where `cache` is under the variables `e` (`sglang`: SGLang's cache base where it redirects)."""
    value = e.get(cache.variable)
    if value:
        base = _expand(value, e)
    elif sglang is not None and cache.sglang_default is not None:
        base = sglang / cache.sglang_default
    else:
        default = cache.default.format(tmp=e.get("TMPDIR") or tempfile.gettempdir(), user=_user()) \
            if "{" in cache.default else cache.default
        home = e.get(cache.home_variable) if cache.home_variable else None
        base = _expand(default, e, str(_expand(home, e)) if home else None)
    return base / cache.under if cache.under else base


def owner(file: Path, roots: Mapping[str, CacheRoot]) -> str | None:
    """The name of the deepest root holding `file` (0.5.21 keeps Triton's cache inside SGLang's:
    its files belong to `triton`, so a node whose TRITON_CACHE_DIR differs gets them where it reads)."""
    best: tuple[int, str] | None = None
    for name, root in roots.items():
        if file.is_relative_to(root.path):
            depth = len(root.path.parts)
            if best is None or depth > best[0]:
                best = (depth, name)
    return best[1] if best else None


def cache_files(roots: dict[str, Path], names: Sequence[str] | None = None) -> Iterator[tuple[str, str, Path]]:
    """(root name, path relative to it, file) for every regular file of the roots named (all when
    None), each once: a file inside nested roots belongs to the deepest (`jit_caches.owner`).
    Locks and symlinks are left out."""
    table = {name: CacheRoot(name, path, "") for name, path in roots.items()}
    for name in roots if names is None else names:
        root = roots[name]
        for file in sorted(root.rglob("*")) if root.is_dir() else ():
            if not file.is_symlink() and file.is_file() and not file.name.endswith(".lock") \
                    and owner(file, table) == name:
                yield name, file.relative_to(root).as_posix(), file


# Files in which a library writes absolute paths into its own cache. FlashInfer's ninja build file
# and logs key every object by its absolute path (elsewhere ninja finds no log entry and recompiles:
# the top-k module, ~200 s on an H200); Triton's `__grp__*.json` lists each artifact by absolute
# path and a missing one is a cache miss. SGLang's own JIT leaves (`sgl_deps.json`) are anchored.
_PATH_RECORDS = ("build.ninja", ".ninja_log", ".ninja_deps")


def records_own_path(root: Path, files: Iterable[Path]) -> Path | None:
    """The first of `files` (of `root`) that names `root`'s absolute path: the root's builds are
    then found only at that path, not wherever the same HOME-relative folder lies elsewhere."""
    needles = {str(root).encode(), str(root.resolve()).encode()}
    for file in files:
        if file.name in _PATH_RECORDS or file.suffix == ".json":
            try:
                data = file.read_bytes()
            except OSError:
                continue
            if any(needle in data for needle in needles):
                return file
    return None
