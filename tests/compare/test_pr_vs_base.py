"""`dsakit compare`: one selection against two (fake) SGLang trees, each test classified, the
fingerprint checked, exit 1 only on regressions. The real 0.5.22-vs-0.5.23 run is opt-in (slow):
DSAKIT_COMPARE_BASE=/path/to/unpacked/sglang-0.5.22 python -m pytest tests/compare/test_pr_vs_base.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.compare.pr_vs_base import Run, classify, fingerprint_mismatch, signature

BASE = """
FEATURE = False
CASES = ["a", "old"]
def regress(): return 1
def fixed(): raise ValueError(f"broken object at {hex(id(object()))}")
def same(): raise KeyError("missing key 'x'")
def differ(): raise TypeError("one way")
"""

PR = """
FEATURE = True
CASES = ["a", "new"]
def regress(): raise RuntimeError("the PR broke it")


def fixed(): return 1

# line numbers move, the message does not
def same(): raise KeyError("missing key 'x'")
def differ(): raise IndexError("another way")
"""

SUITE = """
import pytest
from sglang import behaviour as b

def test_stable():
    pass

def test_regress():
    assert b.regress() == 1

def test_fixed():
    assert b.fixed() == 1

def test_same():
    b.same()

def test_differ():
    b.differ()

def test_feature():
    if not b.FEATURE:
        pytest.skip("this SGLang lacks the feature")

@pytest.mark.parametrize("case", b.CASES)
def test_case(case):
    pass
