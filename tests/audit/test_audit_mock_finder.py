"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/mock_finder.py`, what an
expression of a suite denotes as a mock (kind, label, site, name, writes after construction, the
attributes it provides and why it may provide anything), evaluated directly on parsed suite files."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.suite_files import Scope, SourceFile, UnparsableFile, file_functions, parse_file
from dsakit.audit.mock_finder import MockValue, RunnerAttributes, SuiteIndex, candidates

RUNNER = RunnerAttributes(frozenset({"page_size", "model_config", "forward"}), frozenset({"forward"}))


def _files(tmp_path: Path, sources: dict[str, str]) -> list[SourceFile]:
    files = []
    for name, source in sources.items():
        path = tmp_path / name
        path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
        files.append(parse_file(path, name))
    return files


def _value(tmp_path: Path, source: str, expression: str = "runner", function: str = "test_it",
           more: dict[str, str] | None = None, owner: str | None = None) -> MockValue:
    files = _files(tmp_path, {"test_m.py": source, **(more or {})})
    index = SuiteIndex(files, RUNNER)
    for node, cls in file_functions(files[0]):
        if node.name == function and (cls.name if cls is not None else None) == owner:
            return index.value(ast.parse(expression, mode="eval").body, Scope(files[0], node, cls))
    raise AssertionError(function)


def _shape(value: MockValue) -> tuple[str, str, str, str, list[str], list[str], str]:
    return value.kind, value.label, value.site, value.name, value.added, value.tree.names(), value.tree.open


def test_a_class_with_init_class_body_methods_and_nested_classes(tmp_path: Path) -> None:
    source = '''
        from dataclasses import dataclass


        class FakeModelRunner:
            device = "cuda"
            page_size: int = 64
            declared: int

            class Config:
                context_len = 4096

            def __init__(self):
                self.model_config = SimpleNamespace(context_len=1)
                self.model_config.head_dim = 128
                setattr(self, "max_running_requests", 8)

            def later(self):
                self.server_args = None


        def test_it():
            runner = FakeModelRunner()
    '''
    value = _value(tmp_path, source)
    assert _shape(value) == ("class", "FakeModelRunner", "test_m.py:4", "runner", [], [
        "Config", "Config.context_len", "__init__.*", "device", "later.*", "max_running_requests", "model_config",
        "model_config.context_len", "model_config.head_dim", "page_size", "server_args"], "")
    assert value.class_site == "test_m.py:4"
    assert value.tree.children["device"].value == "cuda" and value.tree.sites["device"] == "test_m.py:5"
    assert value.tree.sites["max_running_requests"] == "test_m.py:15"


def test_a_dataclass_field_without_default_is_provided_on_instances_only(tmp_path: Path) -> None:
    source = '''
        @dataclasses.dataclass(frozen=True)
        class DcModelRunner:
            page_size: int
            device: str = "cuda"


        def test_it():
            runner = DcModelRunner(1)
            spec = MagicMock(spec=DcModelRunner)
    '''
    assert _value(tmp_path, source).tree.names() == ["device", "page_size.*"]
    assert _value(tmp_path, source, "spec").tree.names() == ["device.*"]  # the class object: no field


def test_writes_after_construction_are_added_and_named(tmp_path: Path) -> None:
    source = '''
        class BaseModelRunner:
            def __init__(self):
                self.page_size = 1


        def test_it():
            runner = BaseModelRunner()
            runner.device = "cuda"
            runner.model_config = SimpleNamespace()
            runner.model_config.context_len = 1
            runner.page_size += 1
            runner.counter += 1
            setattr(runner, "is_draft_worker", False)
            setattr(runner, name, 1)
            runner.__dict__.update(spec_algorithm=None)
            other.x = 1
    '''
    value = _value(tmp_path, source)
    assert _shape(value) == ("class", "BaseModelRunner instance", "test_m.py:6", "runner",
                             ["device", "model_config", "model_config.context_len", "counter", "is_draft_worker",
                              "spec_algorithm"],
                             ["__init__.*", "counter", "device", "is_draft_worker", "model_config",
                              "model_config.context_len", "page_size", "spec_algorithm"],
                             "setattr with a computed name at test_m.py:14")
    assert value.tree.sites["device"] == "test_m.py:8" and value.class_site == "test_m.py:1"


