"""A downstream suite's own contract entries ([tool.dsakit.contract] in its pyproject.toml): the
fixtures, `MockModelRunner`, the violation message and `dsakit contract check --backend-src`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import dsakit
from dsakit.contracts.extension import effective_contract
from dsakit.errors import UsageError
from dsakit.mocks import read_log

DECLARED = """
[tool.dsakit.contract.sliding_window_size]
type = "int"
target = 4096
draft = 128
readers = ["MyBackend.__init__"]
set_by = "sglang/srt/model_executor/model_runner.py (ModelRunner.__init__)"

[tool.dsakit.contract."model_config.rope_scaling_kind"]
type = "str"
target = "yarn"
set_by = "ModelConfig"

[tool.dsakit.contract.my_dtype]
type = "torch.dtype"
target = "torch.float16"
set_by = "nowhere yet"
"""

BACKEND = """
class MyBackend:
    def __init__(self, model_runner):
        self.window = model_runner.sliding_window_size
        self.context = model_runner.model_config.context_len
"""


def test_declared_entries_reach_fixtures_and_mocks(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(DECLARED)
    pytester.makepyfile(
        """
        import pytest
        import dsakit

        def test_fixture(model_runner, model_runner_role):
            expected = 128 if model_runner_role == "draft" else 4096
            assert model_runner.sliding_window_size == expected
            assert model_runner.model_config.rope_scaling_kind == "yarn"

        def test_direct_mock_and_override():
            runner = dsakit.MockModelRunner("target", sliding_window_size=8)
            assert runner.sliding_window_size == 8
            with pytest.raises(dsakit.UsageError, match="expected int"):
                dsakit.MockModelRunner("target", sliding_window_size="wide")
            runner.sliding_window_size = 16  # a declared write is allowed (and type-checked)
            assert runner.sliding_window_size == 16
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)


def test_without_a_declaration_the_violation_says_how_to_declare_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import dsakit

        def test_read(target_runner):
            with pytest.raises(dsakit.ContractViolation) as raised:
                target_runner.sliding_window_size
            message = str(raised.value)
            assert "[tool.dsakit.contract.\\"sliding_window_size\\"]" in message
            assert "contracts/model_runner_contract.py" not in message
            assert "model_runner.py:" in message  # set_by is filled with the real runner's site
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_mocks_outside_the_run_keep_dsakit_contract(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    extended = effective_contract(tmp_path)
    assert "sliding_window_size" in extended and "sliding_window_size" not in dsakit.MODEL_RUNNER_CONTRACT
    assert extended.get("sliding_window_size").declared_in == str(tmp_path / "pyproject.toml")
    runner = dsakit.MockModelRunner("draft", contract=extended)
    assert runner.sliding_window_size == 128
    assert str(runner.my_dtype) == "torch.float16"  # a dotted default, resolved on first read
    with pytest.raises(dsakit.ContractViolation):
        dsakit.MockModelRunner("draft").sliding_window_size  # noqa: B018
    read_log.clear()  # the expected violation is not one for this run's summary


@pytest.mark.parametrize(("declaration", "expected"), [
    ('[tool.dsakit.contract.x]\ntype = "int"\ntarget = 1\n', "missing set_by"),
    ('[tool.dsakit.contract.x]\ntype = "int"\ntarget = "one"\nset_by = "s"\n', "target = 'one' is not a int"),
    ('[tool.dsakit.contract.x]\ntype = "int"\ntarget = 1\nset_by = "s"\ncolour = 1\n', "unknown key(s) colour"),
    ('[tool.dsakit.contract.page_size]\ntype = "int"\ntarget = 1\nset_by = "s"\n', "already declared by dsakit"),
    ('[tool.dsakit.contract."cfg.x"]\ntype = "int"\ntarget = 1\nset_by = "s"\n', "parent model_runner.cfg is not declared"),
    ('[tool.dsakit.contract.x]\ntype = "int"\nset_by = "s"\n', "target default missing"),
    # a misspelt type names the valid types (it is no dotted class name)
    ('[tool.dsakit.contract.x]\ntype = "objekt"\ntarget = 1\nset_by = "s"\n',
     "type = 'objekt' is not a type dsakit knows; did you mean 'object'? Valid types: int, float"),
    ('[tool.dsakit.contract.x]\ntype = "integer"\ntarget = 1\nset_by = "s"\n', "did you mean 'int'? Valid types:"),
    ('[tool.dsakit.contract.x]\ntype = "int | None"\ntarget = 1\nset_by = "s"\n', "add `optional = true`"),
    ('[tool.dsakit.contract.x]\ntype = "int"\ntarget = 1\nset_by = ""\n', "set_by is empty"),
    # an entry name a backend cannot read as model_runner.<path> (issue 34 item 6)
    ('[tool.dsakit.contract."Bad Name!"]\ntype = "int"\ntarget = 1\nset_by = "s"\n',
     "'Bad Name!' is not an attribute path: each dot-separated part must be a Python identifier"),
    ('[tool.dsakit.contract."model_config.2nd"]\ntype = "int"\ntarget = 1\nset_by = "s"\n',
     "'model_config.2nd' is not an attribute path"),
    ('[tool.dsakit.contract."class"]\ntype = "int"\ntarget = 1\nset_by = "s"\n', "'class' is not an attribute path"),
])
def test_bad_declarations_are_usage_errors(tmp_path: Path, declaration: str, expected: str) -> None:
    (tmp_path / "pyproject.toml").write_text(declaration)
    with pytest.raises(UsageError) as raised:
        effective_contract(tmp_path)
    assert expected in str(raised.value) and "pyproject.toml" in str(raised.value)


def test_bad_declaration_fails_the_pytest_run_before_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.dsakit.contract.x]\ntype = "int"\ntarget = 1\n')
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*missing set_by*"])


