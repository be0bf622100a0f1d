"""Retired ini keys (the fork server's) get their own sentence: refused under strict config, a
warning otherwise, never pytest's bare "Unknown config option" (pytester, in-process)."""

from __future__ import annotations

import pytest

from dsakit.options import RETIRED_INI

pytestmark = pytest.mark.usefixtures("no_kernel_modules")

RETIRED = [("dsakit_fork_server", "keep"), ("dsakit_fork_server_keep_s", "900"),
           ("dsakit_fork_server_preload", "torch sglang.srt.server_args")]


def _ini(pytester: pytest.Pytester, body: str) -> None:
    pytester.makeini("[pytest]\n" + body)
    pytester.makepyfile("def test_plain():\n    pass\n")


@pytest.mark.parametrize(("key", "value"), RETIRED)
def test_strict_config_refuses_a_retired_key_with_its_reason(pytester: pytest.Pytester, key: str,
                                                             value: str) -> None:
    _ini(pytester, f"{key} = {value}\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-config")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert f"ini key {key} = {value!r} ({pytester.path / 'tox.ini'}): the fork server was removed" in text
    assert "CUDA error: initialization error" in text and "Delete the line" in text
    assert "Unknown config option" not in text


def test_strict_config_from_the_ini_refuses_too(pytester: pytest.Pytester) -> None:
    _ini(pytester, "strict_config = true\ndsakit_fork_server = off\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ini key dsakit_fork_server = 'off'" in result.stderr.str()


def test_without_strict_config_the_run_goes_on_with_a_config_warning(pytester: pytest.Pytester) -> None:
    _ini(pytester, "dsakit_fork_server = on\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*PytestConfigWarning: ini key dsakit_fork_server = 'on'*the fork server was removed*Delete the line"])
    assert "Unknown config option" not in result.stdout.str()


def test_an_ini_without_retired_keys_is_silent(pytester: pytest.Pytester) -> None:
    _ini(pytester, "")
    result = pytester.runpytest("-p", "no:cacheprovider", "--strict-config")
    result.assert_outcomes(passed=1)
    assert "fork server" not in result.stdout.str() + result.stderr.str()


def test_the_option_itself_is_gone(pytester: pytest.Pytester) -> None:
    assert set(RETIRED_INI) == {key for key, _ in RETIRED}
    result = pytester.runpytest("-p", "no:cacheprovider", "--help")
    assert "--dsakit-fork-server" not in result.stdout.str()