def test_update_with_unknown_keywords_or_arguments_opens_the_tree(tmp_path: Path) -> None:
    source = '''
        def test_it(extra):
            runner = SimpleNamespace()
            runner.__dict__.update(**extra)
            other = SimpleNamespace()
            other.configure_mock({"a": 1})
    '''
    assert _value(tmp_path, source).tree.open == "runner.__dict__.update(**...) at test_m.py:3"
    assert _value(tmp_path, source, "other").tree.open == "other.configure_mock(...) at test_m.py:5"


def test_simplenamespace_type_and_magicmock_values(tmp_path: Path) -> None:
    source = '''
        from unittest import mock


        class SpecModelRunner:
            device = "cuda"

            def forward(self):
                pass


        def test_it(cfg):
            ns = SimpleNamespace(device="cuda", model_config=SimpleNamespace(context_len=8), **cfg)
            made = type("Runner", (object,), {"device": "cuda", "pool": SimpleNamespace(size=1)})()
            spread = type("R", (), {**cfg, "x": 1})
            computed = type(name, (SpecModelRunner,), {key: 1})
            not_dict = type("R", (Unknown,), cfg)
            bare = MagicMock()
            specced = mock.MagicMock(spec=SpecModelRunner, device="cpu", name="m")
            positional = create_autospec(SpecModelRunner)
            real = MagicMock(spec_set=ModelRunner)
            unknown = Mock(spec=NotScanned)
            of_instance = MagicMock(spec=SimpleNamespace(page_size=1))
    '''
    def shape(name: str) -> tuple[str, str, str, str, list[str], list[str], str]:
        return _shape(_value(tmp_path, source, name))

    assert shape("ns") == ("SimpleNamespace", "SimpleNamespace", "test_m.py:12", "ns", [],
                           ["device", "model_config", "model_config.context_len"], "SimpleNamespace(**cfg) at test_m.py:12")
    assert shape("made") == ("type()", 'type("Runner", ...)()', "test_m.py:13", "made", [],
                             ["device", "pool", "pool.size"], "")
    assert shape("spread")[1:] == ('type("R", ...)()', "test_m.py:14", "spread", [], ["x"],
                                   "type(..., {**cfg}) at test_m.py:14")
    assert shape("computed")[1:] == ('type("?", ...)()', "test_m.py:15", "computed", [], ["device", "forward.*"],
                                     "type(...) with a computed key at test_m.py:15")
    assert shape("not_dict")[-1] == "type(...) base Unknown is not in the scanned paths"
    assert shape("bare") == ("MagicMock", "MagicMock()", "test_m.py:17", "bare", [], [],
                             "MagicMock() without spec provides every attribute")
    assert shape("specced") == ("MagicMock(spec=SpecModelRunner)", "MagicMock(spec=SpecModelRunner)", "test_m.py:18",
                                "specced", [], ["device", "forward.*"], "")
    assert shape("positional")[:2] == ("create_autospec(spec=SpecModelRunner)", "create_autospec(spec=SpecModelRunner)")
    assert shape("positional")[5] == ["device.*", "forward.*"]
    assert shape("real")[5] == ["forward.*"]  # the real ModelRunner's class-level names
    assert shape("unknown")[5:] == ([], "spec=NotScanned is not a class the audit can see")
    assert shape("of_instance")[5:] == (["page_size.*"], "")


