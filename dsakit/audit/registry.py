"""SGLang's attention registry as the audit sees it: registry key -> the backends it builds, per device.

Owns the static reading of `srt/layers/attention/attention_registry.py` (`@register_attention_backend`
factories, the helpers they call, `cls = A if ... else B` choices) and of the multi-step factories,
and the per-device choice among them (`guard_eval`). Never imports the scanned tree, torch or SGLang.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.audit.guard_eval import verdict
from dsakit.gates.device_model import DeviceModel
from dsakit.stack.sglang_release import SGLangRelease

REGISTRY_FILE = "srt/layers/attention/attention_registry.py"
_FOLLOW_UNDER = "sglang.srt.layers.attention."
_MAX_DEPTH = 4

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Choice:
    """One backend class a factory builds (`qualname` defined in `file`, below `sglang/`), and when."""

    qualname: str
    file: str
    guard: str  # "" = always (on every device, in the default configuration)


@dataclass
class _Module:
    tree: ast.Module
    functions: dict[str, _FunctionNode]
    classes: set[str]
    imports: dict[str, str]  # local name -> "sglang.x.y.Name"


def _parse(path: Path) -> _Module | None:
    tree = sglang_source.tree(path)
    if tree is None:
        return None
    functions: dict[str, _FunctionNode] = {}
    classes: set[str] = set()
    imports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            functions[node.name] = node
        elif isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imports.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return _Module(tree, functions, classes, imports)


def _and(guards: tuple[str, ...]) -> str:
    values = [ast.parse(g, mode="eval").body for g in dict.fromkeys(guards)]
    if not values:
        return ""
    return ast.unparse(values[0] if len(values) == 1 else ast.BoolOp(op=ast.And(), values=values))


def _negate(test: ast.expr) -> str:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.unparse(test.operand)
    return ast.unparse(ast.UnaryOp(op=ast.Not(), operand=test))


class _Reader:
    """Walks factory functions: the classes they construct (and under which guards)."""

    def __init__(self, release: SGLangRelease) -> None:
        self.release = release
        self.modules: dict[str, _Module | None] = {}

    def module(self, relative: str) -> _Module | None:
        if relative not in self.modules:
            self.modules[relative] = _parse(self.release.file(relative))
        return self.modules[relative]

    def file_of(self, dotted: str) -> str | None:
        """`sglang.srt.layers.attention.x` -> "srt/layers/attention/x.py" (attention/ only, when it exists)."""
        if not dotted.startswith(_FOLLOW_UNDER):
            return None
        relative = "/".join(dotted.split(".")[1:]) + ".py"
        return relative if self.release.file(relative).is_file() else None

    def choices(self, relative: str, function: _FunctionNode, guards: tuple[str, ...], depth: int) -> list[Choice]:
        module = self.module(relative)
        if module is None or depth > _MAX_DEPTH:
            return []
        local = dict(module.imports)
        for node in ast.walk(function):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                local.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        found: list[Choice] = []
        bound: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}  # `cls = A`: name -> classes

        def target(name: str) -> tuple[str, str, bool] | None:
            """(qualname, file, is a class) of a name that denotes a function or class. An imported
            name is a class when it is spelled like one (the backends' modules are not parsed for it)."""
            if name in module.functions or name in module.classes:
                return name, relative, name in module.classes
            dotted = local.get(name)
            owner = self.file_of(dotted.rpartition(".")[0]) if dotted else None
            if dotted is None or owner is None:
                return None
            qualname = dotted.rpartition(".")[2]
            return qualname, owner, qualname[:1].isupper()

        def called(name: str, here: tuple[str, ...]) -> None:
            if name in bound:
                found.extend(Choice(q, f, _and(g + here)) for q, f, g in bound[name])
                return
            resolved = target(name)
            if resolved is None:
                return
            qualname, file, is_class = resolved
            if is_class:
                found.append(Choice(qualname, file, _and(here)))
                return
            owner = self.module(file)
            if owner is not None and qualname in owner.functions:
                found.extend(self.choices(file, owner.functions[qualname], here, depth + 1))

        def visit(body: list[ast.stmt], here: tuple[str, ...]) -> None:
            for statement in body:
                if isinstance(statement, ast.If):
                    visit(statement.body, here + (ast.unparse(statement.test),))
                    visit(statement.orelse, here + (_negate(statement.test),))
                    continue
                if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                if (isinstance(statement, ast.Assign) and len(statement.targets) == 1
                        and isinstance(statement.targets[0], ast.Name)):
                    for value, extra in _alternatives(statement.value):
                        resolved = target(value) if value else None
                        if resolved is not None and resolved[2]:
                            bound.setdefault(statement.targets[0].id, []).append(
                                (resolved[0], resolved[1], here + extra))
                for node in ast.walk(statement):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                        called(node.func.id, here)

        visit(function.body, guards)
        return found


def _alternatives(value: ast.expr) -> list[tuple[str, tuple[str, ...]]]:
    """`A` -> [("A", ())]; `A if c else B` -> [("A", (c,)), ("B", (not c,))]."""
    if isinstance(value, ast.Name):
        return [(value.id, ())]
    if isinstance(value, ast.IfExp):
        test = ast.unparse(value.test)
        return ([(n, (test, *g)) for n, g in _alternatives(value.body)]
                + [(n, (_negate(value.test), *g)) for n, g in _alternatives(value.orelse)])
    return []


def _registered_key(function: _FunctionNode) -> str | None:
    for decorator in function.decorator_list:
        if (isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "register_attention_backend"
                and decorator.args and isinstance(decorator.args[0], ast.Constant)):
            return str(decorator.args[0].value)
    return None


@functools.lru_cache(maxsize=8)
def registry(release: SGLangRelease) -> dict[str, tuple[Choice, ...]]:
    """Every registry key of `release` -> the backend classes its factory builds, each with its guard."""
    reader = _Reader(release)
    module = reader.module(REGISTRY_FILE)
    if module is None:
        return {}
    table: dict[str, tuple[Choice, ...]] = {}
    for function in module.functions.values():
        key = _registered_key(function)
        if key is not None:
            table[key] = tuple(dict.fromkeys(reader.choices(REGISTRY_FILE, function, (), 0)))
    return table


@functools.lru_cache(maxsize=32)
def factory_choices(release: SGLangRelease, file: str, name: str) -> tuple[Choice, ...]:
    """The classes a module-level factory function (`create_deepseek_v4_multistep_backend`) builds."""
    reader = _Reader(release)
    module = reader.module(file)
    if module is None or name not in module.functions:
        return ()
    return tuple(dict.fromkeys(reader.choices(file, module.functions[name], (), 0)))


def chosen_on(choices: tuple[Choice, ...], key: str, device: DeviceModel) -> list[Choice]:
    """The choices built on `device` in the default configuration."""
    return [c for c in choices if verdict(c.guard, key, device).fires]
