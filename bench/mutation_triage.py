"""The kinds of the mutants that survive bench/mutation_run.py: wording, equivalent or real.

Owns: the list of equivalent mutants, each with its one-line reason, and the strings that are data
(a code, a key) rather than wording. Must not hide a survivor: anything not listed is "real", or
"wording" where only a message literal changed.
"""

from __future__ import annotations

from typing import Any

# (module, the line before, the line after, why no test can tell them apart); lines stripped
EQUIVALENT: list[tuple[str, str, str, str]] = [
]

# (module, the line before): string literals on these lines are data, not wording
DATA_STRINGS: list[tuple[str, str]] = [
]


def _changed(diff: str) -> tuple[str, str]:
    minus = [l[1:].strip() for l in diff.splitlines() if l.startswith("-") and not l.startswith("---")]
    plus = [l[1:].strip() for l in diff.splitlines() if l.startswith("+") and not l.startswith("+++")]
    return (minus[0] if minus else ""), (plus[0] if plus else "")


def label(mutant: Any) -> tuple[str, str]:
    before, after = _changed(mutant.diff)
    for module, old, new, reason in EQUIVALENT:
        if module == mutant.module and old == before and new == after:
            return "equivalent", reason
    if mutant.verdict == "no test":
        return "real", "no focused test calls this code"
    if mutant.kind in ("string", "wording") and (mutant.module, before) not in DATA_STRINGS:
        return "wording", ""
    return "real", ""
