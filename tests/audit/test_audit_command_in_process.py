"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/command.py`'s `audit` and
`run_audit`, called in-process on a small suite against the installed SGLang (the scan of SGLang is
cached after the first test); test_audit.py runs the same command in a subprocess."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from dsakit.audit.command import _display, _site_order, audit, python_files, run_audit, select_devices
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import SGLangRelease

ONE = '''
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


    class UsedModelRunner:
        device = "cuda"


    class UnusedModelRunner:
        device = "cuda"


    class ThirdModelRunner:
        device = "cuda"


    def test_a():
        DeepseekSparseAttnBackend(UsedModelRunner())


    class ChangedModelRunner:
        device = "cuda"


    def test_changed():
        runner = ChangedModelRunner()
        runner.page_size = 64
        DeepseekSparseAttnBackend(runner)
'''

TWO = '''
    from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


    class V4ModelRunner:
        pass


    def test_b(some_fixture):
        DeepseekV4AttnBackend(V4ModelRunner())
        DeepseekV4AttnBackend(some_fixture)
'''

CPU_ONLY = '''
    class CpuModelRunner:
        device = "cpu"
'''


@pytest.fixture
def suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, text in (("a/test_one.py", ONE), ("b/test_two.py", TWO), ("b/helpers.py", CPU_ONLY)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_mock_once_in_file_and_line_order(suite: Path, installed_sglang: SGLangRelease) -> None:
    result = audit(["."], select_devices("sm90,sm100"), installed_sglang)
    assert result.devices == ["sm90", "sm100"]
    assert result.files == ["a/test_one.py", "b/helpers.py", "b/test_two.py"]
    # a used class's instance stands for the class (also one changed after construction, listed
    # where it is changed): the class is not listed again
    assert [(m.mock.label, m.mock.site, m.use_known) for m in result.mocks] == [
        ("UsedModelRunner", "a/test_one.py:4", True), ("UnusedModelRunner", "a/test_one.py:8", False),
        ("ThirdModelRunner", "a/test_one.py:12", False), ("ChangedModelRunner instance", "a/test_one.py:24", True),
        ("V4ModelRunner", "b/test_two.py:4", True)]
    assert [m.mock.label for m in result.not_dsa] == ["CpuModelRunner"]  # no backend, no DSA import
    assert [(c.site, c.argument) for c in result.untraced] == [("b/test_two.py:10", "some_fixture")]
    assert (result.unparsed, result.mismatches, result.warnings, result.strict) == ([], [], [], [])


def test_an_unparsable_file_is_named_and_the_others_audited(suite: Path, installed_sglang: SGLangRelease) -> None:
    (suite / "a" / "test_broken.py").write_text("def broken(:\n", encoding="utf-8")
    result = audit(["a"], select_devices("sm90"), installed_sglang)
    assert result.files == ["a/test_one.py"] and len(result.unparsed) == 1
    assert result.unparsed[0].startswith("a/test_broken.py has a syntax error at line 1: ")
    with pytest.raises(UsageError) as raised:
        audit(["a/test_broken.py"], select_devices("sm90"), installed_sglang)
    assert str(raised.value) == ("nothing audited: no scanned file could be parsed as Python ("
                                 f"{result.unparsed[0]}); pass a suite's Python test files")


def test_run_audit_prints_sorted_indented_json_or_the_report(
        suite: Path, installed_sglang: SGLangRelease, capsys: pytest.CaptureFixture[str]) -> None:
    code = run_audit(["b"], "sm100", None, True)
    out = capsys.readouterr().out
    data = json.loads(out)
    assert out == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert code == data["exit_code"] == 1 and data["devices"] == ["sm100"]
    assert data["sglang"]["package_dir"] == str(installed_sglang.package_dir)
    assert run_audit(["b"], "sm100", str(installed_sglang.package_dir), False) == 1
    text = capsys.readouterr().out
    assert text == audit(["b"], select_devices("sm100"), installed_sglang).render() + "\n"


def test_display_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "in").mkdir()
    monkeypatch.chdir(tmp_path / "in")
    assert _display(tmp_path / "in" / "x.py") == "x.py"
    assert _display(tmp_path / "out.py") == str(tmp_path / "out.py")
    assert _site_order("a/b.py:12") == ("a/b.py", 12) and _site_order("a/b.py:?") == ("a/b.py", 0)
    assert _site_order("c:\\x.py:3") == ("c:\\x.py", 3)


