"""`dsakit warm --export PATH` / `--import PATH`: a warm node's JIT caches and SGLang bytecode as one
keyed tarball, so a fresh node is warm in seconds.

Owns: the cache key (GPU arch, torch / SGLang / flashinfer / triton versions, Python, the install
path the caches and bytecode are keyed by), writing the tarball (every root of
`dsakit.warm.jit_caches` with its path, dsakit's warm stamps, the bytecode of the whole import
chain) and the safe, key- and path-checked extraction. Must not build anything (`dsakit.warm.targets`
does) and imports no torch or SGLang.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from dsakit.errors import UsageError
from dsakit.stack.kernel_libraries import KERNEL_LIBRARIES
from dsakit.warm import jit_caches
from dsakit.output_paths import output_file

KEY_MEMBER = "dsakit-warm-key.json"
ROOTS_MEMBER = "dsakit-warm-roots.json"  # each root's path on the exporting node, and whether it records it
# 2: the libraries' own cache roots (1 read XDG_CACHE_HOME, which none of them does, and missed
# SGLang 0.5.21's redirected caches), DeepGEMM / TileLang / inductor / CUDA caches, warm stamps.
# 3: the roots' paths (a root that records its own path is refused elsewhere) and the bytecode of
# every module of the chain by absolute path (2 carried only what lies under SGLang's install folder)
FORMAT = 3
# the key's versions: torch, SGLang and each kernel library whose record says its version keys the cache
DISTRIBUTIONS = {"torch": "torch", "sglang": "sglang",
                 **{library.module: library.distributions[0] for library in KERNEL_LIBRARIES.values() if library.warm_key}}
STAMPS = "dsakit-stamps"  # the tarball name of dsakit's warm stamps (`dsakit.warm.stamp.state_dir`)


def cache_roots() -> dict[str, Path]:
    """The JIT caches a warm node holds and dsakit's warm stamps, by their name in the tarball."""
    from dsakit.warm.jit_caches import cache_roots as library_roots
    from dsakit.warm.stamp import state_dir

    return {**{name: root.path for name, root in library_roots().items()}, STAMPS: state_dir()}


def install_root(package: str = "sglang") -> Path | None:
    """The folder `package` is installed in (its bytecode and the JIT caches' paths depend on it)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def _version(distribution: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def gpu_arch(device: Any) -> str:
    if device.vendor == "amd":
        return str(device.gfx or "gfx-unknown")
    if device.vendor == "nvidia":
        return f"sm{device.sm[0]}{device.sm[1]}" if device.sm else "sm-unknown"
    return "cpu"


def current_key(device_name: str | None = None) -> dict[str, Any]:
    from dsakit.gates.device_model import resolve_device

    return stack_key(resolve_device(device_name))


def stack_key(device: Any) -> dict[str, Any]:
    """What a cache (and a warm stamp) is valid for: this device's arch and this software stack."""
    root = install_root()
    return {"format": FORMAT, "gpu_arch": gpu_arch(device),
            "python": ".".join(map(str, sys.version_info[:2])),
            **{name: _version(dist) for name, dist in DISTRIBUTIONS.items()},
            "install_path": str(root) if root else None}


def key_mismatch(expected: dict[str, Any], found: dict[str, Any]) -> list[str]:
    """'field: cache X, this node Y' for every differing field."""
    return [f"{name}: cache {found.get(name)!r}, this node {expected.get(name)!r}"
            for name in expected if expected.get(name) != found.get(name)]


# ---------------------------------------------------------------- export


@dataclass
class ExportResult:
    path: str
    files: dict[str, int]  # per cache (and "bytecode"): files written
    bytes: int
    seconds: float
    path_bound: list[str] = field(default_factory=list)  # roots that record their own absolute path


def _stamped_sources(key: dict[str, Any], modules: Sequence[str]) -> list[str] | None:
    """The import chain's sources as the bytecode warm-up's stamp lists them, when it was made for
    this stack and these modules: listing them again costs a child import of the whole chain."""
    from dsakit.warm.stamp import inputs_digest, read_stamp, state_dir
    from dsakit.warm.bytecode import stamp_inputs

    stamp = read_stamp(state_dir() / "sglang-bytecode.json")
    if (stamp is None or stamp.get("key") != key
            or stamp.get("inputs") != inputs_digest(stamp_inputs(modules))):
        return None
    sources = (stamp.get("evidence") or {}).get("sources")
    return sources if isinstance(sources, list) and sources else None


def bytecode_dirs() -> list[Path]:
    """The folders this interpreter imports the stack from (sys.path, less its own standard library,
    which the Python version in the key stands for): the only places bytecode is written to."""
    import sysconfig

    stdlib = {Path(sysconfig.get_paths()[name]).resolve() for name in ("stdlib", "platstdlib")}
    out: list[Path] = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        in_stdlib = any(path.is_relative_to(d) for d in stdlib) and not {"site-packages", "dist-packages"} & set(path.parts)
        if path.is_dir() and path not in out and not in_stdlib:
            out.append(path)
    return out


