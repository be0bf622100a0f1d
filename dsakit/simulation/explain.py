"""Why a model-runner attribute was missing: the read site, its guard and the devices it fires on.

Owns turning an `AttributeError` on a model-runner-like object (dsakit's strict mock or a suite's
own class) into `dsakit audit`'s wording of that read, from the SGLang tree the failing file belongs
to. Never imports torch or SGLang (the tree is read as source).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dsakit.mocks.call_site import short_path
from dsakit.errors import ContractViolation

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
        return f"{short_path(self.file)}:{self.line}"


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


def explain(read: MissingRead, devices: dict[str, Any]) -> str:
    """The failure's sentence: what is missing where, `dsakit audit`'s wording of the read (guard and
    devices it fires on), and where the real ModelRunner sets it."""
    from dsakit.audit.explain import explain_read
    from dsakit.contracts.runner_sites import runner_site  # the mock's wording: one table per fact

    lines = [f"model_runner.{read.path} is missing on {read.holder}: read at {read.site}"]
    worded = explain_read(read.file, read.line, read.path, devices.values())
    lines.append(f"  {worded.text}" if worded is not None
                 else "  (not a read dsakit's source scan knows: no guard to evaluate)")
    lines.append(f"  the real ModelRunner: {runner_site(read.path).phrase}")
    lines.append(f"  `dsakit audit <this test file>` finds it without running; add `{read.path.split('.')[0]}` "
                 "to the mock, or build it from dsakit.MockModelRunner")
    return "\n".join(lines)
