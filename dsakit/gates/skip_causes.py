"""Why tests skipped: each skip's cause, the groups a run's skips form, where each group runs, and
the "why these skipped" paragraph.

Owns the cause of one skip (`Cause`: a dsakit reason code, or SGLang's own message classified by
`dsakit.gates.sglang_skips`, else uncoded with the message verbatim), the groups (one per cause
code, every skip counted once), the devices of the device table that open a code and the
paragraph. The skip inventory, `dsakit report merge` and pr-check read it. Must not import pytest,
torch or SGLang, nor record anything (recording: `dsakit.gates.inventory`).
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dsakit.devices import DEVICES
from dsakit.reasons import Reason

UNCODED = "uncoded"
# dsakit's own reason codes that are not gates (dsakit.simulation.probe_patches.KERNEL_LAUNCH,
# dsakit.node.fault_isolation.CODE: the tests hold them to these): what they mean in plain words
KERNEL_LAUNCH = "simulated-kernel-launch"
POISONED = "cuda-context-poisoned"
_WORDS = {
    KERNEL_LAUNCH: "kernels not run under simulation",
    POISONED: "not run after another test poisoned the CUDA context",
}
# the kernel a [simulated-kernel-launch] sentence names: "<kernel> (called at <site>) would launch ...",
# also where a test skips because every subtest was refused: "every subtest (N) was refused ...; the
# first: [simulated-kernel-launch] <kernel> (called at ..."
_KERNEL = re.compile(r"^(?:every subtest .*?the first: \[simulated-kernel-launch\] )?(.*?) \(called at ")
_LISTED = 4  # kernels or messages a paragraph names before "and N more"


@dataclass(frozen=True)
class Cause:
    """Why one test (or subtest) skipped.

    code     the dsakit code: a reason's own, SGLang's message classified, or UNCODED
    message  the skip's sentence as written (a dsakit reason's without its "[code] ")
    words    the clause the paragraph uses for it
    runs_on  keys of the device table where the case runs
    note     where it runs when `runs_on` does not say it all ("real hardware only", "no device: ...")
    also     the codes of the skip's other closed gates (the skip counts under `code` only)
    """

    code: str
    message: str
    words: str
    runs_on: tuple[str, ...] = ()
    note: str = ""
    also: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "words": self.words, "runs_on": list(self.runs_on),
                "note": self.note, "also": list(self.also)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Cause:
        code = str(data.get("code") or UNCODED)
        message = str(data.get("message") or "")
        return cls(code, message, str(data.get("words") or _fallback_words(code, message)),
                   tuple(str(k) for k in data.get("runs_on") or ()), str(data.get("note") or ""),
                   tuple(str(c) for c in data.get("also") or ()))

    def runs_on_text(self) -> str:
        return runs_on_text(self.runs_on, self.note)


def runs_on_text(keys: Sequence[str], note: str) -> str:
    if keys and note:
        return f"{', '.join(keys)} ({note})"
    return ", ".join(keys) or note or "unknown"


def _fallback_words(code: str, message: str) -> str:
    if code == UNCODED:
        return "not explained"
    return f"[{code}] " + message.split(";")[0].strip()


def table_key(device: Mapping[str, Any]) -> str | None:
    """The device table's entry a device (its `DeviceModel.as_dict()`) is: its own key when
    simulated, else the entry of the same vendor and SM (NVIDIA) or gfx arch (AMD)."""
    key = str(device.get("key", ""))
    if key in DEVICES:
        return key
    vendor, sm, gfx = device.get("vendor"), device.get("sm"), device.get("gfx")
    for entry in DEVICES.values():
        if entry.vendor != vendor:
            continue
        if vendor == "cpu" or (vendor == "amd" and entry.gfx == gfx) or (
                vendor == "nvidia" and entry.sm is not None and f"{entry.sm[0]}.{entry.sm[1]}" == sm):
            return entry.key
    return None


@functools.lru_cache(maxsize=None)
def devices_opening(codes: tuple[str, ...]) -> tuple[str, ...]:
    """Keys of the device table on which the device part of any of `codes` opens, in table order."""
    from dsakit.gates.table import known_devices_opening

    opened = {key for code in codes for key in known_devices_opening([code])}
    return tuple(key for key in DEVICES if key in opened)


@functools.lru_cache(maxsize=256)
def _dsakit_cause(code: str, message: str, device_key: str) -> tuple[str, tuple[str, ...], str]:
    """Words, devices and note for one of dsakit's own codes."""
    if code == KERNEL_LAUNCH:
        return _WORDS[code], (device_key,), "real hardware only"
    if code == POISONED:
        return _WORDS[code], (device_key,), "rerun alone"
    from dsakit.errors import UsageError
    from dsakit.gates.table import gate_for

    try:
        gate = gate_for(code)
    except UsageError:  # a reason code that is not a gate (topk-k-unsupported, gpus:2, ...)
        return _fallback_words(code, message), (), ""
    words = f"{code} needs {gate.requirement}"
    if gate.device_checks:
        return words, devices_opening((code,)), ""
    where = {"module": f"where {gate.requirement} is installed", "sglang": f"on {gate.requirement}"}
    return words, (), where.get(gate.kind, f"where {gate.requirement} is available")


