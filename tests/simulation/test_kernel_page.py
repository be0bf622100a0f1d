"""docs/reference/simulated-kernels.md is the code's: the arch-only families, the per-arch argument
rules and the stand-ins, as `dsakit.simulation.kernel_page` renders their declared tables."""

from __future__ import annotations

from pathlib import Path

from dsakit.simulation import arch_rules, kernel_archs, kernel_page, reference_kernels

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "simulated-kernels.md"


def test_the_reference_page_is_the_code() -> None:
    assert PAGE.read_text(encoding="utf-8") == kernel_page.kernel_page_markdown(), (
        "docs/reference/simulated-kernels.md drifted: regenerate it with `python -c 'from "
        "dsakit.simulation.kernel_page import kernel_page_markdown as k; print(k(), end=\"\")' > "
        "docs/reference/simulated-kernels.md`")


def test_each_table_row_is_one_declared_record() -> None:
    families = kernel_page.families_markdown().splitlines()[2:]
    assert [row.split("|")[1].strip(" `") for row in families] == [f.key for f in kernel_archs.ARCH_ONLY]
    rules = kernel_page.rules_markdown().splitlines()[2:]
    assert len(rules) == sum(len(entry.rules) for entry in arch_rules.ARCH_RULES)
    stand_ins = kernel_page.stand_ins_markdown().splitlines()[2:]
    assert [row.split("|")[1].strip(" `") for row in stand_ins] == sorted(reference_kernels.REFERENCES)


def test_a_pipe_in_a_cell_stays_in_its_cell() -> None:
    assert kernel_page._cell("a | b\nc") == "a \\| b c"