def _bytecode_files(modules: Sequence[str], sources: Sequence[str] | None = None) -> list[Path]:
    """The valid .pyc of every module of the import chain of `modules` (its `sources` when known)
    that lies beside its source in a sys.path folder: torch's and transformers' as much as SGLang's
    (a node that writes no bytecode recompiles each one missing on every import: the 0.5.21 chain
    imports in 25.4 s with its bytecode, 48.9 s without, on this project's CPU box)."""
    import importlib.util

    from dsakit.warm.bytecode import _needs_compile, imported_sources

    if sources is None:
        sources, _failed = imported_sources(modules)
    dirs = bytecode_dirs()
    out = []
    for source in sources:
        if _needs_compile(source):
            continue
        cached = Path(importlib.util.cache_from_source(source))
        if cached.parent.parent != Path(source).parent:  # in a PYTHONPYCACHEPREFIX elsewhere
            continue
        if any(cached.resolve().is_relative_to(d) for d in dirs):
            out.append(cached)
    return out


def chain_bytecode(key: dict[str, Any] | None = None, modules: Sequence[str] | None = None) -> list[Path]:
    """The valid .pyc of the import chain of `modules` (by default the bytecode warm-up's) that an
    export carries: its sources from the warm-up's stamp when it holds for this stack, else listed
    by a child import."""
    from dsakit.warm.bytecode import SGLANG_IMPORTS

    chain = modules or SGLANG_IMPORTS
    return _bytecode_files(chain, _stamped_sources(key or current_key(), chain))


def export_cache(path: str, *, device_name: str | None = None, modules: Sequence[str] | None = None) -> ExportResult:
    tic = time.perf_counter()
    key = current_key(device_name)
    files: dict[str, int] = {}
    out = output_file(path, "--export")
    with out.open() as stream, tarfile.open(fileobj=stream, mode="w:gz", compresslevel=1) as tar:
        _add_json(tar, KEY_MEMBER, key)
        roots = cache_roots()
        files.update((name, 0) for name in roots)
        held: dict[str, list[Path]] = {name: [] for name in roots}
        for name, rel, file in jit_caches.cache_files(roots):
            tar.add(file, f"jit/{name}/{rel}", recursive=False)
            files[name] = files.get(name, 0) + 1
            held[name].append(file)
        pycs = chain_bytecode(key, modules)
        for pyc in pycs:
            tar.add(pyc, f"bytecode/{pyc.relative_to(pyc.anchor).as_posix()}", recursive=False)
        files["bytecode"] = len(pycs)
        bound = {name: record.relative_to(roots[name]).as_posix() for name in roots
                 if (record := jit_caches.records_own_path(roots[name], held[name])) is not None}
        _add_json(tar, ROOTS_MEMBER, {"roots": {
            name: {"path": str(roots[name]), "files": files[name], "records_path": bound.get(name)}
            for name in roots}})
    size = out.target.stat().st_size if not out.through else 0
    return ExportResult(str(out.target), files, size, time.perf_counter() - tic, list(bound))


def _add_json(tar: tarfile.TarFile, name: str, content: Any) -> None:
    data = json.dumps(content, indent=2).encode()
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(time.time())
    tar.addfile(info, io.BytesIO(data))


# ---------------------------------------------------------------- import


@dataclass
class ImportResult:
    files: dict[str, int]
    seconds: float
    key: dict[str, Any]
    present: int = 0  # of the files, already there with the same size and mtime (not rewritten)


def _safe_target(member: tarfile.TarInfo, roots: dict[str, Path], pyc_dirs: Sequence[Path]) -> Path:
    """Where a member goes; UsageError for anything but a plain file inside its root (a .pyc:
    beside its source, inside one of this interpreter's sys.path folders)."""
    parts = PurePosixPath(member.name).parts
    if member.name.startswith("/") or ".." in parts or len(parts) < 3:
        raise UsageError(f"refusing cache member {member.name!r}: not a relative path inside a cache")
    if not member.isfile():
        raise UsageError(f"refusing cache member {member.name!r}: only regular files are extracted "
                         "(no links or devices)")
    if parts[0] == "jit" and parts[1] in roots:
        base, rest = roots[parts[1]], parts[2:]
        target = base.joinpath(*rest).resolve()
        if not target.is_relative_to(base.resolve()):
            raise UsageError(f"refusing cache member {member.name!r}: it resolves outside {base}")
        return target
    if parts[0] == "bytecode":
        if parts[-2] != "__pycache__" or not parts[-1].endswith(".pyc"):
            raise UsageError(f"refusing cache member {member.name!r}: bytecode members must be "
                             "__pycache__/*.pyc")
        target = Path("/", *parts[1:]).resolve()
        if not target.parent.parent.is_dir() or not any(target.is_relative_to(d) for d in pyc_dirs):
            raise UsageError(f"refusing cache member {member.name!r}: {target.parent.parent} is not a "
                             "folder this interpreter imports from (sys.path)")
        return target
    raise UsageError(f"refusing cache member {member.name!r}: unknown cache {'/'.join(parts[:2])!r}")


