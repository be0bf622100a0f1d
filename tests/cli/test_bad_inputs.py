"""Bad input, tried the way a new user would (issue 19): one table of cases, each with what it
runs and the outcome it must have -- the exit code (0 ok, 1 a check failed, 2 usage; pytest's
own codes inside pytest: 4 usage) or the exception, a message fragment, and nothing left behind.

Commands run in a subprocess in a fresh directory (TMPDIR points into it, so leaks are seen);
API cases run in this process. `CASES` is the table; each case's `run` returns the `Outcome`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsakit.node.pytest_invocation import plugin_args


@dataclass
class Outcome:
    status: str  # "exit N" for a command; "ok" or the exception class name for an API call
    text: str  # stdout + stderr, or the exception message
    leftovers: list[str] = field(default_factory=list)  # temp entries left behind in TMPDIR

    def line(self) -> str:
        """The first line that says something, for the before/after table."""
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip()]
        useful = [ln for ln in lines if re.search(r"error|ERROR|FAILED|refused|dsakit|Error|passed|"
                                                  r"skipped|cannot be read|\[", ln)]
        return (useful or lines or [""])[-1][:160]


@dataclass(frozen=True)
class Case:
    case_id: str
    item: str  # the issue-19 item it covers
    command: str  # what the user typed, for the table
    run: Callable[[Path], Outcome]
    status: str
    fragments: tuple[str, ...]
    absent: tuple[str, ...] = ("Traceback (most recent call last)",)  # dsakit itself crashed
    extra: Callable[[Path, Outcome], None] | None = None
    prepare: str | None = None  # a fixture of this module: a callable that fills the case's folder first


# ---------------------------------------------------------------- running things


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(tmp / "tmp")
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_WORKER", None)
    (tmp / "tmp").mkdir(exist_ok=True)
    return env


def _leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in (tmp / "tmp").glob("dsakit-*"))


def _command(tmp: Path, args: Sequence[str], *, timeout: float = 240, new_session: bool = False) -> Outcome:
    done = subprocess.run([sys.executable, *args], cwd=tmp, env=_env(tmp), capture_output=True,
                          text=True, timeout=timeout, check=False, start_new_session=new_session)
    return Outcome(f"exit {done.returncode}", done.stdout + done.stderr, _leftovers(tmp))


def dsakit(*args: str, files: dict[str, str] | None = None,
           setup: Callable[[Path], None] | None = None) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        _write(tmp, files or {})
        if setup is not None:
            setup(tmp)
        return _command(tmp, ["-m", "dsakit", *args])
    return run


def pytest_run(*args: str, files: dict[str, str],
               setup: Callable[[Path], None] | None = None) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        _write(tmp, files)
        if setup is not None:
            setup(tmp)
        return _command(tmp, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider",
                              "--dsakit-device=cpu", *args])
    return run


def pytest_plain(*args: str, files: dict[str, str]) -> Callable[[Path], Outcome]:
    """pytest with dsakit but no --dsakit-device (the run's device is the real one)."""
    def run(tmp: Path) -> Outcome:
        _write(tmp, files)
        return _command(tmp, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", *args])
    return run


def api(call: Callable[[], Any]) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:
        try:
            result = call()
        except Exception as error:  # the outcome under test is the exception itself
            return Outcome(type(error).__name__, str(error))
        return Outcome("ok", str(result))
    return run


def _write(tmp: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


# ---------------------------------------------------------------- fixtures of the cases

PASSING = {"test_ok.py": "def test_ok():\n    pass\n"}
GATED = """\
import pytest

@pytest.mark.dsakit_requires("cuda")
def test_a_gated():
    pass
"""
_BEHAVIOUR = "def value():\n    return 1\n"


def _tree(root: Path, version: str, behaviour: str = _BEHAVIOUR) -> None:
    pkg = root / version / "sglang"
    (pkg / "srt" / "model_executor").mkdir(parents=True)
    (pkg / "srt" / "model_executor" / "model_runner.py").write_text("class ModelRunner: pass\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "_version.py").write_text(f"__version__ = '{version}'\n")
    (pkg / "behaviour.py").write_text(behaviour)


def _trees(pr_behaviour: str = _BEHAVIOUR) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        _tree(tmp, "0.0.1")
        _tree(tmp, "0.0.2", pr_behaviour)
    return setup


def _broken_pr(changed: str) -> Callable[[Path], None]:
    """`base/sglang`: the installed SGLang; `pr/sglang`: links to it, but `changed` (a file under
    the package) is a copy whose first line does not parse (`x = 1 +`)."""
    def setup(tmp: Path) -> None:
        from dsakit.errors import UsageError
        from dsakit.stack.sglang_release import installed_release

        try:
            package = installed_release().package_dir
        except UsageError:
            pytest.skip("[module:sglang] pr-check reads a real SGLang tree")
        (tmp / "base").mkdir()
        (tmp / "base" / "sglang").symlink_to(package)
        parts = Path(changed).parts
        source, here = package, tmp / "pr" / "sglang"
        for part in parts:
            here.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != part:
                    (here / entry.name).symlink_to(entry)
            source, here = source / part, here / part
        here.write_text("x = 1 +\n" + source.read_text(encoding="utf-8"), encoding="utf-8")
    return setup


def _no_leftovers_nor_outputs(tmp: Path, outcome: Outcome) -> None:
    _no_leftovers(tmp, outcome)
    assert not (tmp / "out.json").exists(), "an output of a refused run was written"


def _read_only_dir(tmp: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: the case needs an ordinary user")
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o555)


FLEET = ("--dsakit-device", "sm90,sm103")
PR_CHECK = ("pr-check", "--base", "base", "--pr", "pr", "--devices", "sm90", "--json", "out.json", "--", "test_ok.py")
USES_TREE = {"test_tree.py": "from sglang import behaviour\ndef test_value():\n    assert behaviour.value() == 1\n"}
COMPARE = ("compare", "--base", "0.0.1", "--pr", "0.0.2")


def _no_leftovers(tmp: Path, outcome: Outcome) -> None:
    assert outcome.leftovers == [], f"left behind in TMPDIR: {outcome.leftovers}"


def _no_tmp_files(tmp: Path, outcome: Outcome) -> None:
    assert not list(tmp.rglob("*.tmp")), list(tmp.rglob("*.tmp"))


def _junit_written(tmp: Path, outcome: Outcome) -> None:
    printed = re.findall(r"junit: (\S+)", outcome.text)
    assert printed and all((tmp / p).is_file() for p in printed), printed


def _report_json(tmp: Path, outcome: Outcome) -> None:
    data = json.loads((tmp / "r.json").read_text())
    groups = {g["code"]: g for g in data["skips"]["groups"]}
    assert groups["cuda"]["tests"] == ["test_crash.py::test_a_gated"], groups
    assert data["must_run"]["failed"] == {"cuda": ["test_crash.py::test_a_gated"]}


def _golden_kept(tmp: Path, outcome: Outcome) -> None:
    assert (tmp / "__snapshots__" / "test_snap.ambr").is_file(), "the golden was deleted"


def _warm_selected_nothing(tmp: Path, outcome: Outcome) -> None:
    data = json.loads(outcome.text[outcome.text.index("{"):])
    assert data["collected"] == 0 and data["targets"] == [], data


# -- top-k checks (item 3, survivor 2)


def _topk(indices: Any, scores: Any, lengths: Any, k: int, *, dtype: str | None = None) -> Callable[[], Any]:
    def call() -> Any:
        import torch

        from dsakit.topk.checks import assert_topk_valid

        sc = torch.tensor(scores, dtype=getattr(torch, dtype)) if dtype else torch.tensor(scores)
        return assert_topk_valid(torch.tensor(indices), sc, lengths, k)
    return call


# -- the mock (items 9, 10)


def _mock_copies(how: str) -> Callable[[], Any]:
    def call() -> Any:
        import copy
        import pickle

        from dsakit.mocks.model_runner import MockModelRunner

        runner = MockModelRunner(role="draft", max_running_requests=8, omit=["model_config"])
        runner.max_running_requests = 16  # a write after construction travels with the copy
        other = {"copy": copy.copy, "deepcopy": copy.deepcopy,
                 "pickle": lambda r: pickle.loads(pickle.dumps(r))}[how](runner)
        assert other is not runner and other.is_draft_worker is True
        assert other.max_running_requests == 16
        with pytest.raises(AttributeError, match="omitted"):
            other.model_config  # noqa: B018 - omit survives the copy
        if how != "copy":
            other.max_running_requests = 4
            assert runner.max_running_requests == 16  # independent
        return f"{other!r} max_running_requests={other.max_running_requests}"
    return call


def _bogus_server_arg() -> Any:
    from dsakit.mocks.model_runner import MockModelRunner

    return MockModelRunner().server_args.bogus_arg


def _mock_given_twice(**given: Any) -> Callable[[], Any]:
    def call() -> Any:
        from dsakit.mocks.model_runner import MockModelRunner

        return MockModelRunner(**given)
    return call


def _copy_nested_node() -> Any:
    import copy

    from dsakit.mocks.model_runner import MockModelRunner

    return copy.copy(MockModelRunner().server_args)


# -- SIGINT under -n 2 (item 11)


def _sigint_run(tmp: Path) -> Outcome:
    """Ctrl-C in a terminal: SIGINT to the whole foreground process group (the xdist controller
    and every worker) while both workers are busy."""
    _write(tmp, {"test_int.py": GATED + (
        "\n@pytest.mark.dsakit_requires('cuda')\n"
        "def test_b_gated():\n"
        "    pass\n\n"
        "import os, signal, time\n\n"
        "def test_c_interrupt():\n"
        "    time.sleep(4)  # the gated skips are reported by now\n"
        "    os.killpg(os.getpgrp(), signal.SIGINT)\n"
        "    time.sleep(30)\n\n"
        "def test_d_busy():\n"
        "    time.sleep(30)\n")})
    # its own session: the process group signalled is the pytest run's, not this test's
    return _command(tmp, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--dsakit-device=cpu",
                          "-n", "2", "test_int.py"], timeout=120, new_session=True)


# ---------------------------------------------------------------- the table

SNAP_TEST = {"test_snap.py": "def test_snap(snapshot):\n    assert snapshot == 1\n"}
SELECTION_TEST = {"test_sel.py": """
    import torch

    def test_sel(selection_snapshot):
        selection_snapshot.assert_selection(
            "tiny", torch.tensor([[3, 2]]), torch.tensor([[0.0, 1.0, 2.0, 3.0]]), [4], 2, reference=True)
"""}


@pytest.fixture(scope="module")
def selection_golden(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], None]:
    """Puts SELECTION_TEST and its golden into a case's folder: one `--snapshot-update` run (it
    imports torch) writes the golden that each golden-damage case then damages its own copy of."""
    project = tmp_path_factory.mktemp("selection-golden")
    _write(project, SELECTION_TEST)
    first = _command(project, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--snapshot-update",
                               "test_sel.py"])
    assert first.status == "exit 0", first.text
    assert first.leftovers == [], first.leftovers
    [golden] = project.glob("__snapshots__/test_sel/*.topksel")
    name, text = golden.relative_to(project), golden.read_text()

    def place(tmp: Path) -> None:
        _write(tmp, SELECTION_TEST)
        (tmp / name).parent.mkdir(parents=True)
        (tmp / name).write_text(text)
    return place


def _golden(edit: Callable[[list[str]], list[str]]) -> Callable[[Path], Outcome]:
    def run(tmp: Path) -> Outcome:  # the folder holds SELECTION_TEST and its golden (selection_golden)
        [golden] = tmp.glob("__snapshots__/test_sel/*.topksel")
        golden.write_text("\n".join(edit(golden.read_text().splitlines())) + "\n")
        return _command(tmp, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "test_sel.py"])
    return run