def explain(message: str, reasons: Sequence[Reason], release: str | None, device_key: str) -> Cause:
    """The cause of one skip: its first dsakit reason (the others are `also`), else SGLang's message
    classified for SGLang `release`, else UNCODED with the message verbatim. `device_key`: the
    device table's entry the run was (simulated or real)."""
    if reasons:
        first = reasons[0]
        words, keys, note = _dsakit_cause(first.code, first.message, device_key)
        also = tuple(dict.fromkeys(r.code for r in reasons[1:] if r.code != first.code))
        return Cause(first.code, first.message, words, keys, note, also)
    from dsakit.gates.sglang_skips import classify

    text = message.strip() or "no reason given"
    found = classify(text, release)
    if found is None:
        return Cause(UNCODED, text, "not explained", (), "unknown")
    row = found.pattern
    return Cause(row.code, text, found.words, devices_opening(row.where) if row.where else (), row.note)


# ---------------------------------------------------------------- groups


@dataclass
class CauseGroup:
    """The skips of one cause code: every skip once, with its test (or subtest) id."""

    code: str
    tests: list[str] = field(default_factory=list)
    messages: Counter[str] = field(default_factory=Counter)
    words: Counter[str] = field(default_factory=Counter)
    runs_on: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    also: Counter[str] = field(default_factory=Counter)
    by_message: dict[str, list[str]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.tests)

    @property
    def reason(self) -> str:
        """The representative message: the most frequent one (the first seen on a tie)."""
        return self.messages.most_common(1)[0][0] if self.messages else ""

    def runs_on_text(self) -> str:
        return runs_on_text(self.runs_on, "; ".join(self.notes))

    def add(self, test: str, cause: Cause) -> None:
        self.tests.append(test)
        self.messages[cause.message] += 1
        self.by_message.setdefault(cause.message, []).append(test)
        self.words[cause.words] += 1
        self.runs_on.extend(k for k in cause.runs_on if k not in self.runs_on)
        if cause.note and cause.note not in self.notes:
            self.notes.append(cause.note)
        self.also.update(cause.also)

    def clause(self) -> str:
        """This group's part of the paragraph: each clause with its count; kernels or messages named."""
        if self.code == UNCODED:
            return f"not explained ({self.count}: {_named(self.messages, quote=True)})"
        if self.code == KERNEL_LAUNCH:
            kernels: Counter[str] = Counter()
            for message, n in self.messages.items():
                found = _KERNEL.match(message)
                kernels[found.group(1) if found else message] += n
            return f"{_WORDS[KERNEL_LAUNCH]} ({self.count}: {_named(kernels)})"
        return "; ".join(f"{words} ({n})" for words, n in self.words.items())

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "count": self.count, "reason": self.reason, "words": self.clause(),
                "runs_on": list(self.runs_on), "note": "; ".join(self.notes), "also": dict(self.also),
                "messages": [{"message": m, "count": n, "tests": self.by_message[m]}
                             for m, n in self.messages.most_common()],
                "tests": list(self.tests)}


def _named(counts: Counter[str], quote: bool = False) -> str:
    shown = [(f"'{text}'" if quote else text) + (f" x{n}" if n > 1 else "")
             for text, n in counts.most_common(_LISTED)]
    more = len(counts) - _LISTED
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def group_causes(skips: Iterable[tuple[str, Cause]]) -> list[CauseGroup]:
    """One group per cause code, largest first (code order on a tie); every skip in exactly one."""
    groups: dict[str, CauseGroup] = {}
    for test, cause in skips:
        groups.setdefault(cause.code, CauseGroup(cause.code)).add(test, cause)
    return sorted(groups.values(), key=lambda g: (-g.count, g.code))


def why_paragraph(groups: Sequence[CauseGroup], where: str) -> str:
    """'why these skipped on WHERE: FA3 is SM 9.x only (3); ...' (empty when nothing skipped)."""
    if not groups:
        return ""
    return f"why these skipped on {where}: " + "; ".join(g.clause() for g in groups)


def runs_on_here(keys: Sequence[str], note: str, here: Mapping[str, Sequence[tuple[str, bool]]]) -> str:
    """Where a group's cases run, for a fleet or a PR gate: the device table's entries `keys`, each
    with the labels of the runs `here` of that entry (label, simulated) as "real here: LABEL" or
    "only simulated here", the rest as "no node here"; then `note`."""
    parts: list[str] = []
    absent: list[str] = []
    for key in keys:
        runs = here.get(key, ())
        real = [label for label, simulated in runs if not simulated]
        if real:
            parts.append(f"{key} (real here: {', '.join(real)})")
        elif runs:
            parts.append(f"{key} (only simulated here)")
        else:
            absent.append(key)
    if absent:
        parts.append(f"{', '.join(absent)} (no node here)")
    if not parts:
        return note or "unknown"
    return ", ".join(parts) + (f" — {note}" if note else "")
