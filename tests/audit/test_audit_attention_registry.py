"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/registry.py`, the static reading
of SGLang's attention registry. A small tree written here in the registry's shape (parsed, never
imported, as test_contract_check.py's mixin trees are) pins each rule; the installed SGLang's own
registry is read by test_audit_suites.py."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from dsakit.audit.registry import REGISTRY_FILE, Choice, _alternatives, _and, _negate, _parse, chosen_on, factory_choices, registry
from dsakit.gates.device_model import SIMULATED
from dsakit.stack.sglang_release import SGLangRelease

ATT = "srt/layers/attention/"

REGISTRY = '''
    from sglang.srt.layers.attention.a_backend import ABackend, BBackend
    from sglang.srt.layers.attention.helpers import make_v4, chain1, deep1, missing_helper
    from sglang.srt.layers.attention.broken import broken_helper
    from sglang.srt.layers.attention.no_such_file import Ghost
    from sglang.srt.utils import UtilBackend
    from .relative import RelBackend
    from os.path import join


    def register_attention_backend(name):
        return lambda f: f


    class LocalBackend:
        pass


    @register_attention_backend("plain")
    def create_plain(runner):
        return ABackend(runner)


    @register_attention_backend("choice")
    def create_choice(runner):
        if runner.use_mla:
            cls = ABackend if _is_hip else BBackend
        else:
            cls = BBackend
        x, y = ABackend, BBackend
        unknown_cls = not_a_name_it_knows
        function_cls = make_v4
        unknown_cls(runner)
        function_cls(runner)
        return cls(runner)


    @register_attention_backend("helper")
    def create_helper(runner):
        if not _is_npu:
            return make_v4(runner)
        return LocalBackend(runner)


    @register_attention_backend("inner_import")
    def create_inner(runner):
        from sglang.srt.layers.attention.c_backend import CBackend as C, make_c
        from .rel import Nope
        def nested():
            return BBackend(runner)
        class Nested:
            x = BBackend(runner)
        return C(runner)


    @register_attention_backend("nothing_known")
    def create_unknown(runner):
        Ghost(runner)
        UtilBackend(runner)
        RelBackend(runner)
        join(runner)
        missing_helper(runner)
        broken_helper(runner)
        lowercase_builder(runner)
        runner.factory(runner)
        return undefined_name(runner)


    @register_attention_backend("depth4")
    def create_depth4(runner):
        return chain1(runner)


    @register_attention_backend("depth5")
    def create_depth5(runner):
        return deep1(runner)


    @register_attention_backend("twice")
    def create_twice(runner):
        ABackend(runner)
        return ABackend(runner)


    @register_attention_backend(NAME)
    def create_by_variable(runner):
        return ABackend(runner)


    @other_decorator("other")
    def create_other(runner):
        return ABackend(runner)


    @register_attention_backend
    def create_bare(runner):
        return ABackend(runner)


    def not_registered(runner):
        return ABackend(runner)
'''

HELPERS = '''
    from sglang.srt.layers.attention.a_backend import ABackend


    def make_v4(runner):
        if _is_hip:
            return ABackend(runner)
        return Unknown(runner)


    def chain1(runner):
        return chain2(runner)


    def chain2(runner):
        return chain3(runner)


    def chain3(runner):
        return chain4(runner)


    def chain4(runner):
        return ABackend(runner)


    def deep1(runner):
        return deep2(runner)


    def deep2(runner):
        return deep3(runner)


    def deep3(runner):
        return deep4(runner)


    def deep4(runner):
        return deep5(runner)


    def deep5(runner):
        return ABackend(runner)
'''

FACTORY = '''
    from sglang.srt.layers.attention.a_backend import ABackend, BBackend
    from sglang.srt.layers.attention.helpers import chain1


    def create_deep(runner):
        return chain1(runner)


    def create_multistep(runner):
        if is_enabled():
            return ABackend(runner)
        else:
            return BBackend(runner)
'''


@pytest.fixture
def tree(tmp_path: Path) -> SGLangRelease:
    package = tmp_path / "sglang"
    for relative, text in ((REGISTRY_FILE, REGISTRY), (ATT + "helpers.py", HELPERS), (ATT + "factory.py", FACTORY),
                           (ATT + "a_backend.py", ""), (ATT + "c_backend.py", ""), ("srt/utils.py", ""),
                           (ATT + "broken.py", "def broken_helper(:\n")):
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(textwrap.dedent(text), encoding="utf-8")
    return SGLangRelease(package, "0.0.test")


def _a(guard: str = "") -> Choice:
    return Choice("ABackend", ATT + "a_backend.py", guard)


def _b(guard: str = "") -> Choice:
    return Choice("BBackend", ATT + "b_backend.py", guard)


def test_the_registry_keys_and_the_classes_each_builds(tree: SGLangRelease) -> None:
    assert registry(tree) == {
        "plain": (_a(),),
        "choice": (Choice("ABackend", ATT + "a_backend.py", "runner.use_mla and _is_hip"),
                   Choice("BBackend", ATT + "a_backend.py", "runner.use_mla and (not _is_hip)"),
                   Choice("BBackend", ATT + "a_backend.py", "not runner.use_mla")),
        # the statement after an `if` that returns keeps no negated guard (a known over-approximation)
        "helper": (_a("not _is_npu and _is_hip"), Choice("LocalBackend", REGISTRY_FILE, "")),
        "inner_import": (Choice("CBackend", ATT + "c_backend.py", ""),),
        "nothing_known": (),
        "depth4": (_a(),),
        "depth5": (),
        "twice": (_a(),),
    }


def test_a_factory_function_and_what_is_not_one(tree: SGLangRelease) -> None:
    assert factory_choices(tree, ATT + "factory.py", "create_multistep") == (
        _a("is_enabled()"), Choice("BBackend", ATT + "a_backend.py", "not is_enabled()"))
    assert factory_choices(tree, ATT + "factory.py", "create_deep") == (_a(),)  # four helpers deep: still read
    assert factory_choices(tree, ATT + "factory.py", "no_such_function") == ()
    assert factory_choices(tree, ATT + "no_such_file.py", "create_multistep") == ()


def test_a_tree_without_a_registry_has_no_keys(tmp_path: Path) -> None:
    assert registry(SGLangRelease(tmp_path / "sglang", "0.0.empty")) == {}


def test_parse_keeps_module_level_functions_classes_and_absolute_imports(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent('''
        import os
        from a.b import C, D as E
        from . import rel
        from .x import Y
        def f(): pass
        async def g(): pass
        class K:
            def method(self): pass
        if True:
            def hidden(): pass
    '''), encoding="utf-8")
    module = _parse(path)
    assert module is not None
    assert (sorted(module.functions), module.classes, module.imports) == (["f", "g"], {"K"}, {"C": "a.b.C", "E": "a.b.D"})
    assert _parse(tmp_path / "absent.py") is None


def test_guards_are_joined_once_each_and_negated_without_double_nots() -> None:
    assert _and(()) == "" and _and(("a",)) == "a"
    assert _and(("a", "b or c", "a")) == "a and (b or c)"
    assert _negate(ast.parse("not x", mode="eval").body) == "x"
    assert _negate(ast.parse("x and y", mode="eval").body) == "not (x and y)"
    assert _negate(ast.parse("-x", mode="eval").body) == "not -x"
    expression = ast.parse("A if c else (B if d else C)", mode="eval").body
    assert _alternatives(expression) == [("A", ("c",)), ("B", ("not c", "d")), ("C", ("not c", "not d"))]
    assert _alternatives(ast.parse("make()", mode="eval").body) == []


def test_chosen_on_keeps_the_choices_that_fire_on_a_device() -> None:
    choices = (Choice("Hip", "f.py", "_is_hip"), Choice("Cuda", "f.py", "not _is_hip"), Choice("Any", "f.py", ""))
    assert [c.qualname for c in chosen_on(choices, "gfx942", SIMULATED["gfx942"])] == ["Hip", "Any"]
    assert [c.qualname for c in chosen_on(choices, "sm90", SIMULATED["sm90"])] == ["Cuda", "Any"]
