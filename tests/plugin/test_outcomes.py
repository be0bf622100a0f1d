"""A test's outcome record: the signature of an error re-raised from another is the original's."""

from __future__ import annotations

import json

import pytest


def test_an_error_raised_from_another_is_signed_by_the_original(pytester: pytest.Pytester) -> None:
    # SGLang's CustomTestCase re-raises every failure as "retry() exceed maximum number of retries"
    pytester.makepyfile(test_wrapped="""
def test_wrapped():
    try:
        raise AttributeError("'R' object has no attribute 'max_running_requests'")
    except AttributeError as error:
        raise Exception("retry() exceed maximum number of retries.") from error

def test_plain():
    raise KeyError("k")
""")
    pytester.runpytest("-p", "no:cacheprovider", "--dsakit-report", "r.json").assert_outcomes(failed=2)
    tests = json.loads((pytester.path / "r.json").read_text())["tests"]
    assert tests["test_wrapped.py::test_wrapped"]["signature"] == (
        "AttributeError: 'R' object has no attribute 'max_running_requests' @ test_wrapped.py")
    assert tests["test_wrapped.py::test_plain"]["signature"] == "KeyError: 'k' @ test_wrapped.py"
