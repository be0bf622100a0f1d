"""The plugin loads once under either of its names (issue 28 item 9, issue 25 item 3): the
installed entry point (`dsakit`) next to `pytest_plugins = ["dsakit.plugin"]` in a conftest, or
next to `-p dsakit.plugin`, used to abort with pluggy's "Plugin already registered" ValueError."""

from __future__ import annotations

import pytest

from dsakit.node.pytest_invocation import plugin_autoloads

pytestmark = pytest.mark.skipif(not plugin_autoloads(), reason="[no-entry-point] needs dsakit installed "
                                "(its pytest11 entry point) to load it under a second name")

GATED = "import pytest\n\n@pytest.mark.dsakit_requires('cuda')\ndef test_gated():\n    pass\n\ndef test_ok():\n    pass\n"


@pytest.mark.parametrize("how", ["conftest", "-p"])
def test_a_second_name_is_the_plugin_already_loaded(pytester: pytest.Pytester, how: str) -> None:
    pytester.makepyfile(test_ok=GATED)
    if how == "conftest":
        pytester.makeconftest('pytest_plugins = ["dsakit.plugin"]\n')
    args = ("-p", "dsakit.plugin") if how == "-p" else ()
    result = pytester.runpytest_subprocess(*args, "-p", "no:cacheprovider", "--dsakit-device=cpu")
    out = result.stdout.str() + result.stderr.str()
    assert "already registered" not in out and "Traceback" not in out, out
    result.assert_outcomes(passed=1, skipped=1)
    assert out.count("1 skipped  [cuda]") == 1  # one skip inventory: the plugin runs once


def test_no_dsakit_still_disables_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_ok="def test_ok():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:dsakit", "-p", "no:cacheprovider", "--help")
    assert "--dsakit-device" not in result.stdout.str()
