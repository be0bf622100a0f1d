"""The process-wide log of contract reads that strict mocks could not serve.

Owns what the report lists at the end of a run: soft reads (`getattr(runner, name, default)` /
`hasattr` of an undeclared attribute, legitimate but worth knowing) and violations (hard reads or
writes outside the contract, reads of omitted attributes), and its xdist hand-over (workers put
their log in `workeroutput`, the controller merges it). Never imports torch or SGLang.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dsakit.reasons import FrozenRecord

SOFT = "soft-read"
UNDECLARED = "undeclared-read"
OMITTED = "omitted-read"
WRITE = "undeclared-write"


class ContractRead(FrozenRecord):
    """One read (or write) a strict mock could not serve."""

    __match_args__ = ('kind', 'role', 'path', 'site')

    def __init__(self, kind: str, role: str, path: str, site: str) -> None:
        self.__dict__.update(kind=kind, role=role, path=path, site=site)

    kind: str
    role: str
    path: str
    site: str

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "role": self.role, "path": self.path, "site": self.site}


_LOG: list[ContractRead] = []


def record(read: ContractRead) -> None:
    _LOG.append(read)


def contract_reads(kind: str | None = None) -> list[ContractRead]:
    """Reads logged in this process so far (optionally only one kind)."""
    return [r for r in _LOG if kind is None or r.kind == kind]


def clear() -> None:
    _LOG.clear()


def format_summary() -> list[str]:
    counts = Counter(_LOG)
    lines = []
    for read, count in sorted(counts.items(), key=lambda item: (item[0].kind, item[0].path, item[0].site)):
        times = f" x{count}" if count > 1 else ""
        lines.append(f"{read.kind}: model_runner.{read.path} ({read.role}) at {read.site}{times}")
    return lines


WORKER_KEY = "dsakit_contract_reads"


def hand_over(config: Any) -> None:
    """An xdist worker's pytest_sessionfinish: its log goes to the controller in `workeroutput`."""
    if hasattr(config, "workeroutput"):
        config.workeroutput[WORKER_KEY] = [read.as_dict() for read in _LOG]


def take_over(node: Any) -> None:
    """The controller's pytest_testnodedown: a worker's log joins this one, so the "dsakit contract
    reads" summary of a `-n N` run lists every worker's reads, as a serial run would."""
    for data in getattr(node, "workeroutput", {}).get(WORKER_KEY, ()):
        record(ContractRead(**data))
