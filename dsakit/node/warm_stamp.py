"""A warm target's stamp: what one build was valid for, and whether it still holds on this node.

Owns: where stamps live (`state_dir`), the stamp's content (the stack key, a digest of the build's inputs, the evidence: the cache
files present after the build with their sizes, or the sources whose bytecode it compiled) and
the check that lets `dsakit warm` skip a build. Must not build anything or import torch / SGLang.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FORMAT = 1


def state_dir() -> Path:
    """Where dsakit keeps its warm locks and stamps (not the kernels' caches): DSAKIT_CACHE_DIR,
    else dsakit's folder in XDG_CACHE_HOME (~/.cache)."""
    base = os.environ.get("DSAKIT_CACHE_DIR") or str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "dsakit"))
    return Path(base) / "jit"


def inputs_digest(inputs: Sequence[str]) -> str:
    """Order-free: the same tests selected in another order are the same build."""
    return hashlib.sha256("\n".join(sorted(set(inputs))).encode()).hexdigest()[:16]


def _transient(rel: str) -> bool:
    """Files a cache rewrites or drops by itself (FlashInfer's JIT log, ninja's logs, build temp
    folders): their absence later says nothing about the kernels."""
    parts = rel.split("/")
    return (parts[-1].endswith((".log", ".tmp", ".lock")) or parts[-1] in (".ninja_log", ".ninja_deps")
            or any(p in ("tmp", "temp") or p.startswith("tmp") for p in parts[:-1]))


def cache_evidence(names: Sequence[str], roots: Mapping[str, Path]) -> dict[str, dict[str, int]]:
    """{root name: {relative path: size}} of every lasting cache file the named roots hold now."""
    from dsakit.node.jit_caches import cache_files

    out: dict[str, dict[str, int]] = {name: {} for name in names}
    for name, rel, file in cache_files(dict(roots), names):
        if not _transient(rel):
            out[name][rel] = file.stat().st_size
    return out


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
    for name, files in (evidence.get("files") or {}).items():
        root = roots.get(name)
        if root is None:
            return f"unknown cache {name!r}"
        for rel in files:
            # present is enough: each library keys its own entries (a size is kept for reading)
            if not (root / rel).is_file():
                return f"{root / rel} is gone"
    if evidence.get("sources"):
        from dsakit.node.bytecode import _needs_compile

        stale = next((s for s in evidence["sources"] if _needs_compile(s)), None)
        if stale is not None:
            return f"no valid bytecode for {stale}"
    return None
