"""Why a model-runner attribute was missing: the read site, its guard and the devices it fires on.

Owns turning an `AttributeError` on a model-runner-like object (dsakit's strict mock or a suite's
own class) into `dsakit audit`'s wording of that read, from the SGLang tree the failing file belongs
to. Never imports torch or SGLang (the tree is read as source).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsakit.errors import ContractViolation, UsageError

_RUNNER_LIKE = re.compile(r"runner", re.IGNORECASE)


@dataclass(frozen=True)
class MissingRead:
    """A failed read of `model_runner.<path>` at `file:line` on an object of class `holder`."""

    path: str
    file: str
    line: int
    holder: str

    @property
    def site(self) -> str:
        return f"{_short(self.file)}:{self.line}"


def _short(file: str) -> str:
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in file:
            return file.split(marker, 1)[1]
    index = file.rfind("/sglang/")
    return file[index + 1:] if index >= 0 else file


def missing_read(excinfo: Any) -> MissingRead | None:
    """The model-runner read an exception is, or None (not an AttributeError on a runner-like object)."""
    error = excinfo.value
    if isinstance(error, ContractViolation):
        file, _, line = error.reading_site.split(" in ")[0].rpartition(":")
        if not line.isdigit():
            return None
        return MissingRead(error.attribute, _absolute(file, excinfo), int(line), "dsakit's MockModelRunner")
    if not isinstance(error, AttributeError) or not getattr(error, "name", None):
        return None
    entry = excinfo.traceback[-1]
    source = str(entry.statement) if entry.statement is not None else ""
    name = str(error.name)
    chained = re.search(rf"model_runner((?:\.\w+)*)\.{re.escape(name)}\b", source)
    holder = type(getattr(error, "obj", None)).__name__
    if chained is None and not _RUNNER_LIKE.search(holder):
        return None
    path = (chained.group(1).lstrip(".") + "." + name).lstrip(".") if chained else name
    return MissingRead(path, str(entry.path), entry.lineno + 1, holder)


def _absolute(file: str, excinfo: Any) -> str:
    """A violation names a site-packages-relative file: find the traceback entry it is."""
    for entry in reversed(excinfo.traceback):
        if str(entry.path).endswith(file):
            return str(entry.path)
    return file


@functools.lru_cache(maxsize=8)
def _reads_of(package_dir: str) -> dict[tuple[str, int], Any]:
    from dsakit.sglang_release import release_from_tree
    from dsakit.upstream.source_scan import scan_runner_reads

    release = release_from_tree(package_dir)
    return {(str(release.file(r.site.file.split("/", 1)[1])), r.site.line): r for r in scan_runner_reads(release)}


def guarded_read(read: MissingRead) -> Any:
    """The source scan's `RunnerRead` at that site (None when the file is not in an SGLang tree the
    scan covers, or the line is not one of its reads)."""
    index = read.file.rfind("/sglang/")
    if index < 0:
        return None
    try:
        reads = _reads_of(read.file[: index + len("/sglang")])
    except (UsageError, OSError, SyntaxError):
        return None
    return reads.get((str(Path(read.file).resolve()), read.line))


def explain(read: MissingRead, devices: dict[str, Any]) -> str:
    """`dsakit audit`'s sentence for the read: where, under which guard, and on which devices it fires."""
    from dsakit.audit.guard_eval import verdicts
    from dsakit.upstream.source_scan import runner_site

    scanned = guarded_read(read)
    lines = [f"model_runner.{read.path} is missing on {read.holder}: read at {read.site}"]
    if scanned is None:
        lines.append("  (not a read dsakit's source scan knows: no guard to evaluate)")
    else:
        found = verdicts(scanned.guard, devices)
        fires = [v.device for v in found if v.fires]
        only: dict[str, list[str]] = {}
        for v in found:
            if not v.fires and v.condition:
                only.setdefault(v.condition, []).append(v.device)
        guard = f"when {scanned.guard}" if scanned.guard else "unconditionally"
        outcome = f"fails on {', '.join(fires)}" if fires else "fires on none of the simulated devices by default"
        outcome += "".join(f"; only with {c} on {', '.join(d)}" for c, d in only.items())
        lines.append(f"  in {scanned.function} {guard} -> {outcome}")
    lines.append(f"  the real ModelRunner: {runner_site(read.path)}")
    lines.append(f"  `dsakit audit <this test file>` finds it without running; add `{read.path.split('.')[0]}` "
                 "to the mock, or build it from dsakit.MockModelRunner")
    return "\n".join(lines)
