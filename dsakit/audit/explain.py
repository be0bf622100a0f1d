"""The audit's wording of one read, for a failing run: `explain_read(path, line, attribute)`.

Owns the lookup of a `model_runner.<attribute>` read at `path:line` of an SGLang source file (the
frame of an AttributeError) and its sentence as `dsakit audit` prints it: the guard and the
devices on which it fires. Cached per file version; never imports torch or SGLang.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dsakit.audit.findings import ReadFinding, read_verdict
from dsakit.audit.report import outcome_text, render_reads
from dsakit.errors import UsageError
from dsakit.gates.device_model import SIMULATED, DeviceModel, simulated_model
from dsakit.stack.sglang_release import MODEL_RUNNER_FILE, SGLangRelease, release_from_tree
from dsakit.sglang_facts.backend_reads import RunnerRead, scan_files_flow


@dataclass(frozen=True)
class ReadExplanation:
    """One read as the audit words it.

    site       `sglang/srt/...:781`
    attribute  the dotted path below the runner (`max_running_requests`)
    guard      the condition under which it runs ("" = unconditionally)
    fires_on   devices on which it runs in the default configuration
    only_with  (configuration, devices) where it runs only with that configuration
    text       the audit's line: "dsa_backend.py:781 (DeepseekSparseAttnBackend.__init__) when ... -> fails on ..."
    """

    site: str
    attribute: str
    function: str
    guard: str
    fires_on: tuple[str, ...]
    only_with: tuple[tuple[str, tuple[str, ...]], ...]
    text: str

    def __str__(self) -> str:
        return self.text


def _release_of(path: Path) -> SGLangRelease | None:
    """The SGLang tree a source file belongs to: the nearest `sglang` package above it."""
    for parent in path.parents:
        if parent.name == "sglang" and (parent / MODEL_RUNNER_FILE).is_file():
            try:
                return release_from_tree(parent)
            except UsageError:
                return None
    return None


@functools.lru_cache(maxsize=64)
def _reads(path: Path, stamp: tuple[int, int]) -> tuple[SGLangRelease, tuple[RunnerRead, ...]] | None:
    """The reads of one file version (`stamp`: mtime in ns and size), or None outside an SGLang tree."""
    release = _release_of(path)
    if release is None:
        return None
    try:
        flow = scan_files_flow(release, [path])
    except UsageError:
        return None
    return release, flow.reads


def _devices(devices: Iterable[str | DeviceModel] | None) -> dict[str, DeviceModel]:
    if devices is None:
        return dict(SIMULATED)
    chosen: dict[str, DeviceModel] = {}
    for device in devices:
        model = device if isinstance(device, DeviceModel) else simulated_model(device)
        chosen[model.key] = model
    return chosen


def explain_read(path: str | Path, line: int, attribute: str,
                 devices: Iterable[str | DeviceModel] | None = None) -> ReadExplanation | None:
    """How `dsakit audit` words the read of `model_runner.<attribute>` at `path:line`, or None when
    that line holds no such read (or the file is not in an SGLang tree). `attribute` is the name
    the AttributeError names (`max_running_requests`) or a dotted path (`server_args.x`); `devices`
    are simulated device names or models (default: every simulated device)."""
    file = Path(path).resolve()
    try:
        stat = file.stat()
    except OSError:
        return None
    scanned = _reads(file, (stat.st_mtime_ns, stat.st_size))
    if scanned is None:
        return None
    release, reads = scanned
    here = [r for r in reads if r.site.line == line and Path(release.package_dir.parent, r.site.file) == file]
    wanted = attribute.strip(".")
    matching = ([r for r in here if r.path == wanted]
                or [r for r in here if r.path.endswith("." + wanted) or r.path.split(".")[-1] == wanted]
                # the missing name is a namespace the read goes through (model_runner.model_config.x
                # on a runner without model_config, or a model_config without hf_config): that read
                or [r for r in here if f".{wanted}." in f".{r.path}."])
    if not matching:
        return None
    read = min(matching, key=lambda r: (r.soft, len(r.guards), len(r.via)))
    chosen = _devices(devices)
    finding = read_verdict(read, (), chosen) or ReadFinding(read, (), (), ())
    outcome = outcome_text(finding, list(chosen)) or f"fires on none of {', '.join(chosen)}"
    return ReadExplanation(str(read.site), read.path, read.function, read.guard, finding.fails_on,
                           finding.only_with, render_reads([finding], outcome))

