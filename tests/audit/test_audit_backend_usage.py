"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/usage.py`, which call hands a
runner to which backend (direct calls, the registry, factories), the call's context (expected to
raise, errors turned into skips) and the registry key taken from a file's imports, called directly on
parsed suite files against the installed SGLang's registry."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from dsakit.audit.suite_files import Scope, SourceFile, file_functions, parse_file
from dsakit.audit.registry import Choice
from dsakit.audit.usage import (
    BACKENDS,
    BackendCall,
    Route,
    Routes,
    _catches_attribute_error,
    _contexts,
    _last,
    _literal,
    _runner_argument,
    _skip_classes,
    _skipping_handler,
    evidence_keys,
)
from dsakit.stack.sglang_release import DSA_BACKEND_FILE, SGLangRelease

DSA, MULTI, V4, V4_MULTI, HIP, TOPK = BACKENDS


def _file(tmp_path: Path, source: str, name: str = "test_u.py") -> SourceFile:
    path = tmp_path / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return parse_file(path, name)


def _scope(file: SourceFile, function: str) -> Scope:
    for node, cls in file_functions(file):
        if node.name == function:
            return Scope(file, node, cls)
    raise AssertionError(function)


def _calls(scope: Scope) -> list[ast.Call]:
    assert scope.function is not None
    return [n for n in ast.walk(scope.function) if isinstance(n, ast.Call)]


def test_registry_keys_from_a_files_imports(tmp_path: Path) -> None:
    assert evidence_keys(_file(tmp_path, "from sglang.srt.layers.attention.dsa_backend import X\n", "a.py")) == ("dsa",)
    assert evidence_keys(_file(tmp_path, "from sglang.srt.layers.attention.nsa.utils import X\n", "b.py")) == ("dsa",)
    assert evidence_keys(_file(tmp_path, "from m import DeepseekSparseAttnBackend as B\n", "c.py")) == ("dsa",)
    assert evidence_keys(_file(tmp_path, "from sglang.srt.layers.attention.deepseek_v4_backend import Y\n", "d.py")) == ("dsv4",)
    assert evidence_keys(_file(tmp_path, "from m import DSV4Thing as T, NSAIndexer\n", "e.py")) == ("dsa", "dsv4")
    assert evidence_keys(_file(tmp_path, "import dsa_backend\nfrom m.transformers import x\n", "f.py")) == ()
    # a module part spelled like a class counts on its own, not only inside the dotted name
    assert evidence_keys(_file(tmp_path, "from tests.DSAHelpers import build\n", "g.py")) == ("dsa",)
    assert evidence_keys(_file(tmp_path, "from tests.DeepseekV4Helpers import build\n", "h.py")) == ("dsv4",)


def test_routes_join_a_call_guard_and_a_choice_guard(installed_sglang: SGLangRelease) -> None:
    routes = Routes(installed_sglang)
    dsa = Choice("DeepseekSparseAttnBackend", DSA_BACKEND_FILE, "a or b")
    plain = Choice("DeepseekSparseAttnBackend", DSA_BACKEND_FILE, "")
    unknown = Choice("SomethingElse", DSA_BACKEND_FILE, "")
    assert [(r.backend.name, r.guard) for r in routes.from_choices((dsa, plain, unknown), "c")] == [
        ("DeepseekSparseAttnBackend", "c and (a or b)"), ("DeepseekSparseAttnBackend", "c")]
    assert [r.guard for r in routes.from_choices((dsa, plain))] == ["a or b", ""]


def test_a_registry_key_is_a_literal_or_a_name_bound_once_to_one(tmp_path: Path) -> None:
    file = _file(tmp_path, '''
        KEY = "dsv4"
        TWICE = "a"
        TWICE = "b"
        NUMBER = 3

        def test_it():
            local = "dsa"
            ATTENTION_BACKENDS["nsa"](r)
            ATTENTION_BACKENDS[local](r)
            ATTENTION_BACKENDS[KEY](r)
            ATTENTION_BACKENDS[TWICE](r)
            ATTENTION_BACKENDS[NUMBER](r)
            ATTENTION_BACKENDS[keys[0]](r)
            ATTENTION_BACKENDS[unbound](r)
    ''')
    scope = _scope(file, "test_it")
    keys = [c.func.slice for c in _calls(scope) if isinstance(c.func, ast.Subscript)]
    assert [_literal(k, scope) for k in keys] == ["nsa", "dsa", "dsv4", None, None, None, None]
    assert _literal(keys[2], Scope(file)) == "dsv4"  # module level, no function around
    assert _literal(keys[1], Scope(file)) is None


