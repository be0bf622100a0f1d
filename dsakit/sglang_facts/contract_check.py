"""`dsakit contract check`: the static drift check between backends, the real ModelRunner and the contract.

Owns: comparing the `model_runner.X` reads of the DSA / DeepSeek-V4 backends (or, with
`--backend-src`, a downstream suite's own backend), the attributes ModelRunner sets and the
effective contract (with the suite's `[tool.dsakit.contract]` entries), all found without importing
anything; the findings as data, their table / JSON. Must not import torch or SGLang.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any

from dsakit.contracts.extension import SET_BY_BACKEND
from dsakit.contracts.schema import NAMESPACE, Contract, ContractEntry, Role
from dsakit.errors import UsageError
from dsakit.reasons import Reason
from dsakit.stack.sglang_release import SGLangRelease, installed_release, release_from_tree
from dsakit.sglang_facts.runner_source import SourceSite, relative_file, runner_assignments
from dsakit.sglang_facts.backend_reads import RunnerRead, RunnerWrite, scan_backend_reads, scan_runner_reads

# Codes: `read-not-in-contract` and `contract-not-set-by-runner` fail the check (exit 1);
# `conditional-read` and `soft-read` are informational.
READ_NOT_IN_CONTRACT = "read-not-in-contract"
CONTRACT_NOT_SET_BY_RUNNER = "contract-not-set-by-runner"
CONDITIONAL_READ = "conditional-read"
# entries declared `set_by = "backend"` (dsakit.contracts.extension.SET_BY_BACKEND): with
# --backend-src the backend must assign model_runner.<path> and not read it earlier in the same
# function (both fail the check); without it the check says the backend's own check covers them
NOT_SET_BY_BACKEND = "contract-not-set-by-backend"
READ_BEFORE_BACKEND_SETS = "read-before-backend-sets"
SET_BY_BACKEND_UNCHECKED = "set-by-backend"
SOFT_READ = "soft-read"
ENTRY_OF_OTHER_RELEASE = "entry-of-other-release"

FAILURE = "failure"
INFO = "info"

_CONTRACT_FILE = "contracts/model_runner_contract.py"
_TABLE_PREFIX = "sglang/srt/layers/attention/"


@dataclass(frozen=True)
class Finding:
    """One result of the check: a stable code, a severity, what it is about and a sentence."""

    code: str
    severity: str
    subject: str
    message: str
    sites: tuple[str, ...] = ()

    @property
    def reason(self) -> Reason:
        return Reason(self.code, self.message)

    def __str__(self) -> str:
        return str(self.reason)

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "subject": self.subject,
            "message": self.message,
            "sites": list(self.sites),
        }


def coverage(contract: Contract, path: str) -> ContractEntry | None:
    """The entry that covers a read of `path`, or None when the contract lacks it.

    A path is covered by its own entry or by an ancestor entry that is not a namespace (the value
    of an "object" or "torch.Tensor" entry is real, so reading below it is that value's business).
    Below a namespace, only declared children are covered.
    """
    entry = contract.get(path)
    if entry is not None:
        return entry
    parts = path.split(".")
    for end in range(len(parts) - 1, 0, -1):
        ancestor = contract.get(".".join(parts[:end]))
        if ancestor is not None:
            return ancestor if ancestor.type != NAMESPACE else None
    return None


def _declaring_entry(contract: Contract, path: str) -> str:
    """The contract path a read belongs to in the table (itself, or the covering ancestor)."""
    entry = coverage(contract, path)
    return entry.path if entry is not None else path


def _site_with_guard(read: RunnerRead) -> str:
    text = f"{read.site} ({read.function})"
    if read.guard:
        text += f" if {read.guard}"
    return text


def _kinds(read: RunnerRead) -> str:
    kinds = [k for k, on in (("hardware", read.hardware_conditional), ("role", read.role_conditional)) if on]
    return "/".join(kinds) or "config"


@dataclass
class CheckResult:
    """Everything the check found for one SGLang release."""

    release: SGLangRelease
    contract: Contract
    reads: list[RunnerRead]
    assignments: dict[str, SourceSite]
    findings: list[Finding] = field(default_factory=list)
    backend_src: str | None = None  # a downstream backend scanned instead of SGLang's

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == FAILURE]

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def count(self, code: str) -> int:
        return sum(1 for f in self.findings if f.code == code)

    def counts(self) -> dict[str, int]:
        return {
            "contract_entries": len(self.contract),
            "reads": len(self.reads),
            "files": len({r.site.file for r in self.reads}),
            "missing_from_contract": self.count(READ_NOT_IN_CONTRACT),
            "not_set_by_runner": self.count(CONTRACT_NOT_SET_BY_RUNNER),
            "not_set_by_backend": self.count(NOT_SET_BY_BACKEND),
            "read_before_backend_sets": self.count(READ_BEFORE_BACKEND_SETS),
            "conditional": sum(1 for r in self.reads if r.conditional),
            "soft": sum(1 for r in self.reads if r.soft),
        }

    def summary_line(self) -> str:
        """One line whose counters agree with its verdict: every failure code has a counter (the
        set_by = "backend" ones are shown where a backend is checked, or where they are not 0)."""
        c = self.counts()
        verdict = "OK" if self.ok else "FAILED"
        subject = f"backend {self.backend_src} against SGLang {self.release.version}" if self.backend_src \
            else f"SGLang {self.release.version}"
        backend = "".join(f"{c[key]} {words}, " for key, words in (
            ("not_set_by_backend", "not set by backend"), ("read_before_backend_sets", "read before the backend sets them"))
            if self.backend_src or c[key])
        return (
            f"dsakit contract check: {subject}: {c['contract_entries']} contract entries, "
            f"{c['reads']} reads in {c['files']} files, {c['missing_from_contract']} missing from contract, "
            f"{c['not_set_by_runner']} not set by runner, {backend}{c['conditional']} conditional, {c['soft']} soft "
            f"\u2192 {verdict}"
        )

    def reads_of(self, entry_path: str) -> list[RunnerRead]:
        return [r for r in self.reads if _declaring_entry(self.contract, r.path) == entry_path]

    def set_by(self, entry: ContractEntry) -> str:
        if entry.parent:
            return "(part of " + str(entry.path).split(".", 1)[0] + ")"
        site = self.assignments.get(entry.path)
        if site is None and entry.set_outside_runner:
            return entry.set_outside_runner
        if site is None and entry.set_by == SET_BY_BACKEND:
            return "the suite's backend (set_by = \"backend\")"
        return str(site) if site is not None else "NEVER"

    # ------------------------------------------------------------ rendering

    def as_dict(self) -> dict[str, Any]:
        entries = []
        for entry in self.contract:
            top = entry.path.split(".", 1)[0]
            site = self.assignments.get(top)
            entries.append({
                "path": entry.path,
                "type": entry.type,
                "optional": entry.optional,
                "target_default": _render_default(entry.target),
                "draft_default": _render_default(entry.default_for(Role.DRAFT)),
                "read_at": [r.as_dict() for r in self.reads_of(entry.path)],
                "set_by_runner": str(site) if site is not None else None,
            })
        return {
            "sglang": {"version": self.release.version, "package_dir": str(self.release.package_dir)},
            "ok": self.ok,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "summary": self.summary_line(),
            "entries": entries,
            "reads": [r.as_dict() for r in self.reads],
            "findings": [f.as_dict() for f in self.findings],
        }

    def table(self) -> str:
        header = ("contract entry", "type", "target default", "draft default", "read at (file:line, guard)",
                  "set by ModelRunner at")
        rows: list[tuple[str, ...]] = []
        declared = {e.path for e in self.contract}
        paths = [e.path for e in self.contract] + sorted(
            {r.path for r in self.reads if coverage(self.contract, r.path) is None} - declared
        )
        for path in paths:
            entry = self.contract.get(path)
            reads = self.reads_of(path)
            read_cells = [_clip(_table_read(r), 120) for r in reads] or ["-"]
            if entry is None:
                first = (path, "NOT IN CONTRACT", "-", "-")
                set_by = str(self.assignments.get(path.split(".", 1)[0], "NEVER"))
            else:
                draft = "same" if entry.same_for_roles else _render_default(entry.draft)
                kind = entry.type + (" | None" if entry.optional else "")
                first = (path, kind, _render_default(entry.target), draft)
                set_by = self.set_by(entry)
            rows.append(tuple(_clip(c, 44) for c in first) + (read_cells[0], _short(set_by)))
            rows.extend(("", "", "", "", cell, "") for cell in read_cells[1:])
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(6)]
        lines = [" | ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
        lines.append("-+-".join("-" * w for w in widths))
        for row in rows:
            lines.append(" | ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        lines.append(f"(read sites are under {_TABLE_PREFIX}; ModelRunner sites in sglang/srt/model_executor/)")
        return "\n".join(lines)

    def render(self) -> str:
        parts = [f"SGLang {self.release.version} at {self.release.package_dir}", "", self.table(), ""]
        for severity, title in ((FAILURE, "failures"), (INFO, "informational")):
            found = [f for f in self.findings if f.severity == severity]
            if found:
                parts.append(f"{title}:")
                parts.extend(f"  {f}" for f in found)
                parts.append("")
        parts.append(self.summary_line())
        return "\n".join(parts)


def _render_default(value: Any) -> str:
    return repr(value)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "\u2026"


def _short(site: str) -> str:
    for prefix in (_TABLE_PREFIX, "sglang/srt/model_executor/"):
        if site.startswith(prefix):
            return site[len(prefix):]
    return site


def _table_read(read: RunnerRead) -> str:
    text = _short(str(read.site))
    tags = [t for t, on in (("soft", read.soft), ("hw", read.hardware_conditional),
                            ("role", read.role_conditional)) if on]
    if tags:
        text += " [" + ",".join(tags) + "]"
    if read.guard:
        text += f" if {read.guard}"
    if read.via:
        text += " via " + _short(read.via[0].split(" ", 1)[0])
    return text


# ---------------------------------------------------------------- the rules


def _group(reads: Iterable[RunnerRead]) -> dict[str, list[RunnerRead]]:
    groups: dict[str, list[RunnerRead]] = {}
    for read in reads:
        groups.setdefault(read.path, []).append(read)
    return groups


def _declare_hint(path: str, downstream: bool) -> str:
    if not downstream:
        return f"add it to {_CONTRACT_FILE} with its type, per-role default and reader"
    return (f'declare it in your suite\'s pyproject.toml as [tool.dsakit.contract."{path}"] with type, '
            "target (and draft) default, readers and set_by")


def backend_sets(release: SGLangRelease, backend_src: Path) -> dict[str, list[RunnerWrite]]:
    """Every assignment below the runner in the backend's files, by path: the read scanner's
    writes, through the same aliases as its reads (`model_runner.X = ...`, `self.model_runner.X`,
    `self.runner.X` after `self.runner = model_runner`; also `+=` and annotated)."""
    from dsakit.sglang_facts.backend_reads import backend_files, scan_files_flow

    files = backend_files(backend_src)
    mine = {relative_file(release, path) for path in files}
    found: dict[str, list[RunnerWrite]] = {}
    for write in scan_files_flow(release, files).writes:
        if write.site.file in mine:
            found.setdefault(write.path, []).append(write)
    return found


def _backend_set_findings(entry: ContractEntry, reads: list[RunnerRead],
                          sets: dict[str, list[RunnerWrite]] | None) -> list[Finding]:
    """The check of a `set_by = "backend"` entry (failures), or one informational finding when no
    backend was scanned."""
    if sets is None:
        return [Finding(SET_BY_BACKEND_UNCHECKED, INFO, entry.path,
                        f"contract entry model_runner.{entry.path} is set by the suite's own backend "
                        f"(set_by = \"backend\" in {entry.declared_in or _CONTRACT_FILE}), not by ModelRunner: "
                        "`dsakit contract check --backend-src DIR` checks that the backend sets it")]
    own = sets.get(entry.path, [])
    if not own:
        return [Finding(NOT_SET_BY_BACKEND, FAILURE, entry.path,
                        f"contract entry model_runner.{entry.path} is declared set_by = \"backend\" in "
                        f"{entry.declared_in or _CONTRACT_FILE}, but the backend never assigns "
                        f"model_runner.{entry.path} (nor self.model_runner.{entry.path}): assign it before "
                        "reading it, or give set_by the file:line where the real ModelRunner sets it")]
    findings = []
    for read in reads:
        if read.path != entry.path and not read.path.startswith(entry.path + "."):
            continue
        same = [s for s in own if s.function == read.function and s.site.file == read.site.file]
        if same and all(s.site.line > read.site.line for s in same):
            first = min(same, key=lambda s: s.site.line)
            findings.append(Finding(
                READ_BEFORE_BACKEND_SETS, FAILURE, entry.path,
                f"model_runner.{read.path} is read at {read.site} ({read.function}) before the backend sets "
                f"it at {first.site}: on the real ModelRunner that read raises AttributeError; set it first",
                (str(read.site), str(first.site))))
    return findings


def find_drift(
    contract: Contract, reads: list[RunnerRead], assignments: dict[str, SourceSite], version: str,
    *, downstream: bool = False,
    has_feature: Callable[[str], bool] | None = None,
    sets_by_backend: dict[str, list[RunnerWrite]] | None = None,
) -> list[Finding]:
    """The rules of the check, as findings (failures first, then informational, each sorted)."""
    failures: list[Finding] = []
    infos: list[Finding] = []
    for path, group in sorted(_group(reads).items()):
        hard = [r for r in group if not r.soft]
        if hard and coverage(contract, path) is None:
            sites = tuple(str(r.site) for r in hard)
            where = "; ".join(_site_with_guard(r) for r in hard)
            parent = path.rsplit(".", 1)[0] if "." in path else ""
            under = f" (namespace model_runner.{parent} does not declare it)" if parent in contract else ""
            failures.append(Finding(
                READ_NOT_IN_CONTRACT, FAILURE, path,
                f"model_runner.{path} is read at {where} but the role contract does not declare it{under}: "
                + _declare_hint(path, downstream),
                sites,
            ))
        for read in group:
            if read.conditional:
                infos.append(Finding(
                    CONDITIONAL_READ, INFO, path,
                    f"model_runner.{path} is read only if {read.guard} ({_kinds(read)}-conditional) at "
                    f"{read.site} ({read.function}): a test that does not meet the condition never reads it",
                    (str(read.site),),
                ))
            if read.soft:
                covering = coverage(contract, path)
                if covering is None:
                    state = ("the contract does not declare it, so a strict mock makes the reader fall back "
                             "to its default")
                elif covering.path == path:
                    state = "the contract declares it"
                else:
                    state = f"the contract covers it through model_runner.{covering.path} ({covering.type})"
                infos.append(Finding(
                    SOFT_READ, INFO, path,
                    f"model_runner.{path} is read with getattr/hasattr at {read.site} ({read.function}): "
                    f"{state}",
                    (str(read.site),),
                ))
    for name, entry in contract.top_level().items():
        if entry.feature and has_feature is not None and not has_feature(entry.feature):
            infos.append(Finding(
                ENTRY_OF_OTHER_RELEASE, INFO, entry.path,
                f"contract entry model_runner.{entry.path} belongs to SGLang releases with feature "
                f"{entry.feature!r}; SGLang {version} lacks it, so its ModelRunner need not set it",
            ))
            continue
        if entry.set_by == SET_BY_BACKEND:
            for finding in _backend_set_findings(entry, reads, sets_by_backend if downstream else None):
                (failures if finding.severity == FAILURE else infos).append(finding)
            continue
        if name not in assignments and not entry.set_outside_runner:
            failures.append(Finding(
                CONTRACT_NOT_SET_BY_RUNNER, FAILURE, entry.path,
                f"contract entry model_runner.{entry.path} is never assigned or defined by the real "
                f"ModelRunner (SGLang {version}): a mock providing it hides a backend read that fails on "
                f"the real runner; rename or remove it in {entry.declared_in or _CONTRACT_FILE}"
                + ("" if not entry.declared_in else
                   f', or declare set_by = "{SET_BY_BACKEND}" if your backend sets it itself'),
            ))
    return failures + infos


def check_release(release: SGLangRelease, contract: Contract | None = None, *,
                  backend_src: Path | None = None) -> CheckResult:
    """Run the static check on one SGLang tree (raises UsageError when it has no DSA backend), or,
    with `backend_src`, on a downstream backend's files against that tree's ModelRunner."""
    if contract is None:
        from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

        contract = MODEL_RUNNER_CONTRACT
    reads = scan_runner_reads(release) if backend_src is None else scan_backend_reads(release, backend_src)
    assignments = runner_assignments(release)
    result = CheckResult(release, contract, reads, assignments,
                         backend_src=str(backend_src) if backend_src is not None else None)
    sets = backend_sets(release, backend_src) if backend_src is not None else None
    result.findings = find_drift(contract, reads, assignments, release.version,
                                 downstream=backend_src is not None, has_feature=release.has,
                                 sets_by_backend=sets)
    return result


def run_contract_check(sglang_src: str | None, as_json: bool, *, backend_src: str | None = None,
                       project: str | None = None) -> int:
    """`dsakit contract check`: print the table (or JSON); 0 ok, 1 drift found (UsageError → 2).
    The contract is dsakit's plus the `[tool.dsakit.contract]` entries of the nearest pyproject.toml
    at or above `project` (default: the current directory)."""
    from dsakit.contracts.extension import effective_contract

    release = release_from_tree(sglang_src) if sglang_src else installed_release()
    contract = effective_contract(Path(project) if project else Path.cwd())
    source = Path(backend_src) if backend_src else None
    if source is not None and not source.exists():
        raise UsageError(f"--backend-src {backend_src}: no such file or folder; give your backend's "
                         "source folder or file")
    result = check_release(release, contract, backend_src=source)
    if as_json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        print(result.render())
    return result.exit_code