def _small_tree(root: Path) -> SGLangRelease:
    """A small tree in SGLang's layout (parsed, never imported): its scan is instant."""
    from dsakit.stack.sglang_release import DSA_BACKEND_FILE, MODEL_RUNNER_FILE

    tree = root / "sglang"
    for relative, text in ((MODEL_RUNNER_FILE, "class ModelRunner:\n    def __init__(self):\n        self.page_size = 1\n"),
                           (DSA_BACKEND_FILE, "class DeepseekSparseAttnBackend:\n    def __init__(self, model_runner):\n"
                                              "        self.p = model_runner.page_size\n")):
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_text(text, encoding="utf-8")
    return SGLangRelease(tree, "0.0.small")


def test_a_downstream_backends_reads_join_sglangs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = _small_tree(tmp_path / "tree")
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / "backend.py").write_text(
        "class MyBackend:\n    def __init__(self, model_runner):\n        self.x = model_runner.own_thing\n", encoding="utf-8")
    (tmp_path / "test_own.py").write_text(
        "from own.backend import MyBackend\nfrom sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend\n"
        "from types import SimpleNamespace\n\n\ndef test_it():\n    MyBackend(SimpleNamespace(device='cuda'))\n"
        "    DeepseekSparseAttnBackend(SimpleNamespace(device='cuda'))\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = audit(["test_own.py"], select_devices("sm90"), release, backend_src="own")
    assert [([c.name for c in m.calls], [(e.path, e.fails_on, e.contract_entry) for e in m.missing])
            for m in result.mocks] == [(["MyBackend"], [("own_thing", ("sm90",), None)]),
                                       (["DeepseekSparseAttnBackend"], [("page_size", ("sm90",), "page_size")])]
    assert str(result.mocks[0].missing[0].reads[0].read.site) == f"{tmp_path / 'own' / 'backend.py'}:3"


def test_python_files_takes_a_file_then_a_folder_and_skips_tool_dirs_at_any_depth(tmp_path: Path) -> None:
    for name in ("one.py", "suite/a.py", "suite/sub/__pycache__/c.py", "suite/sub/.venv/d.py", "suite/sub/e.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    assert python_files([str(tmp_path / "one.py"), str(tmp_path / "suite")]) == [
        tmp_path / "one.py", tmp_path / "suite" / "a.py", tmp_path / "suite" / "sub" / "e.py"]


def test_the_flow_adds_the_hip_backend_and_a_downstream_backend_once_each(tmp_path: Path) -> None:
    from dsakit.audit.command import _flow
    from dsakit.stack.sglang_release import DSA_BACKEND_FILE, HIP_RADIX_FILE

    release = _small_tree(tmp_path)
    own = tmp_path / "own.py"
    own.write_text("class Own:\n    def __init__(self, model_runner):\n        self.x = model_runner.own_thing\n"
                   "        setup(model_runner)\n\n\ndef setup(model_runner):\n    return model_runner.device\n",
                   encoding="utf-8")
    assert [(r.path, r.site.file) for r in _flow(release, []).reads] == [("page_size", f"sglang/{DSA_BACKEND_FILE}")]
    # the runner handed from Own.__init__ to setup(): a call of the downstream file joins the flow
    assert [(c.caller, c.callee) for c in _flow(release, [own]).calls if c.caller_file == "own.py"] == [
        ("Own.__init__", "setup")]
    assert [(r.path, r.site.file) for r in _flow(release, [own, own]).reads] == [
        ("page_size", f"sglang/{DSA_BACKEND_FILE}"), ("own_thing", "own.py"), ("device", "own.py")]
    (release.package_dir / HIP_RADIX_FILE).write_text(
        "class DeepseekV4HipRadixBackend:\n    def __init__(self, model_runner):\n        self.m = model_runner.model\n",
        encoding="utf-8")
    with_hip = SGLangRelease(release.package_dir, "0.0.small-hip")
    assert [(r.path, r.site.file) for r in _flow(with_hip, []).reads] == [
        ("page_size", f"sglang/{DSA_BACKEND_FILE}"), ("model", f"sglang/{HIP_RADIX_FILE}")]