def test_names_fixtures_self_members_and_module_level_runners(tmp_path: Path) -> None:
    source = '''
        import pytest

        SHARED = SimpleNamespace(page_size=1)


        @pytest.fixture(name="named_runner")
        def make_runner():
            return SimpleNamespace(device="cuda")


        @pytest.fixture
        def yielded():
            yield SimpleNamespace(device="xpu")


        def test_it(named_runner, yielded, absent):
            with build() as ctx:
                pass
            typed: object = SimpleNamespace(a=1)
            runner = SHARED


        class TestC:
            def setUp(self):
                self.runner = SimpleNamespace(device="cuda")
                self.runner.page_size = 1

            def test_it(self):
                pass
    '''
    assert _shape(_value(tmp_path, source, "named_runner"))[1:4] == ("SimpleNamespace", "test_m.py:8", "named_runner")
    assert _value(tmp_path, source, "yielded").tree.children["device"].value == "xpu"
    assert _shape(_value(tmp_path, source, "absent")) == ("opaque", "", "test_m.py:1", "", [], [],
                                                          "absent is not a literal mock")
    assert _value(tmp_path, source, "ctx").tree.open == "build(...) is not a literal mock"
    assert _value(tmp_path, source, "typed").tree.names() == ["a"]
    # a module-level runner keeps the name it was built under
    assert _shape(_value(tmp_path, source, "runner"))[1:5] == ("SimpleNamespace", "test_m.py:3", "SHARED", [])
    member = _value(tmp_path, source, "self.runner", owner="TestC")
    assert _shape(member) == ("SimpleNamespace", "SimpleNamespace", "test_m.py:25", "self.runner", ["page_size"],
                              ["device", "page_size"], "")
    assert _value(tmp_path, source, "self.other", owner="TestC").tree.open == "self.other is not assigned in its class"
    assert _value(tmp_path, source, "self.runner").tree.open == "self.runner is not a literal mock"  # no class
    assert _value(tmp_path, source, "a.b").tree.open == "a.b is not a literal mock"


def test_constants_and_expressions_that_are_no_mock(tmp_path: Path) -> None:
    source = "def test_it():\n    pass\n"
    for expression, kind in (("None", "constant"), ("3", "constant"), ("[1]", "constant"), ("{}", "constant"),
                             ("f'x'", "constant"), ("lambda: 1", "constant"), ("a + b", "constant"),
                             ("[x for x in y]", "constant"), ("a[0]", "opaque"), ("not a", "opaque")):
        assert _value(tmp_path, source, expression).kind == kind, expression
    assert _value(tmp_path, source, "a[0]").tree.open == "a[0] is not a literal mock"
    assert _value(tmp_path, source, "'cuda'").tree.value == "cuda"


def test_base_classes_merge_known_and_open_unknown_ones(tmp_path: Path) -> None:
    source = '''
        from sglang.srt.model_executor.model_runner import ModelRunner
        from elsewhere import Missing
        from unittest.mock import MagicMock


        class FromReal(ModelRunner):
            own = 1


        class FromMock(MagicMock):
            pass


        class FromMissing(Missing):
            pass


        class FromUnimported(Nowhere, object):
            pass


        class Loop(Loop):
            pass


        class Child(FromReal):
            pass


        def test_it():
            pass
    '''
    def tree(expression: str) -> tuple[list[str], str]:
        value = _value(tmp_path, source, expression)
        return value.tree.names(), value.tree.open

    assert tree("FromReal()") == (["forward.*", "model_config.*", "own", "page_size.*"], "")
    assert tree("Child()") == (["forward.*", "model_config.*", "own", "page_size.*"], "")
    assert tree("FromMock()")[1] == "class FromMock derives from MagicMock (no spec): every attribute exists"
    assert tree("FromMissing()")[1] == ("base class Missing (imported from elsewhere) is not in the scanned paths, so "
                                        "its attributes are unknown: add the file that defines it")
    assert tree("FromUnimported()")[1] == ("base class Nowhere is not in the scanned paths, so its attributes are "
                                           "unknown: add the file that defines it")
    assert tree("Loop()")[1] == "class Loop derives from itself"


def test_a_class_of_another_file_is_found_through_its_import(tmp_path: Path) -> None:
    source = '''
        from helpers.runners import SharedModelRunner as Shared


        def test_it():
            runner = Shared()
    '''
    value = _value(tmp_path, source, more={"runners.py": "class SharedModelRunner:\n    device = 'cuda'\n",
                                           "other.py": "class SharedModelRunner:\n    other = 1\n"})
    assert (value.label, value.site, value.tree.names()) == ("SharedModelRunner", "runners.py:1", ["device"])


def test_a_getattr_class_is_open(tmp_path: Path) -> None:
    source = "class G:\n    def __getattr__(self, name):\n        return 1\n\n\ndef test_it():\n    pass\n"
    assert _value(tmp_path, source, "G()").tree.open == "class G defines __getattr__ (test_m.py:2)"


