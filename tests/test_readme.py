"""The README's downstream parts stay true: the contract table is the contract, the example runs,
every option is listed, and the install line names the right distribution."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
from dsakit.contracts.schema import markdown_table
from dsakit.options import OPTIONS

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _between(name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", README, re.S)
    assert match, f"README has no {name} block"
    return match.group(1)


def test_contract_table_is_the_contract() -> None:
    assert _between("contract-table") == markdown_table(MODEL_RUNNER_CONTRACT), (
        "the README's contract table drifted: replace it with the output of `dsakit contract table` "
        "(run outside a project that extends the contract)")


def test_downstream_example_runs(pytester: pytest.Pytester, no_kernel_modules: None) -> None:
    code = _between("downstream-example").removeprefix("```python\n").removesuffix("\n```")
    pytester.makepyfile(test_example=code)
    pytester.runpytest("-p", "no:cacheprovider", "--dsakit-device", "sm103").assert_outcomes(passed=3)
    pytester.runpytest("-p", "no:cacheprovider", "--dsakit-device", "sm90").assert_outcomes(passed=2, skipped=1)


def test_every_option_and_its_ini_key_is_documented() -> None:
    for option in OPTIONS:
        assert f"`{option.flag}" in README and f"`{option.ini}`" in README, option.flag


def test_install_line_names_the_published_distribution() -> None:
    assert "pip install pytest-dsakit" in README
    assert not re.search(r"^\s*pip install dsakit\b", README, re.M)
