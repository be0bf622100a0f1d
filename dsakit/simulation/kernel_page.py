"""The reference page of the simulated device's kernels: which kernel families exist for which
devices, the per-arch argument rules each launch is checked against, and the stand-ins that run an
arch-only kernel here.

Owns turning the three declared tables (`kernel_archs.ARCH_ONLY`, `arch_rules.ARCH_RULES`,
`reference_kernels.REFERENCES`) into docs/reference/simulated-kernels.md's markdown; decides nothing.
Never imports torch, SGLang or a kernel library.
"""

from __future__ import annotations

from dsakit.devices import DEVICES
from dsakit.simulation.arch_rules import ARCH_RULES
from dsakit.simulation.kernel_archs import ARCH_ONLY
from dsakit.simulation.reference_kernels import REFERENCES


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def families_markdown() -> str:
    """One row per arch-only family: the devices with its image, its entry points, why."""
    rows = ["| family | exists for | entry points | why |", "|---|---|---|---|"]
    for family in ARCH_ONLY:
        entries = ", ".join(f"`{e}`" for e in family.entry_points) or "(JIT builds: " + ", ".join(
            f"`{p}`" for p in family.jit_names) + ")"
        rows.append(f"| `{family.key}` | {', '.join(family.devices)} | {entries} | {_cell(family.why)} |")
    return "\n".join(rows)


def rules_markdown() -> str:
    """One row per rule: kernel, the archs it holds on, the argument, the rule, its source."""
    rows = ["| kernel | on | argument | rule | from |", "|---|---|---|---|---|"]
    for entry in ARCH_RULES:
        for rule in entry.rules:
            rows.append(f"| {_cell(entry.kernel)} | {', '.join(rule.archs)} | `{_cell(rule.argument)}` | "
                        f"{_cell(rule.says)} | {_cell(rule.source)} |")
    return "\n".join(rows)


def stand_ins_markdown() -> str:
    """One row per stand-in: the arch-only entry point and what its reference computes."""
    rows = ["| arch-only entry point | the stand-in computes |", "|---|---|"]
    for reference in sorted(REFERENCES.values(), key=lambda r: r.target):  # by name: a test may reorder the dict
        rows.append(f"| `{reference.target}` | {_cell(reference.computes)} |")
    return "\n".join(rows)


def kernel_page_markdown() -> str:
    """docs/reference/simulated-kernels.md, whole."""
    devices = ", ".join(f"`{key}`" for key in DEVICES)
    return f"""# Simulated kernels

Generated from `dsakit.simulation.kernel_page.kernel_page_markdown()`;
`tests/simulation/test_kernel_page.py` holds this page to the code. Devices: {devices}.

## Arch-only kernel families

Under `--dsakit-device`, a launch of a family the simulated device has and this GPU lacks is run by
its stand-in (below) or refused (a `[simulated-kernel-launch]` skip); a family the simulated device
lacks fails the test (`dsakit.SimulatedKernelAbsent`). From `dsakit/simulation/kernel_archs.py`.

{families_markdown()}

## Per-arch argument rules

Each launch of these kernels, run for real or by a stand-in, is checked against the simulated
device's rules first; a breach fails the test with `dsakit.errors.ArchRuleBreach`, naming the kernel, the
argument, the simulated arch's rule, this GPU's rule and SGLang's call site. From
`dsakit/simulation/arch_rules.py`.

{rules_markdown()}

## Stand-ins for arch-only kernels

A call that passed the rules runs the reference on this GPU, written where the kernel writes; the
test goes on and is judged on that output. The summary counts the launches that ran with a
stand-in; a call the stand-in does not model is refused. From
`dsakit/simulation/reference_kernels.py`.

{stand_ins_markdown()}
"""
