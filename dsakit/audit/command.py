"""`dsakit audit PATH...`: collect the files, scan SGLang once, audit every mock, print, exit code.

Owns the command's inputs (paths, `--device`, `--sglang-src`, `--backend-src`) and their usage
errors. Static: the scanned tree is parsed, never imported; SGLang is found without importing it;
no torch, no GPU. Exit 0 nothing lacking, 1 a mock lacks a read entry or a file was not audited,
2 usage (including: no file could be audited at all).
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Sequence
from pathlib import Path

from dsakit.audit.findings import audit_mock
from dsakit.audit.suite_files import SourceFile, UnparsableFile, parse_file
from dsakit.audit.mock_finder import RunnerAttributes, SuiteIndex, candidates
from dsakit.audit.release_match import mismatch_line
from dsakit.audit.report import AuditResult
from dsakit.audit.usage import Backend, Routes, find_usage
from dsakit.contracts.schema import Contract
from dsakit.errors import UsageError
from dsakit.gates.device_model import SIMULATED, DeviceModel, simulated_model
from dsakit.stack.sglang_release import HIP_RADIX_FILE, SGLangRelease, installed_release, release_from_tree
from dsakit.sglang_facts.runner_source import runner_assignments
from dsakit.sglang_facts.backend_reads import RunnerFlow, backend_files, scan_files_flow, scan_runner_flow

_SKIPPED_DIRS = {"__pycache__", ".git", ".venv", "venv", "node_modules", ".tox", ".mypy_cache", ".pytest_cache"}


def select_devices(spec: str | None) -> dict[str, DeviceModel]:
    """`--device sm100,b300` -> the simulated profiles (every one when `spec` is empty)."""
    if not spec:
        return dict(SIMULATED)
    chosen: dict[str, DeviceModel] = {}
    for name in (n.strip() for n in spec.split(",")):
        if not name:
            continue
        if name.lower() == "real":
            raise UsageError(f"dsakit audit simulates devices; 'real' is not one; valid names: "
                             f"{', '.join(SIMULATED)} (or an alias such as b300)")
        device = simulated_model(name)
        chosen[device.key] = device
    if not chosen:
        raise UsageError(f"--device names no device; valid names: {', '.join(SIMULATED)}")
    return chosen


def python_files(paths: Sequence[str]) -> list[Path]:
    """The .py files under `paths` (UsageError for a missing path, a non-Python file, or none at all)."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if not path.exists():
            raise UsageError(f"{text} does not exist: pass test files or folders of a suite")
        if path.is_file():
            if path.suffix != ".py":
                raise UsageError(f"{text} is not a Python file: pass .py files or folders holding them")
            found.append(path)
            continue
        found.extend(
            p for p in sorted(path.rglob("*.py"))
            if not any(part in _SKIPPED_DIRS for part in p.relative_to(path).parts[:-1])
        )
    if not found:
        raise UsageError(f"no Python files under {', '.join(paths)}: pass a suite's test files or folders")
    return list(dict.fromkeys(found))


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def own_backends(backend_src: str | None) -> tuple[list[Path], tuple[Backend, ...]]:
    """A downstream backend's files and its classes (each a backend a suite may hand a mock to)."""
    if backend_src is None:
        return [], ()
    path = Path(backend_src)
    if not path.exists():
        raise UsageError(f"--backend-src {backend_src} does not exist: pass your backend's .py file or folder")
    files = [f.resolve() for f in backend_files(path)]
    found: list[Backend] = []
    for file in files:
        try:
            tree = parse_file(file, str(file)).tree
        except UnparsableFile as error:
            raise UsageError(f"--backend-src: {file} {error}") from None
        found.extend(Backend(node.name, str(file), node.name, own=True)
                     for node in tree.body if isinstance(node, ast.ClassDef))
    return files, tuple(found)


def _flow(release: SGLangRelease, extra: list[Path]) -> RunnerFlow:
    """SGLang's DSA / DSv4 reads, the HIP DeepSeek-V4 backend's, and a downstream backend's."""
    stamps = tuple((path, path.stat().st_mtime_ns, path.stat().st_size) for path in extra)
    return _cached_flow(release, stamps)


@functools.lru_cache(maxsize=8)
def _cached_flow(release: SGLangRelease, extra: tuple[tuple[Path, int, int], ...]) -> RunnerFlow:
    """One scan per tree (and backend file versions): SGLang's installed tree does not change in a run."""
    base = scan_runner_flow(release)  # raises the usage error for a tree without a DSA backend
    hip = release.file(HIP_RADIX_FILE)
    more = [*([hip] if hip.is_file() else []), *(path for path, _, _ in extra)]
    if not more:
        return base
    added = scan_files_flow(release, more)
    return RunnerFlow(tuple(dict.fromkeys([*base.reads, *added.reads])), base.calls | added.calls)


def audit(paths: Sequence[str], devices: dict[str, DeviceModel], release: SGLangRelease,
          backend_src: str | None = None, contract: Contract | None = None) -> AuditResult:
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

    files: list[SourceFile] = []
    unparsed: list[str] = []
    for path in python_files(paths):
        try:
            files.append(parse_file(path, _display(path)))
        except UnparsableFile as error:
            unparsed.append(f"{_display(path)} {error}")
    if not files:
        raise UsageError("nothing audited: no scanned file could be parsed as Python ("
                         + "; ".join(unparsed) + "); pass a suite's Python test files")
    extra, own = own_backends(backend_src)
    flow = _flow(release, extra)
    runner = RunnerAttributes(frozenset(runner_assignments(release)),
                              frozenset(runner_assignments(release, on_self=False)))
    index = SuiteIndex(files, runner)
    routes = Routes(release, own)
    usage = find_usage(index, routes)
    by_display = {f.display: f for f in files}
    contract = contract or MODEL_RUNNER_CONTRACT
    findings = [audit_mock(value, calls, flow, release, contract, devices, routes, by_display)
                for value, calls in usage.used.values()]
    used_classes = {value.class_site for value, _ in usage.used.values() if value.class_site}
    for value in candidates(index):
        if value.key in usage.used or (value.kind == "class" and value.site in used_classes):
            continue
        findings.append(audit_mock(value, [], flow, release, contract, devices, routes, by_display))
    findings.sort(key=lambda m: _site_order(m.mock.site))
    mismatches = [line for f in files if (line := mismatch_line(f, release)) is not None]
    return AuditResult(release, list(devices), [f.display for f in files], [m for m in findings if m.for_dsa],
                       usage.untraced, [], usage.strict, [m for m in findings if not m.for_dsa], unparsed,
                       mismatches)


def _site_order(site: str) -> tuple[str, int]:
    file, _, line = site.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)


def run_audit(paths: Sequence[str], device_spec: str | None, sglang_src: str | None, as_json: bool,
              backend_src: str | None = None) -> int:
    """`dsakit audit`: print the report (or JSON); 0 nothing lacking, 1 a mock lacks a read entry or a
    file was not audited, 2 usage (nothing could be audited)."""
    from dsakit.contracts.extension import effective_contract

    devices = select_devices(device_spec)
    release = release_from_tree(sglang_src) if sglang_src else installed_release()
    contract = effective_contract(Path(backend_src) if backend_src else Path(paths[0]) if paths else Path.cwd())
    result = audit(paths, devices, release, backend_src, contract)
    print(json.dumps(result.as_dict(), indent=2, sort_keys=True) if as_json else result.render())
    return result.exit_code