def _check(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dsakit contract check ARGS` from `project`, in this process: the check is static (no torch,
    no SGLang import) and reads the project's pyproject.toml by path and mtime, so the installed
    SGLang is scanned once per worker instead of once per call (test_contract_check.py: the same,
    and its one run through `python -m dsakit`)."""
    from tests.conftest import _dsakit_in_process

    return _dsakit_in_process(project, "contract", "check", *args)


def test_contract_check_scans_the_suites_own_backend(tmp_path: Path) -> None:
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "my_backend.py").write_text(BACKEND)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'downstream'\n")
    undeclared = _check(tmp_path, "--backend-src", "backend")
    assert undeclared.returncode == 1, undeclared.stdout + undeclared.stderr
    assert "[read-not-in-contract] model_runner.sliding_window_size is read at" in undeclared.stdout
    assert "my_backend.py:4" in undeclared.stdout
    assert '[tool.dsakit.contract."sliding_window_size"]' in undeclared.stdout
    # declared (without the entry the real runner never sets): the same backend passes
    (tmp_path / "pyproject.toml").write_text(DECLARED.split("[tool.dsakit.contract.my_dtype]")[0])
    declared = _check(tmp_path, "--backend-src", "backend")
    assert declared.returncode == 0, declared.stdout + declared.stderr
    assert "backend backend against SGLang" in declared.stdout.splitlines()[-1]
    assert "2 reads in 1 files, 0 missing from contract" in declared.stdout.splitlines()[-1]


ALIASED = """
class ThroughSelf:
    def __init__(self, model_runner):
        self.runner = model_runner                      # 4
        self.window = self.runner.my_window             # 5

    def forward(self):
        mr = self.runner                                # 8
        return mr.my_forward_state                      # 9


def build(model_runner):
    mr = model_runner
    return mr.my_local_state                            # 14


class Rebound:
    def __init__(self, model_runner):
        self.runner = model_runner
        self.runner.my_backend_state = {}               # 20: a set, through the alias

    def reset(self):
        return self.runner.my_backend_state             # 23
"""


def test_contract_check_follows_the_runner_through_self_and_local_aliases(tmp_path: Path) -> None:
    """`self.runner = model_runner` (read in any method, also through a local `mr = self.runner`)
    and `mr = model_runner` are the runner: their reads are checked, and a set through them counts
    for a `set_by = "backend"` entry (issue 34 item 5: before, the check saw 0 reads -> OK)."""
    (tmp_path / "backend.py").write_text(ALIASED)
    (tmp_path / "pyproject.toml").write_text(OWN_STATE)
    result = _check(tmp_path, "--backend-src", "backend.py")
    assert result.returncode == 1, result.stdout + result.stderr
    for name, line in (("my_window", 5), ("my_forward_state", 9), ("my_local_state", 14)):
        assert f"[read-not-in-contract] model_runner.{name} is read at backend.py:{line}" in result.stdout, name
    assert "my_backend_state is read at" not in result.stdout  # declared, and set before it is read
    assert "contract-not-set-by-backend" not in result.stdout
    assert "4 reads in 1 files, 3 missing from contract" in result.stdout.splitlines()[-1]


def test_contract_check_fails_an_extension_entry_the_real_runner_never_sets(tmp_path: Path) -> None:
    (tmp_path / "backend.py").write_text(BACKEND)
    (tmp_path / "pyproject.toml").write_text(DECLARED)
    result = _check(tmp_path, "--backend-src", "backend.py")
    assert result.returncode == 1
    assert (f"[contract-not-set-by-runner] contract entry model_runner.my_dtype is never assigned"
            in result.stdout) and f"remove it in {tmp_path / 'pyproject.toml'}" in result.stdout


OWN_STATE = """
[tool.dsakit.contract.my_backend_state]
type = "object"
optional = true
readers = ["MyBackend.forward"]
set_by = "backend"
"""


@pytest.mark.parametrize(("backend", "code", "expected"), [
    ("class MyBackend:\n    def __init__(self, model_runner):\n        self.model_runner = model_runner\n"
     "        model_runner.my_backend_state = {}\n\n    def forward(self):\n"
     "        return self.model_runner.my_backend_state\n", 0, None),
    ("class MyBackend:\n    def __init__(self, model_runner):\n        self.model_runner = model_runner\n\n"
     "    def forward(self):\n        return self.model_runner.my_backend_state\n", 1,
     '[contract-not-set-by-backend] contract entry model_runner.my_backend_state is declared set_by = "backend"'),
    ("class MyBackend:\n    def __init__(self, model_runner):\n        seen = model_runner.my_backend_state\n"
     "        model_runner.my_backend_state = seen\n", 1,
     "[read-before-backend-sets] model_runner.my_backend_state is read at "),
], ids=["sets-then-reads", "never-sets", "reads-first"])
def test_contract_check_backend_owned_entry(tmp_path: Path, backend: str, code: int, expected: str | None,
                                            request: pytest.FixtureRequest) -> None:
    (tmp_path / "backend.py").write_text(backend)
    (tmp_path / "pyproject.toml").write_text(OWN_STATE)
    result = _check(tmp_path, "--backend-src", "backend.py")
    assert result.returncode == code, result.stdout + result.stderr
    assert "contract-not-set-by-runner" not in result.stdout  # the runner is not who sets it
    # the verdict line counts what failed (before: FAILED beside counters all 0, issue 34 item 7)
    last = result.stdout.splitlines()[-1]
    case = request.node.callspec.id
    never, first = int(case == "never-sets"), int(case == "reads-first")
    assert f"{never} not set by backend, {first} read before the backend sets them" in last, last
    assert last.endswith("→ FAILED" if code else "→ OK"), last
    if expected is not None:
        assert expected in result.stdout
    else:
        assert "my_backend_state " in result.stdout and "the suite's backend" in result.stdout  # the table's set-by


def test_violation_suggests_the_real_reader_and_backend_for_a_write(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import dsakit

        class MySparseBackend:
            def __init__(self, model_runner):
                self.window = model_runner.my_window

        class Caching:
            def __init__(self, model_runner):
                model_runner.my_cache = {}

        def test_read(target_runner):
            with pytest.raises(dsakit.ContractViolation) as raised:
                MySparseBackend(target_runner)
            assert 'readers = ["MySparseBackend.__init__"]' in str(raised.value)

        def test_write(target_runner):
            with pytest.raises(dsakit.ContractViolation) as raised:
                Caching(target_runner)
            assert 'readers = ["Caching.__init__"]' in str(raised.value)
            assert 'set_by = "backend"' in str(raised.value)
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    read_log.clear()


def test_contract_check_refuses_a_missing_backend_src(tmp_path: Path) -> None:
    result = _check(tmp_path, "--backend-src", "nowhere")
    assert result.returncode == 2
    assert "--backend-src nowhere: no such file or folder" in result.stderr
