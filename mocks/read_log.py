"""The process-wide log of contract reads that strict mocks could not serve.

Owns what the report lists at the end of a run: soft reads (`getattr(runner, name, default)` /
`hasattr` of an undeclared attribute, legitimate but worth knowing) and violations (hard reads or
writes outside the contract, reads of omitted attributes), and what a worker hands its xdist
controller (`worker_output`, `merge`: the run's session carries it). Never imports torch or SGLang.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

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


def worker_output() -> list[dict[str, str]]:
    """An xdist worker's log, for its controller (the run's session hands it over at the end)."""
    return [read.as_dict() for read in _LOG]


def merge(data: Iterable[dict[str, str]]) -> None:
    """On the controller: a worker's log joins this one, so the "dsakit contract reads" summary of a
    `-n N` run lists every worker's reads, as a serial run would."""
    for read in data:
        record(ContractRead(**read))