"""


def _tree(root: Path, behaviour: str) -> Path:
    pkg = root / "sglang"
    (pkg / "srt" / "model_executor").mkdir(parents=True)
    (pkg / "srt" / "model_executor" / "model_runner.py").write_text("class ModelRunner: pass\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text(f"__version__ = '{root.name}'\n")
    (pkg / "behaviour.py").write_text(behaviour)
    return root


def _compare(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsakit", "compare", *args], cwd=pytester.path,
                          capture_output=True, text=True, check=False)


def test_classifies_every_kind_of_change(pytester: pytest.Pytester) -> None:
    base = _tree(pytester.path / "0.0.1", BASE)
    pr = _tree(pytester.path / "0.0.2", PR)
    pytester.makepyfile(test_suite=SUITE)
    done = _compare(pytester, "--base", str(base), "--pr", str(pr), "--json", "out.json", "--", "test_suite.py")
    assert done.returncode == 1, done.stdout + done.stderr  # a regression
    out = done.stdout
    assert "base = SGLang 0.0.1" in out and "pr = SGLang 0.0.2" in out
    assert "same fingerprint in both runs" in out
    assert ("regression 1  fixed 1  pre-existing 1  failing-differently 1  skip-change 1  added 1  "
            "removed 1  unchanged 2") in out
    data = json.loads((pytester.path / "out.json").read_text())
    kinds = {t["test"].split("::")[1]: t["class"] for t in data["tests"]}
    assert kinds == {
        "test_stable": "unchanged", "test_regress": "regression", "test_fixed": "fixed",
        "test_same": "pre-existing", "test_differ": "failing-differently", "test_feature": "skip-change",
        "test_case[a]": "unchanged", "test_case[old]": "removed", "test_case[new]": "added",
    }
    regress = next(t for t in data["tests"] if t["class"] == "regression")
    assert "RuntimeError: the PR broke it" in regress["detail"]


def test_no_regression_exits_0(pytester: pytest.Pytester) -> None:
    base = _tree(pytester.path / "0.0.1", BASE)
    pytester.makepyfile(test_suite=SUITE)
    done = _compare(pytester, "--base", str(base), "--pr", str(base), "--", "test_suite.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pre-existing 3" in done.stdout  # fixed/same/differ fail identically in both


def test_not_a_tree_is_a_usage_error(pytester: pytest.Pytester) -> None:
    done = _compare(pytester, "--base", "nowhere", "--pr", "nowhere", "--", "x.py")
    assert done.returncode == 2 and "is not an SGLang source tree" in done.stderr


def test_crash_is_a_failure_with_the_fatal_line(pytester: pytest.Pytester) -> None:
    base = _tree(pytester.path / "0.0.1", BASE)
    pr = _tree(pytester.path / "0.0.2", BASE + "\nCRASH = True\n")
    pytester.makepyfile(test_crash="""
        import os
        from sglang import behaviour as b
        def test_first():
            pass
        def test_boom():
            if getattr(b, "CRASH", False):
                os.abort()
    """)
    done = _compare(pytester, "--base", str(base), "--pr", str(pr), "--", "test_crash.py")
    assert done.returncode == 1, done.stdout + done.stderr
    # pytest's faulthandler prints "Fatal Python error: Aborted"; else the signal is named
    assert ("pr run did not finish: Fatal Python error: Aborted" in done.stdout
            or "pr run did not finish: the test process was killed by SIGABRT" in done.stdout), done.stdout
    assert "regression" in done.stdout and "test_boom" in done.stdout


def test_signature_strips_lines_addresses_and_tmp_paths() -> None:
    a = {"message": "ValueError: bad at 0x7f3a12 in /tmp/pytest-of-x/p1/f.py:12 line 12", "frame": "f.py:12"}
    b = {"message": "ValueError: bad at 0x55aa00 in /tmp/pytest-of-x/p9/f.py:40 line 40", "frame": "f.py:40"}
    assert signature(a) == signature(b)
    assert signature(a) != signature({"message": "TypeError: bad", "frame": "f.py"})


def test_fingerprint_mismatch_is_listed() -> None:
    env = {"python": "3.11.7", "implementation": "CPython", "device": "CPU", "packages": {"torch": "2.14.1"}}
    other = {**env, "packages": {"torch": "2.9.0"}}
    base, pr = Run("base", "b", 0, 1.0, env=env), Run("pr", "p", 0, 1.0, env=other)
    assert fingerprint_mismatch(base, pr) == ["torch: base 2.14.1 vs pr 2.9.0"]
    assert fingerprint_mismatch(base, base) == []


def test_skip_to_fail_is_a_regression() -> None:
    changes = classify({"t": {"outcome": "skipped", "reason": "no feature"}},
                       {"t": {"outcome": "failed", "message": "AssertionError: x", "frame": "t.py"}})
    assert changes[0].kind == "regression" and "was skipped: no feature" in changes[0].detail


@pytest.mark.skipif(not os.environ.get("DSAKIT_COMPARE_BASE"),
                    reason="slow (~40 s): set DSAKIT_COMPARE_BASE to an unpacked SGLang 0.5.22 tree")
def test_real_trees_end_to_end(tmp_path: Path) -> None:
    import importlib.util

    installed = Path(next(iter(importlib.util.find_spec("sglang").submodule_search_locations)))  # type: ignore[union-attr]
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "dsakit", "compare", "--base", os.environ["DSAKIT_COMPARE_BASE"], "--pr",
         str(installed), "--json", str(tmp_path / "c.json"), "--",
         "contracts/test_model_runner_contract.py", "tests/mocks/test_mock_model_runner.py"],
        cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same fingerprint in both runs" in done.stdout and "regression 0" in done.stdout


def test_markdown_puts_regressions_first_and_groups_skips_by_code(pytester: pytest.Pytester) -> None:
    base = _tree(pytester.path / "0.0.1", BASE)
    pr = _tree(pytester.path / "0.0.2", PR)
    pytester.makepyfile(test_suite="""
        import pytest
        from sglang import behaviour as b

        def test_same():
            b.same()

        def test_regress():
            assert b.regress() == 1

        def test_gated():
            if b.FEATURE:
                pytest.skip("[fa3] needs SM 9.x; the torch path covers it")

        def test_uncoded():
            pytest.skip("no reason code here")
    """)
    done = _compare(pytester, "--base", str(base), "--pr", str(pr), "--markdown", "pr.md", "--", "test_suite.py")
    assert done.returncode == 1, done.stdout + done.stderr
    md = (pytester.path / "pr.md").read_text()
    assert md.startswith("## dsakit compare: PR vs base\n")
    assert md.index("### Regressions (1)") < md.index("### Pre-existing failures (1)") < md.index("### Skips by reason code (2)")
    assert "| `test_suite.py::test_regress` | PR | `RuntimeError: the PR broke it @ behaviour.py` |" in md
    assert "### Fixed" not in md  # empty sections after the first are left out
    assert "| `test_suite.py::test_same` | base and PR | `KeyError: \"missing key 'x'\" @ behaviour.py` |" in md
    assert "| `fa3` | 1 | PR run (SGLang 0.0.2) | sm90 | base run (1 of 1) | needs SM 9.x; the torch path covers it |" in md
    assert "| `uncoded` | 1 | PR run (SGLang 0.0.2) | unknown | not covered on any node | no reason code here |" in md
    assert "<details><summary>`uncoded` messages, verbatim (1)</summary>" in md and "- 1 x `no reason code here`" in md
    assert "- why these skipped on the PR run: fa3 needs exactly SM 9.x on NVIDIA (Hopper)" in md


def test_signature_names_the_reading_site_and_keeps_whole_sentences() -> None:
    """Issue 25 item 9: no `read at <tmp>`, no sentence cut in the middle."""
    advice = " ".join(f"Sentence {n} of the advice explains what to declare." for n in range(12))
    message = ("ContractViolation: model_runner.foo is not in the dsakit role contract (role=target): read at "
               "/tmp/dsakit-compare-x1/base-overlay/sglang/srt/layers/attention/dsa_backend.py:12; " + advice)
    sig = signature({"message": message, "frame": "dsa_backend.py:12"})
    assert "read at sglang/srt/layers/attention/dsa_backend.py;" in sig, sig
    assert "<tmp>" not in sig
    text = sig.rsplit(" @ ", 1)[0]
    assert text.endswith(". [...]") and len(text) <= 410, text
    other = {"message": message.replace("dsakit-compare-x1/base", "dsakit-compare-y2/pr"), "frame": "dsa_backend.py:40"}
    assert signature(other) == sig  # the same failure in the PR's overlay
    local = signature({"message": "AssertionError: read at /tmp/pytest-of-u/p3/test_x.py:9", "frame": ""})
    assert local == "AssertionError: read at <tmp>/test_x.py"


@pytest.mark.parametrize(("environment", "option", "recorded"), [
    ("sm103", "sm90", "[simulated sm90]"),  # the option wins over the variable, as in the run itself
    ("", "sm103", "[simulated sm103]"),  # the option alone (the variable unset): not this machine
])
def test_the_record_fingerprints_the_runs_device(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                 environment: str, option: str, recorded: str) -> None:
    from dsakit.node.pytest_invocation import plugin_args

    if environment:
        monkeypatch.setenv("DSAKIT_DEVICE", environment)
    else:
        monkeypatch.delenv("DSAKIT_DEVICE", raising=False)
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    record = pytester.path / "rec.jsonl"
    pytester.runpytest_subprocess(*plugin_args(), "-p", "no:cacheprovider", "-p", "dsakit.compare.recorder",
                                  f"--dsakit-record={record}", f"--dsakit-device={option}").assert_outcomes(passed=1)
    env = json.loads(record.read_text().splitlines()[0])
    assert env["kind"] == "env" and env["fingerprint"]["device"].endswith(recorded), env
