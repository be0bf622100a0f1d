"""A warm target's stamp: what one build was valid for, and whether it still holds on this node.

Owns: where stamps live (`state_dir`), the stamp's content (the stack key, a digest of the build's
inputs, the evidence: per root the cache files present after the build, its path and whether its
files record that path; or the sources whose bytecode it compiled) and the check that lets
`dsakit warm` skip a build only when all of it is still there. Must not build anything or import
torch / SGLang.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# 2: ninja's logs are evidence, every root a build wrote to, each root's path and whether it records it
FORMAT = 2


def state_dir() -> Path:
    """Where dsakit keeps its warm locks and stamps (not the kernels' caches): DSAKIT_CACHE_DIR,
    else dsakit's folder in XDG_CACHE_HOME (~/.cache)."""
    from dsakit.options import environment

    base = environment("dsakit_cache_dir") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "dsakit"))
    return Path(base) / "jit"


def inputs_digest(inputs: Sequence[str]) -> str:
    """Order-free: the same tests selected in another order are the same build."""
    return hashlib.sha256("\n".join(sorted(set(inputs))).encode()).hexdigest()[:16]


def _transient(rel: str) -> bool:
    """Files a cache rewrites or drops by itself (FlashInfer's JIT log, build temp folders): their
    absence later says nothing about the kernels. Ninja's `.ninja_log` / `.ninja_deps` are not
    transient: without them ninja rebuilds every object (FlashInfer runs ninja on each load)."""
    parts = rel.split("/")
    return (parts[-1].endswith((".log", ".tmp", ".lock"))
            or any(p in ("tmp", "temp") or p.startswith("tmp") for p in parts[:-1]))


def cache_evidence(names: Sequence[str], roots: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """{root name: {relative path: size}} of every lasting cache file the named roots hold now."""
    from dsakit.warm.jit_caches import cache_files

    out: dict[str, dict[str, int]] = {name: {} for name in names}
    for name, rel, file in cache_files(dict(roots), names):
        if not _transient(rel):
            out[name][rel] = file.stat().st_size
    return out


def build_evidence(declared: Sequence[str], roots: Mapping[str, Path], before: Mapping[str, Mapping[str, int]],
                   after: Mapping[str, dict[str, int]]) -> dict[str, Any]:
    """A cache build's evidence: the files of the roots it declares and of every other root it
    wrote to (`before` / `after` the build), each root's path, and which of them record their path."""
    from dsakit.warm.jit_caches import records_own_path

    names = [name for name in roots if name in declared or after.get(name, {}) != before.get(name, {})]
    bound = [name for name in names
             if records_own_path(roots[name], (roots[name] / rel for rel in after.get(name, {}))) is not None]
    return {"files": {name: after.get(name, {}) for name in names},
            "roots": {name: str(roots[name]) for name in names}, "path_bound": bound}


def make_stamp(target: str, key: Mapping[str, Any], inputs: Sequence[str], evidence: Mapping[str, Any],
               **facts: Any) -> dict[str, Any]:
    return {"stamp_format": FORMAT, "target": target, "key": dict(key), "inputs": inputs_digest(inputs),
            "evidence": dict(evidence), **facts}


def read_stamp(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def why_stale(stamp: Mapping[str, Any] | None, key: Mapping[str, Any], inputs: Sequence[str],
              roots: Mapping[str, Path]) -> str | None:
    """None when the stamp still holds here; else why the target must be built again."""
    if stamp is None:
        return "no stamp"
    if stamp.get("stamp_format") != FORMAT:
        return "a stamp of another dsakit"
    if stamp.get("key") != dict(key):
        return "built for another stack"
    if stamp.get("inputs") != inputs_digest(inputs):
        return "built for another selection"
    evidence = stamp.get("evidence")
    if not isinstance(evidence, dict):
        return "no evidence in the stamp"
    built_at = evidence.get("roots") or {}
    for name in evidence.get("path_bound") or ():
        if name in roots and name in built_at and Path(built_at[name]) != roots[name]:
            return (f"the {name} cache was built in {built_at[name]} and its files record that path; "
                    f"here it is {roots[name]}, where its library would build again")
    for name, files in (evidence.get("files") or {}).items():
        root = roots.get(name)
        if root is None:
            return f"unknown cache {name!r}"
        for rel in files:
            # present is enough: each library keys its own entries (a size is kept for reading)
            if not (root / rel).is_file():
                return f"{root / rel} is gone"
    if evidence.get("sources"):
        from dsakit.warm.bytecode import _needs_compile

        stale = next((s for s in evidence["sources"] if _needs_compile(s)), None)
        if stale is not None:
            return f"no valid bytecode for {stale}"
    return None