def test_each_kind_of_backend_call(tmp_path: Path, installed_sglang: SGLangRelease) -> None:
    file = _file(tmp_path, '''
        from sglang.srt.layers.attention import dsa_backend as dsa_module
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend as Dsa
        from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS as REG

        def test_it(key):
            REG["dsa"](runner)
            REG[key](runner)
            get_attention_backend(runner)
            create_deepseek_v4_multistep_backend(runner)
            Dsa(runner)
            dsa_module.DeepseekSparseAttnBackend(runner)
            DSATopKBackend.resolve(runner)
            something.else_entirely(runner)
            unknown(runner)
            (lambda r: r)(runner)
    ''')
    routes = Routes(installed_sglang)
    scope = _scope(file, "test_it")
    found = [routes.of(c, scope) for c in _calls(scope)]
    assert found[0] == ("ATTENTION_BACKENDS['dsa']", routes.from_choices(routes.registry["dsa"]))
    assert found[1] == ("ATTENTION_BACKENDS[key] (key not a literal; taken as 'dsa' from the file's imports)",
                        routes.from_choices(routes.registry["dsa"]))
    assert found[2] == ("get_attention_backend (key from the runner's server args; taken as 'dsa' from the "
                        "file's imports)", routes.from_choices(routes.registry["dsa"]))
    via, multistep = found[3] or ("", ())
    assert via == "create_deepseek_v4_multistep_backend" and V4_MULTI in [r.backend for r in multistep]
    assert found[4:7] == [("", (_route(routes, DSA),)), ("", (_route(routes, DSA),)), ("", (_route(routes, TOPK),))]
    assert found[7:] == [None, None, None]


def _route(routes: Routes, backend: object) -> object:
    return next(r for r in routes.from_choices((Choice(backend.qualname, backend.file, ""),)))  # type: ignore[attr-defined]


def test_a_key_without_evidence_builds_nothing(tmp_path: Path, installed_sglang: SGLangRelease) -> None:
    file = _file(tmp_path, "def test_it(key):\n    ATTENTION_BACKENDS[key](runner)\n    get_attention_backend(runner)\n")
    routes = Routes(installed_sglang)
    scope = _scope(file, "test_it")
    assert [routes.of(c, scope) for c in _calls(scope)] == [
        ("ATTENTION_BACKENDS[key] (key not a literal; taken as no DSA key from the file's imports)", ()),
        ("get_attention_backend (key from the runner's server args; taken as no DSA key from the file's imports)", ())]
    assert routes.keys(ast.parse("k", mode="eval").body, scope) == ((), False)
    assert routes.keys(ast.parse("'dsv4'", mode="eval").body, scope) == (("dsv4",), True)


def test_a_call_names_each_backend_it_builds_once(tmp_path: Path) -> None:
    file = _file(tmp_path, "x = 1\n")
    routes = (Route(DSA, "a"), Route(V4, "b"), Route(DSA, "c"))
    call = BackendCall("ATTENTION_BACKENDS['k']", routes, "t.py:3", "runner", Scope(file))
    assert call.name == "ATTENTION_BACKENDS['k'] -> DeepseekSparseAttnBackend, DeepseekV4AttnBackend"
    assert BackendCall("", routes[:2], "t.py:3", "r", Scope(file)).name == "DeepseekSparseAttnBackend, DeepseekV4AttnBackend"
    assert not BackendCall("", (), "t.py:3", "r", Scope(file)).reaches_backend


def test_the_runner_argument(tmp_path: Path) -> None:
    calls = [ast.parse(text, mode="eval").body for text in (
        "B(a, model_runner=r)", "B(a, runner=r)", "B(a, other=r)", "B(*args)", "B()", "B(x, y)")]
    assert [None if (a := _runner_argument(c)) is None else ast.unparse(a) for c in calls] == ["r", "r", "a", None, None, "x"]


def test_which_classes_and_handlers_stand_for_a_skip(tmp_path: Path) -> None:
    file = _file(tmp_path, '''
        import unittest
        class Skipped(unittest.SkipTest): pass
        class DocSkip(RuntimeError):
            """Raised to skip the test when the kernel is missing."""
        class DocUnavailable(Unavailable):
            """skip: no device"""
        class DocException(Exception):
            """Skip marker."""
        class NotASkip(RuntimeError):
            """Raised when the kernel fails."""
        class SkipWordOtherBase(Base):
            """skip"""
        class Bare:
            """skip"""
    ''')
    assert _skip_classes(file) == {"Skipped", "DocSkip", "DocUnavailable", "DocException"}
    handlers = [h for n in ast.walk(ast.parse(textwrap.dedent('''
        try: pass
        except AttributeError: self.skipTest("x")
        try: pass
        except (ValueError, Exception) as e: pytest.skip("x")
        try: pass
        except: raise unittest.SkipTest("x")
        try: pass
        except BaseException: raise Skipped
        try: pass
        except AttributeError: raise RuntimeError("x")
        try: pass
        except ValueError: self.skipTest("x")
        try: pass
        except AttributeError: raise
        try: pass
        except AttributeError: log(skip)
    '''))) if isinstance(n, ast.Try) for h in n.handlers]
    assert [_skipping_handler(h, {"Skipped"}) for h in handlers] == [True, True, True, True, False, False, False, False]
    assert [_catches_attribute_error(h) for h in handlers] == [True, True, True, True, True, False, True, True]
    assert _last(ast.parse("a.b.c", mode="eval").body) == "c" and _last(ast.parse("f()", mode="eval").body) is None