def _moved_path_bound_roots(exported: dict[str, Any], roots: dict[str, Path]) -> dict[str, str]:
    """{name: what moved} for each root that records its own absolute path and would land elsewhere here."""
    out = {}
    for name, fact in (exported.get("roots") or {}).items():
        if not isinstance(fact, dict) or not fact.get("records_path") or not fact.get("files") or name not in roots:
            continue
        if Path(str(fact.get("path"))) != roots[name]:
            out[name] = f"{name} ({fact['records_path']} names {fact['path']}; here it is {roots[name]})"
    return out


def import_cache(path: str, *, device_name: str | None = None) -> ImportResult:
    tic = time.perf_counter()
    if not Path(path).is_file():
        raise UsageError(f"no warm cache at {path}: pass a file written by `dsakit warm --export PATH`")
    try:
        tar = tarfile.open(path, "r:*")
    except tarfile.TarError as error:
        raise UsageError(f"{path} is not a dsakit warm cache (a tarball from `dsakit warm --export`): {error}") from None
    try:
        with tar:
            return _import_from(tar, path, device_name, tic)
    except (tarfile.TarError, EOFError, zlib.error) as error:
        raise UsageError(f"{path} is truncated or damaged ({type(error).__name__}: {error}); nothing "
                         "was extracted. Export it again with `dsakit warm --export PATH`") from None


def _import_from(tar: tarfile.TarFile, path: str, device_name: str | None, tic: float) -> ImportResult:
    try:
        handle = tar.extractfile(KEY_MEMBER)
        found = json.loads(handle.read()) if handle else None
    except KeyError:
        found = None
    if not isinstance(found, dict):
        raise UsageError(f"{path} has no {KEY_MEMBER}: not a cache written by `dsakit warm --export`")
    expected = current_key(device_name)
    differ = key_mismatch(expected, found)
    if differ:
        raise UsageError(f"refusing the warm cache {path}: it was built for another stack; differing "
                         "fields: " + "; ".join(differ) + ". Export one on a node with this stack "
                         "or run `dsakit warm` here")
    roots = cache_roots()
    try:
        handle = tar.extractfile(ROOTS_MEMBER)
        exported = json.loads(handle.read()) if handle else {}
    except KeyError:
        exported = {}
    moved = _moved_path_bound_roots(exported if isinstance(exported, dict) else {}, roots)
    if moved:
        library_roots = jit_caches.cache_roots()
        variables = ", ".join(library_roots[name].moved_by for name in moved if name in library_roots)
        raise UsageError(f"refusing the warm cache {path}: these caches record their own absolute path, "
                         "so their library finds its builds only there (elsewhere it compiles them "
                         "again): " + "; ".join(moved.values()) + ". Import it where they resolve to the same "
                         f"paths (the exporting node's HOME, or {variables or 'their variables'} set "
                         "to them), or run `dsakit warm` here")
    files: dict[str, int] = {}
    pyc_dirs = bytecode_dirs()
    members = [m for m in tar.getmembers() if m.name not in (KEY_MEMBER, ROOTS_MEMBER) and not m.isdir()]
    targets = [(m, _safe_target(m, roots, pyc_dirs)) for m in members]  # all or nothing
    present = 0
    for member, target in targets:
        group = PurePosixPath(member.name).parts
        name = group[1] if group[0] == "jit" else "bytecode"
        files[name] = files.get(name, 0) + 1
        if _same_file(target, member):  # a warm node's own bytecode: not rewritten
            present += 1
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        source = tar.extractfile(member)
        assert source is not None
        # atomic: a concurrent reader sees the old file or the new one
        output_file(target, "--import").write_bytes(source.read())
        os.utime(target, (member.mtime, member.mtime))
    return ImportResult(files, time.perf_counter() - tic, found, present)


def _same_file(target: Path, member: tarfile.TarInfo) -> bool:
    try:
        stat = target.stat()
    except OSError:
        return False
    return stat.st_size == member.size and abs(stat.st_mtime - member.mtime) < 1e-3


def run_export(path: str, *, device_name: str | None = None) -> int:
    result = export_cache(path, device_name=device_name)
    counts = ", ".join(f"{name} {n}" for name, n in result.files.items())
    print(f"dsakit warm: exported {sum(result.files.values())} files ({counts}; "
          f"{result.bytes / 2**20:.1f} MiB) to {result.path} in {result.seconds:.2f} s")
    if result.path_bound:
        print(f"dsakit warm: {', '.join(result.path_bound)} record their own absolute paths: a node "
              "imports them only where they resolve to the same paths (the same HOME)")
    return 0


def run_import(path: str, *, device_name: str | None = None) -> int:
    result = import_cache(path, device_name=device_name)
    counts = ", ".join(f"{name} {n}" for name, n in result.files.items()) or "nothing"
    already = f"; {result.present} of them already there" if result.present else ""
    print(f"dsakit warm: imported {sum(result.files.values())} files ({counts}{already}) from {path} "
          f"in {result.seconds:.2f} s")
    return 0