def test_candidates_are_runner_classes_subclasses_and_runner_named_values(tmp_path: Path) -> None:
    files = _files(tmp_path, {"test_c.py": '''
        class MockModelRunner:
            pass


        class Derived(MockModelRunner):
            pass


        class ModelRunnerOutput:
            pass


        def make_runner():
            return SimpleNamespace(device="cuda")


        def make_other():
            return SimpleNamespace(device="cuda")


        def runner_class():
            return MockModelRunner


        def test_it():
            my_runner = SimpleNamespace(page_size=1)
            self_like.runner = SimpleNamespace(a=1)
            a.b.runner = SimpleNamespace(b=1)
            plain = SimpleNamespace(c=1)
            class_runner = MockModelRunner
    '''})
    found = candidates(SuiteIndex(files, RUNNER))
    assert [v.name for v in found][:2] == ["MockModelRunner", "Derived"]
    assert [(v.kind, v.label, v.site) for v in found] == [
        ("class", "MockModelRunner", "test_c.py:1"), ("class", "Derived", "test_c.py:5"),
        ("SimpleNamespace", "SimpleNamespace", "test_c.py:14"), ("SimpleNamespace", "SimpleNamespace", "test_c.py:26")]


@pytest.mark.parametrize(("data", "message"), [
    (b"\x7fELF\x00\x01", "is binary (it holds NUL bytes), not Python source"),
    (b"def f(:\n", "has a syntax error at line 1: invalid syntax"),
    (b"x = '\xe9'\n", "is not UTF-8 and declares no other encoding ("),
    (b"# -*- coding: no-such-codec -*-\nx = 1\n", "declares an encoding Python does not know ("),
    # a bad escape in valid UTF-8 is a syntax error of the source (was called "not UTF-8")
    (b"x = '\\N{NO SUCH NAME}'\n", "has a syntax error at line 1: (unicode error) 'unicodeescape' codec"),
    (b"# -*- coding: ascii -*-\nx = '\xe9'\n", "is not ascii, the encoding its coding cookie declares ("),
])
def test_what_cannot_be_parsed_says_why(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.py"
    path.write_bytes(data)
    with pytest.raises(UnparsableFile) as raised:
        parse_file(path, "bad.py")
    assert str(raised.value).startswith(message)
    with pytest.raises(UnparsableFile, match=r"^cannot be read \("):
        parse_file(tmp_path / "absent.py", "absent.py")


def test_a_latin1_cookie_is_honoured_and_imports_are_recorded(tmp_path: Path) -> None:
    path = tmp_path / "ok.py"
    path.write_bytes(b"# -*- coding: latin-1 -*-\nfrom a.b import C as D, E\nfrom .. import F\nx = '\xe9'\n")
    file = parse_file(path, "ok.py")
    assert (file.display, file.imports, file.modules) == ("ok.py", {"D": "C", "E": "E", "F": "F"},
                                                          {"D": "a.b", "E": "a.b", "F": ".."})


def test_constants_and_opaque_values_are_no_mocks() -> None:
    assert [MockValue(kind, "", "t.py:1", AttrTree()).is_mock for kind in ("constant", "opaque", "class", "MagicMock")] == [
        False, False, True, True]


def test_a_fixture_of_the_tests_own_file_wins_over_a_conftest_one(tmp_path: Path) -> None:
    files = _files(tmp_path, {
        "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef runner():\n    return SimpleNamespace(from_conftest=1)\n",
        "test_own.py": "import pytest\n\n\n@pytest.fixture\ndef runner():\n    return SimpleNamespace(own=1)\n\n\n"
                       "def test_it(runner):\n    pass\n"})
    index = SuiteIndex(files, RUNNER)
    node, cls = next((n, c) for n, c in file_functions(files[1]) if n.name == "test_it")
    value = index.value(ast.parse("runner", mode="eval").body, Scope(files[1], node, cls))
    assert value.tree.names() == ["own"]


def test_twelve_indirections_are_followed_and_a_thirteenth_is_too_many(tmp_path: Path) -> None:
    chain = "\n".join(f"    r{n} = r{n - 1}" for n in range(1, 13))
    source = f"def test_it():\n    r0 = SimpleNamespace(a=1)\n{chain}\n"
    assert _value(tmp_path, source, "r10").tree.names() == ["a"]
    assert _value(tmp_path, source, "r11").tree.names() == ["a.*"]  # its keyword's value is one step too deep
    too_deep = _value(tmp_path, source, "r12")
    assert (too_deep.kind, too_deep.label, too_deep.tree.open) == ("opaque", "", "too many indirections")


def test_labels_and_kinds_of_values_that_are_no_mock(tmp_path: Path) -> None:
    source = "def test_it(cfg):\n    pass\n"
    assert [(v.kind, v.label) for v in (_value(tmp_path, source, e) for e in ("a[0]", "3", "build()"))] == [
        ("opaque", ""), ("constant", ""), ("opaque", "")]
    assert _value(tmp_path, source, "build()").tree.open == "build(...) is not a literal mock"
    assert _value(tmp_path, source, "type('R', (), cfg)()").tree.open == (
        "type(...) with a namespace that is not a dict literal at test_m.py:1")


def test_bases_plain_sglang_and_class_level_values(tmp_path: Path) -> None:
    source = '''
        from sglang.srt.model_executor.model_runner import ModelRunner
        from sglang.srt.other import OtherBase

        SHARED = SimpleNamespace(a=1)


        class Plain(object):
            x = 1


        class FromOther(OtherBase):
            pass


        class Real(ModelRunner):
            config = SHARED

            class Inner:
                y = 1

                def __init__(self):
                    self.only_on_instances = 1


        def test_it():
            pass
    '''
    assert _value(tmp_path, source, "Plain()").tree.open == ""
    assert _value(tmp_path, source, "FromOther()").tree.open == (
        "base class OtherBase (imported from sglang.srt.other) is not in the scanned paths, so its attributes are "
        "unknown: add the file that defines it")
    real = _value(tmp_path, source, "Real()").tree
    assert "config.a" in real.names() and "Inner.y" in real.names() and "Inner.only_on_instances" not in real.names()
    assert (real.children["page_size"].open, real.sites["page_size"]) == ("the real ModelRunner's", "sglang ModelRunner")


def test_a_specd_mocks_children_and_a_spec_that_is_open(tmp_path: Path) -> None:
    source = '''
        class SpecModelRunner:
            device = "cuda"


        def test_it(cfg):
            specced = MagicMock(spec=SpecModelRunner)
            open_spec = MagicMock(spec=SimpleNamespace(a=1, **cfg))
    '''
    specced = _value(tmp_path, source, "specced").tree
    assert (specced.children["device"].open, specced.sites["device"]) == (
        "a spec'd MagicMock's attributes are MagicMocks", "spec=SpecModelRunner")
    assert _value(tmp_path, source, "open_spec").tree.open == (
        "spec=SimpleNamespace(a=1, **cfg) is not a class the audit can see")


def test_fixtures_of_the_same_file_and_class_and_of_a_conftest(tmp_path: Path) -> None:
    files = _files(tmp_path, {
        "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef runner():\n    return SimpleNamespace(from_conftest=1)\n\n\n"
                       "@pytest.fixture\ndef only_here():\n    return SimpleNamespace(shared=1)\n",
        "test_own.py": "import pytest\n\n\n@pytest.fixture\ndef runner():\n    return SimpleNamespace(own=1)\n\n\n"
                       "class TestX:\n    attribute = 1\n\n    @pytest.fixture\n    def in_class(self):\n"
                       "        return SimpleNamespace(in_class=1)\n\n    def setUp(self):\n"
                       "        self.member = SimpleNamespace(member=1)\n\n    def test_it(self, runner, only_here, in_class):\n"
                       "        pass\n"})
    index = SuiteIndex(files, RUNNER)
    node, cls = next((n, c) for n, c in file_functions(files[1]) if n.name == "test_it")
    scope = Scope(files[1], node, cls)

    def names(expression: str) -> list[str]:
        return index.value(ast.parse(expression, mode="eval").body, scope).tree.names()

    assert [names(e) for e in ("runner", "only_here", "in_class", "self.member")] == [
        ["own"], ["shared"], ["in_class"], ["member"]]
