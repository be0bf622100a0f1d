"""Cached bytecode for the SGLang import chain, so each xdist worker's SGLang import only loads it.

Owns: listing the source files a fresh SGLang import loads (a `-B` child process) and compiling
those without a valid `.pyc` (atomic writes). The node runs with PYTHONDONTWRITEBYTECODE=1 on an
unpacked stack, where every worker would otherwise recompile ~4,400 modules. Imports nothing heavy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from dsakit.errors import UsageError

# What dsakit's suites import from SGLang (the backends pull in the rest of the chain).
SGLANG_IMPORTS = (
    "sglang.srt.server_args",
    "sglang.srt.layers.attention.dsa.dsa_topk_backend",
    "sglang.srt.layers.attention.dsa_backend",
    "sglang.srt.layers.attention.deepseek_v4_backend",
    "sglang.srt.model_executor.forward_batch_info",
    # imported on first use by the kit's cases (sglang.test.test_utils, eagle_worker_v2, ...): without
    # their bytecode the H200's kit file compiled 5,131 sources in its run
    "sglang.test.kits.attention_unittest.attention_methods.dsa_attention",
    "sglang.test.kits.attention_unittest.attention_methods.dsv4_attention",
    "sglang.test.kits.attention_unittest.runner_modes.speculative_draft_runner",
)



def stamp_inputs(modules: Sequence[str] = SGLANG_IMPORTS) -> tuple[str, ...]:
    """What a bytecode warm-up depends on besides the stack: the modules, and where this
    interpreter keeps bytecode (PYTHONPYCACHEPREFIX)."""
    return (*modules, f"pycache_prefix={sys.pycache_prefix}")


_LIST_SOURCES = r"""
import importlib, json, sys
failed = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as error:  # a module one SGLang release lacks
        failed[name] = f"{type(error).__name__}: {error}"
sources = sorted({m.__spec__.origin for m in list(sys.modules.values())
                  if getattr(m, "__spec__", None) is not None and m.__spec__.cached
                  and (m.__spec__.origin or "").endswith(".py")})
print(json.dumps({"sources": sources, "failed": failed}))
"""


@dataclass
class BytecodeResult:
    modules: int  # source files the import chain loads
    compiled: int  # of those, compiled now (the rest already had valid bytecode)
    unwritable: int  # could not write their .pyc (read-only directories)
    failed_imports: dict[str, str]
    sources: list[str]  # the source files themselves (a warm stamp's evidence)


def imported_sources(modules: Sequence[str] = SGLANG_IMPORTS, *, python: str = sys.executable) -> tuple[list[str], dict[str, str]]:
    """(source files a fresh import of `modules` loads, {module: import error})."""
    proc = subprocess.run([python, "-B", "-c", _LIST_SOURCES, *modules], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
        raise UsageError(f"listing the import chain of {', '.join(modules)} failed (exit {proc.returncode}):\n{tail}")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    return data["sources"], data["failed"]


def _needs_compile(source: str) -> bool:
    import importlib.util

    try:
        cached = importlib.util.cache_from_source(source)
        stat = os.stat(source)
        with open(cached, "rb") as handle:
            header = handle.read(16)
    except (OSError, NotImplementedError, ValueError):
        return True
    # PEP 552 timestamp pyc: magic, flags == 0, source mtime, source size
    return (len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER or header[4:8] != b"\0\0\0\0"
            or int.from_bytes(header[8:12], "little") != int(stat.st_mtime) & 0xFFFFFFFF
            or int.from_bytes(header[12:16], "little") != stat.st_size & 0xFFFFFFFF)


def _compile(sources: list[str]) -> tuple[int, int]:
    import py_compile

    compiled = unwritable = 0
    for source in sources:
        try:
            py_compile.compile(source, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            compiled += 1
        except py_compile.PyCompileError:
            pass  # a syntax error the import would raise too; not ours to report
        except OSError:
            unwritable += 1
    return compiled, unwritable


def warm_bytecode(modules: Sequence[str] = SGLANG_IMPORTS, *, workers: int | None = None) -> BytecodeResult:
    """Compile the missing or stale bytecode of the import chain of `modules`."""
    sources, failed = imported_sources(modules)
    stale = [s for s in sources if _needs_compile(s)]
    workers = max(1, min(workers or os.cpu_count() or 1, 32))
    chunks = [stale[i::workers] for i in range(workers) if stale[i::workers]]
    compiled = unwritable = 0
    if len(chunks) > 1:
        with ProcessPoolExecutor(len(chunks)) as pool:
            for done, failed_writes in pool.map(_compile, chunks):
                compiled += done
                unwritable += failed_writes
    elif chunks:
        compiled, unwritable = _compile(chunks[0])
    return BytecodeResult(len(sources), compiled, unwritable, failed, sources)
