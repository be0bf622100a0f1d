"""`dsakit audit PATH...`: collect the files, scan SGLang once, audit every mock, print, exit code.

Owns the command's inputs (paths, `--device`, `--sglang-src`) and their usage errors. Static: the
scanned tree is parsed, never imported; SGLang is found without importing it; no torch, no GPU.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from dsakit.audit.findings import audit_mock
from dsakit.audit.mock_finder import RunnerAttributes, SourceFile, SuiteIndex, candidates, parse_file
from dsakit.audit.report import AuditResult
from dsakit.audit.usage import find_usage
from dsakit.errors import UsageError
from dsakit.gates.device_model import SIMULATED, DeviceModel, simulated_device
from dsakit.sglang_release import SGLangRelease, installed_release, release_from_tree
from dsakit.upstream.source_scan import runner_assignments, scan_runner_flow

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
        device = simulated_device(name)
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


def audit(paths: Sequence[str], devices: dict[str, DeviceModel], release: SGLangRelease) -> AuditResult:
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

    files: list[SourceFile] = []
    warnings: list[str] = []
    for path in python_files(paths):
        try:
            files.append(parse_file(path, _display(path)))
        except (SyntaxError, UnicodeDecodeError, OSError) as error:
            warnings.append(f"{_display(path)} was not audited: it cannot be parsed ({error})")
    flow = scan_runner_flow(release)
    runner = RunnerAttributes(frozenset(runner_assignments(release)),
                              frozenset(runner_assignments(release, on_self=False)))
    index = SuiteIndex(files, runner)
    usage = find_usage(index)
    mocks = [audit_mock(value, calls, flow, release, MODEL_RUNNER_CONTRACT, devices)
             for value, calls in usage.used.values()]
    used_classes = {value.class_site for value, _ in usage.used.values() if value.class_site}
    for value in candidates(index):
        if value.key in usage.used or (value.kind == "class" and value.site in used_classes):
            continue
        mocks.append(audit_mock(value, [], flow, release, MODEL_RUNNER_CONTRACT, devices))
    mocks.sort(key=lambda m: _site_order(m.mock.site))
    return AuditResult(release, list(devices), [f.display for f in files], mocks, usage.untraced, warnings,
                       usage.strict)


def _site_order(site: str) -> tuple[str, int]:
    file, _, line = site.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)


def run_audit(paths: Sequence[str], device_spec: str | None, sglang_src: str | None, as_json: bool) -> int:
    """`dsakit audit`: print the report (or JSON); 0 nothing lacking, 1 a mock lacks a read entry."""
    devices = select_devices(device_spec)
    release = release_from_tree(sglang_src) if sglang_src else installed_release()
    result = audit(paths, devices, release)
    print(json.dumps(result.as_dict(), indent=2, sort_keys=True) if as_json else result.render())
    return result.exit_code