def _snapshot_collect_only_update(tmp: Path) -> Outcome:
    _write(tmp, SNAP_TEST)
    first = _command(tmp, ["-m", "pytest", "-p", "no:cacheprovider", "--snapshot-update", "test_snap.py"])
    assert first.status == "exit 0", first.text
    return _command(tmp, ["-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "--collect-only",
                          "--snapshot-update", "test_snap.py"])


CASES: list[Case] = [
    # 1 -- dsakit compare
    Case("compare-collects-nothing", "1", "dsakit compare --base A --pr B -- test_empty.py",
         dsakit(*COMPARE, "--", "test_empty.py", files={"test_empty.py": "x = 1\n"}, setup=_trees()),
         "exit 2", ("collected no tests (pytest exit 5)", "nothing was compared")),
    Case("compare-missing-path", "1", "dsakit compare --base A --pr B -- nope.py",
         dsakit(*COMPARE, "--", "nope.py", setup=_trees()),
         "exit 2", ("pytest usage error", "(pytest exit 4)")),
    Case("compare-pr-breaks-collection", "1", "dsakit compare ... (PR's sglang fails to import)",
         dsakit(*COMPARE, "--", "test_tree.py", files=USES_TREE, setup=_trees("raise ImportError('PR broke it')\n")),
         "exit 1", ("the pr run", "(pytest exit 2)", "the PR breaks the selection: a regression")),
    Case("compare-temp-dir-removed", "11", "dsakit compare --base A --pr A (no --keep)",
         dsakit("compare", "--base", "0.0.1", "--pr", "0.0.1", "--", "test_tree.py", files=USES_TREE,
                setup=_trees()),
         "exit 0", ("unchanged 1",), extra=_no_leftovers),
    Case("compare-json-under-a-file", "5", "dsakit compare ... --json test_tree.py/out.json",
         dsakit(*COMPARE, "--json", "test_tree.py/out.json", "--", "test_tree.py", files=USES_TREE,
                setup=_trees()),
         "exit 2", ("--json 'test_tree.py/out.json' cannot be written: test_tree.py is a file",),
         absent=("Traceback (most recent call last)", "runs: base exit")),
    Case("compare-keep-under-a-file", "5", "dsakit compare ... --keep test_tree.py/logs",
         dsakit(*COMPARE, "--keep", "test_tree.py/logs", "--", "test_tree.py", files=USES_TREE,
                setup=_trees()),
         "exit 2", ("--keep 'test_tree.py/logs' cannot be used",), absent=("Traceback (most recent call last)", "runs: base exit")),
    # 4 -- dsakit rerun-test
    Case("rerun-os-exit-0", "4", "dsakit rerun-test test_exit.py (test calls os._exit(0))",
         dsakit("rerun-test", "test_exit.py",
                files={"test_exit.py": "import os\ndef test_gone():\n    os._exit(0)\n"}),
         "exit 1", ("FAILED (no test counted)", "0 passed, 1 failed"), extra=_junit_written),
    Case("rerun-timeout-junit", "4", "dsakit rerun-test --timeout 2 test_slow.py",
         dsakit("rerun-test", "--timeout", "2", "test_slow.py",
                files={"test_slow.py": "import time\ndef test_slow():\n    time.sleep(60)\n"}),
         "exit 1", ("TIMEOUT",), extra=_junit_written),
    Case("rerun-negative-timeout", "4", "dsakit rerun-test --timeout -1 test_ok.py",
         dsakit("rerun-test", "--timeout", "-1", "test_ok.py", files=PASSING),
         "exit 2", ("--timeout must be a positive number of seconds, got -1",)),
    Case("rerun-directory", "4", "dsakit rerun-test suite/",
         dsakit("rerun-test", "suite", files={"suite/test_one.py": PASSING["test_ok.py"]}),
         "exit 0", ("suite/test_one.py", "1 passed, 0 failed")),
    Case("rerun-empty-directory", "4", "dsakit rerun-test empty/",
         dsakit("rerun-test", "empty", files={"empty/notes.txt": "x\n"}),
         "exit 2", ("directory empty holds no test_*.py",)),
    Case("rerun-syntax-error", "4", "dsakit rerun-test test_broken.py test_ok.py",
         dsakit("rerun-test", "test_broken.py", "test_ok.py",
                files={"test_broken.py": "def test_x(:\n    pass\n", **PASSING}),
         "exit 1", ("does not parse (line 1", "1 passed, 1 failed: test_broken.py")),
    Case("rerun-junitxml-under-a-file", "5", "dsakit rerun-test --junitxml test_ok.py/junit test_ok.py",
         dsakit("rerun-test", "--junitxml", "test_ok.py/junit", "test_ok.py", files=PASSING),
         "exit 2", ("--junitxml 'test_ok.py/junit' cannot be used: test_ok.py is a file",),
         absent=("Traceback (most recent call last)", "result:")),
    # issue 34 item 2 -- pr-check on a PR tree that does not parse
    Case("pr-check-topk-backend-does-not-parse", "34.2", "dsakit pr-check ... (the PR's dsa_topk_backend.py: `x = 1 +`)",
         dsakit(*PR_CHECK, files=PASSING, setup=_broken_pr("srt/layers/attention/dsa/dsa_topk_backend.py")),
         "exit 2", ("dsakit: error: the --pr tree pr: sglang/srt/layers/attention/dsa/dsa_topk_backend.py:1: "
                    "does not parse: invalid syntax; pr-check compares two trees whose backends and ModelRunner "
                    "parse: fix the file and run again",),
         absent=("Traceback (most recent call last)", "AssertionError", "dsakit pr-check: base"),
         extra=_no_leftovers_nor_outputs),
    Case("pr-check-model-runner-does-not-parse", "34.2", "dsakit pr-check ... (the PR's model_runner.py: `x = 1 +`)",
         dsakit(*PR_CHECK, files=PASSING, setup=_broken_pr("srt/model_executor/model_runner.py")),
         "exit 2", ("dsakit: error: the --pr tree pr: sglang/srt/model_executor/model_runner.py:1: does not parse",),
         absent=("Traceback (most recent call last)", "dsakit pr-check: base"), extra=_no_leftovers_nor_outputs),
    # 10 -- the CLI's error prefix
    Case("cli-single-error-prefix", "10", "dsakit compare --base x",
         dsakit("compare", "--base", "x"),
         "exit 2", ("dsakit: error: compare: the following arguments are required: --pr",),
         absent=("Traceback (most recent call last)", "dsakit: error: dsakit")),
    # 2 -- a crashed xdist worker's gated skips
    Case("xdist-crashed-worker-keeps-skips", "2",
         "pytest -n 1 --dsakit-report r.json --dsakit-must-run cuda (a test calls os._exit(1))",
         pytest_run("-n", "1", "--dsakit-report", "r.json", "--dsakit-must-run", "cuda", "test_crash.py",
                    files={"test_crash.py": GATED + "\nimport os\n\ndef test_b_crash():\n    os._exit(1)\n"}),
         "exit 1", ("1 skipped  [cuda]", "--dsakit-must-run cuda: 1 test(s) behind gate cuda skipped"),
         absent=("no test skipped behind a dsakit gate",), extra=_report_json),
    # 5 -- --dsakit-report
    Case("report-under-a-file", "5", "pytest --dsakit-report test_ok.py/r.json",
         pytest_run("--dsakit-report", "test_ok.py/r.json", files=PASSING),
         "exit 4", ("--dsakit-report 'test_ok.py/r.json' cannot be written: test_ok.py is a file",),
         extra=_no_tmp_files),
    Case("report-dir-gone-at-the-end", "5", "pytest --dsakit-report out/r.json (out/ replaced by a file mid-run)",
         pytest_run("--dsakit-report", "out/r.json", "test_gone.py", files={
             "out/keep.txt": "x\n",
             "test_gone.py": GATED + "\nimport shutil\n\ndef test_b_break_the_dir():\n"
                             "    shutil.rmtree('out')\n    open('out', 'w').close()\n"}),
         "exit 4", ("1 skipped  [cuda]", "not written at the end of the run: --dsakit-report "
                    "'out/r.json' cannot be written: out is a file", "1 passed, 1 skipped"),
         extra=_no_tmp_files),
    Case("device-given-twice", "34.7", "pytest --dsakit-device sm103,sm103",
         pytest_run("--dsakit-device", "sm103,sm103", files=PASSING),
         "exit 4", ("ERROR: --dsakit-device sm103,sm103: 'sm103' and 'sm103' are the same device (sm103) given "
                    "twice; name each device once (one device: --dsakit-device sm103;",),
         absent=("Traceback (most recent call last)", "unknown dsakit device", "dsakit fleet:")),
    Case("device-alias-and-name-given", "34.7", "pytest --dsakit-device b300,sm103",
         pytest_run("--dsakit-device", "b300,sm103", files=PASSING),
         "exit 4", ("ERROR: --dsakit-device b300,sm103: 'b300' and 'sm103' are the same device (sm103) given twice",),
         absent=("Traceback (most recent call last)", "unknown dsakit device", "dsakit fleet:")),
    Case("fleet-report-under-a-file", "34.3", "pytest --dsakit-device sm90,sm103 --dsakit-report test_ok.py/r.json",
         pytest_run(*FLEET, "--dsakit-report", "test_ok.py/r.json", files=PASSING),
         "exit 4", ("ERROR: --dsakit-report 'test_ok.py/r.json' cannot be written: test_ok.py is a file, not a "
                    "directory; pass a file path you can write",),
         absent=("Traceback (most recent call last)", "dsakit fleet:"), extra=_no_leftovers),
    Case("fleet-report-read-only-dir", "34.3", "pytest --dsakit-device sm90,sm103 --dsakit-report ro/r.json (ro: mode 555)",
         pytest_run(*FLEET, "--dsakit-report", "ro/r.json", files=PASSING, setup=_read_only_dir),
         "exit 4", ("ERROR: --dsakit-report 'ro/r.json' cannot be written: ro is not writable",),
         absent=("Traceback (most recent call last)", "dsakit fleet:"), extra=_no_leftovers),
    # 8 -- --dsakit-must-run with nothing behind the gate
    Case("must-run-no-test-behind-gate", "8", "pytest --dsakit-must-run cuda (no test gated on cuda)",
         pytest_run("--dsakit-must-run", "cuda", files=PASSING),
         "exit 0", ("--dsakit-must-run cuda: no collected test sits behind gate cuda",
                    "--dsakit-must-run-strict makes this fail")),
    Case("must-run-commas-only", "34.4", "pytest --dsakit-must-run ',,'",
         pytest_run("--dsakit-must-run", ",,", files=PASSING),
         "exit 4", ("ERROR: --dsakit-must-run ',,' names no gate code: pass CODE[,CODE...] (for example cuda,fa3; "
                    "`dsakit capabilities` lists the codes), or leave --dsakit-must-run out",),
         absent=("Traceback (most recent call last)", "1 passed")),
    # issue 45 item 5 -- silent before (exit 0, no word)
    Case("must-run-empty", "45.5", "pytest --dsakit-must-run=''",
         pytest_run("--dsakit-must-run=", files=PASSING),
         "exit 4", ("ERROR: --dsakit-must-run '' names no gate code: pass CODE[,CODE...] (for example cuda,fa3; "
                    "`dsakit capabilities` lists the codes), or leave --dsakit-must-run out",),
         absent=("Traceback (most recent call last)", "1 passed")),
    Case("simulation-timeout-negative-no-device", "45.5", "pytest --dsakit-simulation-timeout -5 (no --dsakit-device)",
         pytest_plain("--dsakit-simulation-timeout", "-5", files=PASSING),
         "exit 4", ("ERROR: --dsakit-simulation-timeout -5: expected a number of seconds >= 0 (0: never stop a test)",),
         absent=("Traceback (most recent call last)", "1 passed")),
    Case("pr-check-same-tree", "45.5", "dsakit pr-check --base 0.0.1 --pr 0.0.1/sglang -- test_ok.py",
         dsakit("pr-check", "--base", "0.0.1", "--pr", "0.0.1/sglang", "--json", "out.json", "--", "test_ok.py",
                files=PASSING, setup=_trees()),
         "exit 2", ("dsakit: error: --base 0.0.1 and --pr 0.0.1/sglang are the same tree (", "0.0.1/sglang): every "
                    "test would be compared with itself, so no regression could show; pass the PR's tree to --pr"),
         absent=("Traceback (most recent call last)", "regression(s)"), extra=_no_leftovers_nor_outputs),
    Case("contract-check-tuple-and-runner-parameter", "45.5",
         "dsakit contract check --backend-src backend (reads through `self.a, self.r = 1, model_runner` and "
         "`__init__(self, runner)`)",
         dsakit("contract", "check", "--backend-src", "backend", files={"backend/my_backend.py": """\
             class AttentionBackend:
                 pass


             class TupleBackend(AttentionBackend):
                 def __init__(self, model_runner):
                     self.a, self.r = 1, model_runner

                 def forward(self):
                     return self.r.undeclared_via_tuple


             class RenamedBackend(AttentionBackend):
                 def __init__(self, runner):
                     self.runner = runner

                 def forward(self):
                     return self.runner.undeclared_via_runner_param
             """}),
         "exit 1", ("[read-not-in-contract] model_runner.undeclared_via_tuple is read at backend/my_backend.py:10 "
                    "(TupleBackend.forward)",
                    "[read-not-in-contract] model_runner.undeclared_via_runner_param is read at "
                    "backend/my_backend.py:18 (RenamedBackend.forward)", "2 missing from contract")),
    Case("report-merge-must-run-commas-only", "34.4", "dsakit report merge r.json --must-run ' , '",
         dsakit("report", "merge", "r.json", "--must-run", " , ", files={"r.json": "{}"}),
         "exit 2", ("dsakit: error: --must-run ' , ' names no gate code",)),
    Case("must-run-strict-no-test", "8", "pytest --dsakit-must-run cuda --dsakit-must-run-strict",
         pytest_run("--dsakit-must-run", "cuda", "--dsakit-must-run-strict", files=PASSING),
         "exit 1", ("no collected test sits behind gate cuda: fails the run",)),
    Case("contract-entry-bad-name", "34.6", "pytest with [tool.dsakit.contract.\"Bad Name!\"] in pyproject.toml",
         pytest_run(files={**PASSING, "pyproject.toml": '[tool.dsakit.contract."Bad Name!"]\ntype = "int"\n'
                                                        'target = 1\nset_by = "backend"\n'}),
         "exit 4", ('ERROR: ', 'pyproject.toml: [tool.dsakit.contract."Bad Name!"]: \'Bad Name!\' is not an attribute '
                    "path: each dot-separated part must be a Python identifier (letters, digits and _, not starting "
                    "with a digit, not a keyword)"), absent=("Traceback (most recent call last)", "1 passed")),
    # 10 -- --dsakit-roles
    Case("roles-unknown", "10", "pytest --dsakit-roles=foo (a model_runner test)",
         pytest_run("--dsakit-roles=foo", files={"test_mr.py": "def test_mr(model_runner):\n    pass\n"}),
         "exit 4", ("--dsakit-roles='foo': unknown role 'foo'; expected one of: target, draft",),
         absent=("Traceback (most recent call last)", "pluggy/_")),
    Case("roles-unknown-no-runner-test", "10", "pytest --dsakit-roles=foo (no model_runner test)",
         pytest_run("--dsakit-roles=foo", files=PASSING),
         "exit 4", ("--dsakit-roles='foo': unknown role 'foo'",)),
    Case("roles-unknown-in-marker", "10", "@pytest.mark.dsakit_role('foo') on a model_runner test",
         pytest_run(files={"test_mr.py": "import pytest\n\n@pytest.mark.dsakit_role('foo')\n"
                                         "def test_mr(model_runner):\n    pass\n"}),
         "exit 2", ("test_mr.py::test_mr: dsakit_role='foo': unknown role 'foo'; expected one of: target, draft",),
         absent=("Traceback", "pluggy/_")),  # no pluggy frames
    Case("roles-duplicate", "10", "pytest --dsakit-roles=target,target",
         pytest_run("--dsakit-roles=target,target", files={"test_mr.py": "def test_mr(model_runner):\n    pass\n"}),
         "exit 0", ("1 passed",)),
    Case("mock-undeclared-server-arg", "10", "MockModelRunner().server_args.bogus_arg",
         api(_bogus_server_arg),
         "ContractViolation", ("model_runner.server_args.bogus_arg is not in the dsakit role contract",
                               "not a ServerArgs field", "declares no server_args.bogus_arg"),
         absent=("(ModelRunner sets it)",)),
    # 6 -- goldens
    Case("snapshot-collect-only-update", "6", "pytest --collect-only --snapshot-update",
         _snapshot_collect_only_update,
         "exit 4", ("--snapshot-update with --collect-only would delete every golden",), extra=_golden_kept),
    Case("golden-truncated", "6", "pytest test_sel.py (golden cut before its '# ---')",
         _golden(lambda lines: lines[:-2]),
         "exit 1", ("golden file", "cannot be read: line", "is cut off before its closing '# ---'",
                    "--snapshot-update"), prepare="selection_golden"),
    Case("golden-garbled", "6", "pytest test_sel.py (a golden line replaced by junk)",
         _golden(lambda lines: [*lines[:3], "@@ garbage @@", *lines[4:]]),
         "exit 1", ("cannot be read: line 4: '@@ garbage @@' is neither a record marker",),
         prepare="selection_golden"),
    # 7 -- dsakit warm after -k
    Case("warm-k-nomatch", "7", "dsakit warm --json test_jit.py -- -k nomatch",
         dsakit("warm", "--json", "test_jit.py", "--", "-k", "nomatch", files={"test_jit.py": """
             import pytest

             @pytest.mark.dsakit_jit("flashinfer-topk")
             def test_jit():
                 pass
         """}),
         "exit 0", ('"collected": 0',), extra=_warm_selected_nothing),
    # 11 -- leaks
    Case("xdist-lock-dir-removed", "11", "pytest -n 2 (TMPDIR checked afterwards)",
         pytest_run("-n", "2", files=PASSING),
         "exit 0", ("1 passed",), extra=_no_leftovers),
    Case("sigint-under-xdist-keeps-inventory", "11", "pytest -n 2, Ctrl-C (SIGINT to the process group, both workers busy)",
         _sigint_run,
         "exit 2", ("dsakit skip inventory", "2 skipped  [cuda]", "KeyboardInterrupt"), absent=()),
    # 3 -- assert_topk_valid (and survivor 2: an index equal to the length)
    Case("topk-float64-close-scores", "3", "assert_topk_valid([[0]], float64 [[2**25, 2**25+1]], [2], 1)",
         api(_topk([[0]], [[2.0**25, 2.0**25 + 1]], [2], 1, dtype="float64")),
         "AssertionError", ("row 0 [order]", "33554433.0")),
    Case("topk-int64-close-scores", "3", "assert_topk_valid([[0]], int64 [[2**40, 2**40+1]], [2], 1)",
         api(_topk([[0]], [[2**40, 2**40 + 1]], [2], 1, dtype="int64")),
         "AssertionError", ("row 0 [order]", "1099511627777")),
    Case("topk-fractional-indices", "3", "assert_topk_valid([[1.5, 0.2, 2.7]], ...)",
         api(_topk([[1.5, 0.2, 2.7]], [[0.1, 0.2, 0.3, 0.4]], [4], 3)),
         "UsageError", ("top-k indices must have an integer dtype", "torch.float32")),
    Case("topk-length-wider-than-row", "3", "assert_topk_valid(..., lengths=[9]) on a 4-wide row",
         api(_topk([[0]], [[0.1, 0.2, 0.3, 0.4]], [9], 1)),
         "UsageError", ("top-k row 0: window [start 0, start + length 9) does not fit the score row of width 4",)),
    Case("topk-negative-length", "3", "assert_topk_valid(..., lengths=[-5])",
         api(_topk([[-1]], [[0.1, 0.2, 0.3, 0.4]], [-5], 1)),
         "UsageError", ("negative top-k lengths: row 0 = -5",)),
    Case("topk-index-equal-to-length", "survivor 2", "assert_topk_valid([[9, 10, 8, 7]], 12-wide, [10], 4)",
         api(_topk([[9, 10, 8, 7]], [[float(i) for i in range(12)]], [10], 4)),
         "AssertionError", ("row 0 [out-of-range] (length 10): entries [10] are neither -1 nor in [0, 10)",)),
    Case("topk-nan-row-selects-nothing", "34.6", "assert_topk_valid([[-1, -1]], [[nan, nan, 5, 4, 3]], [5], 2)",
         api(_topk([[-1, -1]], [[float("nan"), float("nan"), 5.0, 4.0, 3.0]], [5], 2)),
         "AssertionError", ("row 0 [count] (length 5, k-th largest valid score 4.0): selected nothing, but the "
                            "window holds 3 ranked (finite) scores beside its 2 NaN, at least min(length, k) = 2: "
                            "a NaN may take a slot or cost one (-1), never the whole row; expected 1..2 positions",)),
    Case("topk-complex-scores", "34.6", "assert_topk_valid([[1]], [[1+1j, 2+0j]], [2], 1)",
         api(_topk([[1]], [[1 + 1j, 2 + 0j]], [2], 1)),
         "UsageError", ("top-k scores are complex (torch.complex64): a top-k ranks real numbers",)),
    # 9 -- copying the mock
    Case("mock-copy", "9", "copy.copy(MockModelRunner(role='draft', ...))", api(_mock_copies("copy")),
         "ok", ("<strict model_runner role=draft> max_running_requests=16",)),
    Case("mock-deepcopy", "9", "copy.deepcopy(MockModelRunner(role='draft', ...))", api(_mock_copies("deepcopy")),
         "ok", ("<strict model_runner role=draft> max_running_requests=4",)),
    Case("mock-pickle", "9", "pickle.loads(pickle.dumps(MockModelRunner(role='draft', ...)))",
         api(_mock_copies("pickle")),
         "ok", ("<strict model_runner role=draft> max_running_requests=4",)),
    Case("mock-override-given-twice", "34.6", "MockModelRunner(max_running_requests=8, overrides={'max_running_requests': 16})",
         api(_mock_given_twice(max_running_requests=8, overrides={"max_running_requests": 16})),
         "UsageError", ("model_runner.max_running_requests is given twice: max_running_requests=8 and "
                        "overrides={'max_running_requests': 16}; give each attribute once",)),
    Case("mock-nested-override-given-twice", "34.6",
         "MockModelRunner(model_config__context_len=1, overrides={'model_config.context_len': 2})",
         api(_mock_given_twice(model_config__context_len=1, overrides={"model_config.context_len": 2})),
         "UsageError", ("model_runner.model_config.context_len is given twice: model_config__context_len=1 and "
                        "overrides={'model_config.context_len': 2}",)),
    Case("mock-copy-nested-node", "9", "copy.copy(MockModelRunner().server_args)", api(_copy_nested_node),
         "TypeError", ("cannot copy or pickle <strict model_runner.server_args role=target> on its own",
                       "copy the runner")),
]


@pytest.mark.parametrize("case", CASES, ids=[c.case_id for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if case.prepare is not None:
        request.getfixturevalue(case.prepare)(tmp_path)
    outcome = case.run(tmp_path)
    shown = f"[{case.command}] -> {outcome.status}\n{outcome.text[-3000:]}"
    assert outcome.status == case.status, shown
    for fragment in case.fragments:
        assert fragment in outcome.text, f"missing {fragment!r}\n{shown}"
    for fragment in case.absent:
        assert fragment not in outcome.text, f"unexpected {fragment!r}\n{shown}"
    if case.extra is not None:
        case.extra(tmp_path, outcome)


def test_case_ids_are_unique() -> None:
    assert len({c.case_id for c in CASES}) == len(CASES)

