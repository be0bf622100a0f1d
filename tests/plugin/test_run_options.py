"""Every `--dsakit-*` flag has a `dsakit_*` ini key; command line > environment > ini > default
(pytester, in-process: no torch is loaded)."""

from __future__ import annotations

import pytest

from dsakit.options import OPTIONS

pytestmark = pytest.mark.usefixtures("no_kernel_modules")

DEVICE_TEST = """
import dsakit

@dsakit.gate("sm~10")
def test_blackwell():
    pass
"""


def _ini(pytester: pytest.Pytester, **keys: str) -> None:
    body = "".join(f'{key} = "{value}"\n' for key, value in keys.items())
    pytester.makepyprojecttoml("[tool.pytest.ini_options]\n" + body)


def test_every_flag_is_registered_with_its_ini_key(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    for option in OPTIONS:
        assert option.flag in text and f"{option.ini} (string)" in text, option.flag


def test_ini_device_opens_the_gate_and_the_flag_overrides_it(pytester: pytest.Pytester,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyfile(DEVICE_TEST)
    _ini(pytester, dsakit_device="sm103")
    pytester.runpytest("--strict-config").assert_outcomes(passed=1)  # no "Unknown config option"
    pytester.runpytest("--strict-config", "--dsakit-device", "sm90").assert_outcomes(skipped=1)
    monkeypatch.setenv("DSAKIT_DEVICE", "sm90")  # the environment beats the ini key
    pytester.runpytest("--strict-config").assert_outcomes(skipped=1)


def test_ini_roles_and_must_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyfile(DEVICE_TEST + "\ndef test_role(model_runner_role):\n    assert model_runner_role == 'draft'\n")
    _ini(pytester, dsakit_roles="draft", dsakit_device="sm90", dsakit_must_run="sm~10", dsakit_report="out/r.json")
    result = pytester.runpytest("--strict-config")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # must-run from the ini key
    assert (pytester.path / "out" / "r.json").is_file()  # an ini path is relative to the ini file


@pytest.mark.parametrize(("key", "raw", "expected"), [
    ("dsakit_workers_per_gpu", "two", "expected an integer"),
    ("dsakit_device_from_torch", "maybe", "expected true or false"),
    ("dsakit_topk_subset", "half", "expected one of full, per-role, pairwise"),
])
def test_bad_ini_values_are_usage_errors(pytester: pytest.Pytester, key: str, raw: str, expected: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    _ini(pytester, **{key: raw})
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*ini key {key} = '{raw}'*{expected}*"])


OLD_NAME_TEST = """
from dsakit.options import value

def test_from_torch(request):
    assert value(request.config, "dsakit_device_from_torch") is True
"""


@pytest.mark.parametrize("how", ["flag", "ini"])
def test_a_renamed_option_still_works_under_its_old_name_and_says_the_new_one(pytester: pytest.Pytester,
                                                                              how: str) -> None:
    pytester.makepyfile(OLD_NAME_TEST)
    if how == "ini":
        _ini(pytester, dsakit_probe_torch="true")
    result = pytester.runpytest("--strict-config", *(["--dsakit-probe-torch"] if how == "flag" else []))
    result.assert_outcomes(passed=1)
    old = "flag --dsakit-probe-torch" if how == "flag" else "ini key dsakit_probe_torch"
    result.stdout.fnmatch_lines([f"*{old} is the old name of --dsakit-device-from-torch*use the new name*"])


def test_the_new_name_beats_the_old_ini_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(OLD_NAME_TEST.replace("is True", "is False"))
    _ini(pytester, dsakit_probe_torch="true", dsakit_device_from_torch="false")
    pytester.runpytest("--strict-config").assert_outcomes(passed=1)