def test_the_context_of_a_call(tmp_path: Path) -> None:
    file = _file(tmp_path, '''
        import pytest
        class TestX:
            def test_raises(self):
                with pytest.raises(AttributeError):
                    build(runner)
                after(runner)
                with open("x"):
                    plain(runner)

            def test_skips(self):
                try:
                    build(runner)
                except AttributeError:
                    self.skipTest("old")
                except ValueError:
                    pass

            def helper(self):
                build(runner)

            def test_wrapper(self):
                try:
                    self.helper()
                except Exception:
                    raise unittest.SkipTest("x")

            def test_other(self):
                with self.assertRaisesRegex(AttributeError, "x"), open("y"):
                    build(runner)

            def test_bare(self):
                try:
                    build(runner)
                except:
                    pytest.skip("x")

            def test_retries_itself(self):
                try:
                    self.test_retries_itself()
                except AttributeError:
                    self.skipTest("x")
                build(runner)
    ''')
    def context(function: str) -> dict[str, tuple[str, str]]:
        scope = _scope(file, function)
        assert scope.function is not None
        expected, skipped, wrapped = _contexts(file, scope.function, scope.cls, set())
        return {ast.unparse(c): (expected.get(id(c), ""), skipped.get(id(c), wrapped)) for c in _calls(scope)
                if isinstance(c.func, ast.Name) and c.func.id in ("build", "after", "plain")}

    assert context("test_raises") == {"build(runner)": ("pytest.raises at test_u.py:5", ""),
                                      "after(runner)": ("", ""), "plain(runner)": ("", "")}
    assert context("test_skips") == {"build(runner)": ("", "except AttributeError at test_u.py:14")}
    assert context("helper") == {"build(runner)": ("", "except Exception at test_u.py:25 (around self.helper())")}
    assert context("test_other") == {"build(runner)": ("self.assertRaisesRegex at test_u.py:29", "")}
    assert context("test_bare") == {"build(runner)": ("", "except (bare) at test_u.py:35")}
    assert context("test_retries_itself") == {"build(runner)": ("", "")}  # its own call is no wrapper


@pytest.mark.parametrize("handler", ["except:", "except (AttributeError, KeyError):"])
def test_a_wrapper_names_how_it_catches(tmp_path: Path, handler: str) -> None:
    file = _file(tmp_path, f'''
        class TestY:
            def helper(self):
                build(runner)

            def test_wrapper(self):
                try:
                    self.helper()
                {handler}
                    self.skipTest("x")
    ''')
    scope = _scope(file, "helper")
    assert scope.function is not None
    caught = "(bare)" if handler == "except:" else "(AttributeError, KeyError)"
    assert _contexts(file, scope.function, scope.cls, set())[2] == f"except {caught} at test_u.py:9 (around self.helper())"


def test_a_key_from_imports_of_both_kinds_names_both(tmp_path: Path, installed_sglang: SGLangRelease) -> None:
    file = _file(tmp_path, '''
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend

        def test_it(key):
            ATTENTION_BACKENDS[key](runner)
            get_attention_backend(runner)
    ''')
    routes = Routes(installed_sglang)
    scope = _scope(file, "test_it")
    both = (*routes.from_choices(routes.registry["dsa"]), *routes.from_choices(routes.registry["dsv4"]))
    assert [routes.of(c, scope) for c in _calls(scope)] == [
        ("ATTENTION_BACKENDS[key] (key not a literal; taken as 'dsa' / 'dsv4' from the file's imports)", both),
        ("get_attention_backend (key from the runner's server args; taken as 'dsa' / 'dsv4' from the file's imports)",
         both)]


def test_every_call_of_a_function_is_looked_at(tmp_path: Path, installed_sglang: SGLangRelease) -> None:
    from dsakit.audit.mock_finder import RunnerAttributes, SuiteIndex
    from dsakit.audit.usage import find_usage

    file = _file(tmp_path, '''
        from types import SimpleNamespace
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

        def test_it(some_fixture):
            DeepseekSparseAttnBackend()
            ATTENTION_BACKENDS["torch_native"](SimpleNamespace(a=1))
            DeepseekSparseAttnBackend(some_fixture)
            DeepseekSparseAttnBackend(SimpleNamespace(b=2))
    ''')
    usage = find_usage(SuiteIndex([file], RunnerAttributes(frozenset(), frozenset())), Routes(installed_sglang))
    assert [c.site for c in usage.not_dsa] == ["test_u.py:8"]
    assert [c.site for c in usage.untraced] == ["test_u.py:9"]
    assert [[c.site for c in calls] for _, calls in usage.used.values()] == [["test_u.py:8"], ["test_u.py:10"]]
