"""Which backend each mock runner is used with, from the calls that hand it one.

Owns the table of backend entry points (`DeepseekSparseAttnBackend(runner)`,
`DeepseekV4AttnBackend(runner)`, `DSATopKBackend.resolve(runner)`, the multi-step wrappers, SGLang's
registry `ATTENTION_BACKENDS[key](runner)` / `get_attention_backend(...)`, a downstream backend of
`--backend-src`), the context of each call (expected to raise, errors turned into skips) and the
same-file data flow from a call's runner argument to a `MockValue`. Never imports the scanned tree
or SGLang.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from dsakit.audit.suite_files import Scope, SourceFile, file_functions, own_nodes
from dsakit.audit.mock_finder import MockKey, MockValue, SuiteIndex
from dsakit.audit.registry import Choice, factory_choices, registry
from dsakit.stack.sglang_release import (
    DEEPSEEK_V4_BACKEND_FILE,
    DSA_BACKEND_FILE,
    DSA_TOPK_BACKEND_FILE,
    HIP_RADIX_FILE,
    SGLangRelease,
)


@dataclass(frozen=True)
class Backend:
    """A callable a suite hands a runner to, and where it is defined.

    file  below `sglang/` for SGLang's backends; the scanned path itself for a `--backend-src` one
    own   a downstream backend (`--backend-src`), not SGLang's
    """

    name: str
    file: str
    qualname: str
    own: bool = False

    @property
    def call(self) -> tuple[str, ...]:
        """The callee spelling: ("DeepseekSparseAttnBackend",) or ("DSATopKBackend", "resolve")."""
        return tuple(self.name.split("."))

    def flow_file(self, release: SGLangRelease) -> str:
        """The file key `backend_reads.RunnerFlow` uses for this backend's reads."""
        return self.file if self.own else f"{release.package_dir.name}/{self.file}"


BACKENDS: tuple[Backend, ...] = (
    Backend("DeepseekSparseAttnBackend", DSA_BACKEND_FILE, "DeepseekSparseAttnBackend"),
    Backend("DeepseekSparseAttnMultiStepBackend", DSA_BACKEND_FILE, "DeepseekSparseAttnMultiStepBackend"),
    Backend("DeepseekV4AttnBackend", DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4AttnBackend"),
    Backend("DeepseekV4MultiStepBackend", DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4MultiStepBackend"),
    Backend("DeepseekV4HipRadixBackend", HIP_RADIX_FILE, "DeepseekV4HipRadixBackend"),
    Backend("DSATopKBackend.resolve", DSA_TOPK_BACKEND_FILE, "DSATopKBackend.resolve"),
)
_BY_SOURCE = {(b.file, b.qualname): b for b in BACKENDS}

REGISTRY_NAMES = frozenset({"ATTENTION_BACKENDS"})
"""SGLang's registry dict: `ATTENTION_BACKENDS[key](runner)`."""
KEYLESS_FACTORIES = frozenset({"get_attention_backend", "_get_attention_backend"})
"""Registry entry points whose key is the runner's configured backend (never a literal at the call)."""
FACTORIES = {"create_deepseek_v4_multistep_backend": "srt/layers/attention/deepseek_v4_trtllm_backend.py",
             "create_deepseek_v4_attn_backend": "srt/layers/attention/deepseek_v4_trtllm_backend.py"}

# A registry key the audit cannot read (a variable) is taken from what the calling file imports:
# DSA / NSA names -> "dsa", DeepSeek-V4 names -> "dsv4"; a file importing neither is not a DSA suite.
_DSA_WORDS = re.compile(r"(^|[._])(dsa|nsa)([._]|$)|^(DSA|NSA|DeepseekSparse)")
_DSV4_WORDS = re.compile(r"(^|[._])(deepseek_v4|dsv4)|^(DSV4|DeepseekV4|DeepSeekV4)")

DSAKIT_FIXTURES = frozenset({"model_runner", "target_runner", "draft_runner"})
"""dsakit's own strict-mock fixtures: built from the contract, so there is nothing to audit."""

_RAISES = re.compile(r"^(assertRaises\w*|raises)$")
_SKIPS = frozenset({"skipTest", "skip", "SkipTest"})
_BROAD = frozenset({"AttributeError", "Exception", "BaseException"})


@dataclass(frozen=True)
class Route:
    """One backend a call can build, and the guard under which it does ("" = always)."""

    backend: Backend
    guard: str = ""


@dataclass(frozen=True)
class BackendCall:
    """One call handing a runner to a backend: where, through what, the argument as written.

    via       "" for a direct call; `ATTENTION_BACKENDS['dsv4']` and the like for a registry call
    routes    the backends it builds (one for a direct call; per-device choices for a registry key)
    expected  where the call sits in `assertRaises*` / `pytest.raises` ("" otherwise)
    skipped   where an `except` turns its AttributeError into a skip ("" otherwise)
    """

    via: str
    routes: tuple[Route, ...]
    site: str
    argument: str
    scope: Scope
    expected: str = ""
    skipped: str = ""

    @property
    def name(self) -> str:
        names = ", ".join(dict.fromkeys(r.backend.name for r in self.routes))
        return f"{self.via} -> {names}" if self.via else names

    @property
    def reaches_backend(self) -> bool:
        return bool(self.routes)

    def as_dict(self) -> dict[str, object]:
        return {"backend": self.name, "site": self.site, "argument": self.argument,
                "expected_to_raise": self.expected or None, "errors_become_skips": self.skipped or None}


@dataclass
class Usage:
    """The mocks reached from backend calls, and the calls whose runner the audit could not trace."""

    used: dict[MockKey, tuple[MockValue, list[BackendCall]]] = field(default_factory=dict)
    untraced: list[BackendCall] = field(default_factory=list)
    strict: list[BackendCall] = field(default_factory=list)  # handed dsakit's strict MockModelRunner
    not_dsa: list[BackendCall] = field(default_factory=list)  # reach no DSA / DSv4 backend


def evidence_keys(file: SourceFile) -> tuple[str, ...]:
    """Registry keys a file's own imports point at ("dsa", "dsv4"), for a key the audit cannot read."""
    words = [part for name, module in file.modules.items() for part in (name, file.imports.get(name, ""),
                                                                         *module.split("."))]
    keys = []
    if any(_DSA_WORDS.search(w) for w in words):
        keys.append("dsa")
    if any(_DSV4_WORDS.search(w) for w in words):
        keys.append("dsv4")
    return tuple(keys)


class Routes:
    """Resolves a call's callee to the backends it builds, for one release and backend table."""

    def __init__(self, release: SGLangRelease, own: tuple[Backend, ...] = ()) -> None:
        self.release = release
        self.backends = (*BACKENDS, *own)
        self.by_call = {b.call: b for b in self.backends}
        self.registry = registry(release)

    def from_choices(self, choices: tuple[Choice, ...], guard: str = "") -> tuple[Route, ...]:
        routes = []
        for choice in choices:
            backend = _BY_SOURCE.get((choice.file, choice.qualname))
            if backend is not None:
                both = " and ".join(f"({g})" for g in (guard, choice.guard) if g)
                routes.append(Route(backend, ast.unparse(ast.parse(both, mode="eval")) if both else ""))
        return tuple(routes)

    def keys(self, key: ast.expr, scope: Scope) -> tuple[tuple[str, ...], bool]:
        """Registry keys a subscript denotes, and whether they were read (False: taken from imports)."""
        literal = _literal(key, scope)
        if literal is not None:
            return (literal,), True
        return evidence_keys(scope.file), False

    def of(self, call: ast.Call, scope: Scope) -> tuple[str, tuple[Route, ...]] | None:
        """(via, routes) of a call that hands a runner to something; None when it is no backend call."""
        func = call.func
        if isinstance(func, ast.Subscript) and _name(func.value, scope) in REGISTRY_NAMES:
            keys, read = self.keys(func.slice, scope)
            via = f"ATTENTION_BACKENDS[{ast.unparse(func.slice)}]"
            if not read:
                via += f" (key not a literal; taken as {' / '.join(repr(k) for k in keys) or 'no DSA key'} " \
                       "from the file's imports)"
            return via, tuple(r for k in keys for r in self.from_choices(self.registry.get(k, ())))
        name = _name(func, scope)
        if name in KEYLESS_FACTORIES:
            keys = evidence_keys(scope.file)
            via = f"{name} (key from the runner's server args; taken as " \
                  f"{' / '.join(repr(k) for k in keys) or 'no DSA key'} from the file's imports)"
            return via, tuple(r for k in keys for r in self.from_choices(self.registry.get(k, ())))
        if name in FACTORIES:
            return name, self.from_choices(factory_choices(self.release, FACTORIES[name], name))
        backend = self._direct(func, scope)
        return ("", (Route(backend),)) if backend is not None else None

    def _direct(self, func: ast.expr, scope: Scope) -> Backend | None:
        if isinstance(func, ast.Name):
            return self.by_call.get((scope.file.imports.get(func.id, func.id),))
        if isinstance(func, ast.Attribute):
            if isinstance(func.value, ast.Name):
                owner = scope.file.imports.get(func.value.id, func.value.id)
                backend = self.by_call.get((owner, func.attr))
                if backend is not None:
                    return backend
            return self.by_call.get((func.attr,))  # module.DeepseekSparseAttnBackend(...)
        return None


def _name(node: ast.expr, scope: Scope) -> str | None:
    if isinstance(node, ast.Name):
        return scope.file.imports.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _literal(node: ast.expr, scope: Scope) -> str | None:
    """A string key: a literal, or a local / module-level name bound once to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.Name):
        return None
    bodies = [scope.function] if scope.function is not None else []
    values = [n.value for body in bodies for n in own_nodes(body)
              if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)]
    values += [n.value for n in scope.file.tree.body
               if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == node.id for t in n.targets)]
    strings = {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    return strings.pop() if len(strings) == 1 and len(values) == 1 else None


def _runner_argument(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg in ("model_runner", "runner"):
            return keyword.value
    return call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None


def _site(file: SourceFile, node: ast.AST) -> str:
    return f"{file.display}:{getattr(node, 'lineno', 0)}"


def _skip_classes(file: SourceFile) -> set[str]:
    """Exception classes of `file` that stand for a skip: SkipTest subclasses, or a docstring saying so."""
    found = set()
    for node in ast.walk(file.tree):
        if isinstance(node, ast.ClassDef):
            doc = (ast.get_docstring(node) or "").lower()
            if any(_last(b) == "SkipTest" for b in node.bases) or ("skip" in doc and any(
                    (_last(b) or "").endswith(("Error", "Exception", "Unavailable")) for b in node.bases)):
                found.add(node.name)
    return found


def _skipping_handler(handler: ast.ExceptHandler, skips: set[str]) -> bool:
    """An `except` that catches AttributeError (or broader) and turns it into a skip."""
    if not _catches_attribute_error(handler):
        return False
    for node in (n for s in handler.body for n in ast.walk(s)):
        if isinstance(node, ast.Call) and _last(node.func) in _SKIPS:
            return True
        if isinstance(node, ast.Raise) and node.exc is not None:
            raised = _last(node.exc.func if isinstance(node.exc, ast.Call) else node.exc)
            if raised in _SKIPS or raised in skips:
                return True
    return False


def _contexts(file: SourceFile, function: ast.FunctionDef | ast.AsyncFunctionDef,
              cls: ast.ClassDef | None, skips: set[str]) -> tuple[dict[int, str], dict[int, str], str]:
    """Nodes of `function` inside `with assertRaises*(...)` / `pytest.raises`, and inside a `try` whose
    handler catches AttributeError (or broader) and skips: node id -> the site of that context. The
    third value: where a method of the same class calls this one inside such a `try` ("" if none)."""
    expected: dict[int, str] = {}
    skipped: dict[int, str] = {}
    for node in ast.walk(function):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and _RAISES.match(_last(call.func) or ""):
                    where = f"{ast.unparse(call.func)} at {_site(file, node)}"
                    for inner in node.body:
                        expected.update({id(n): where for n in ast.walk(inner)})
        elif isinstance(node, ast.Try):
            for handler in node.handlers:
                if _skipping_handler(handler, skips):
                    caught = ast.unparse(handler.type) if handler.type else "(bare)"
                    where = f"except {caught} at {_site(file, handler)}"
                    for inner in node.body:
                        skipped.update({id(n): where for n in ast.walk(inner)})
    wrapped = ""
    for method in (cls.body if cls is not None else []):
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or method is function:
            continue
        for node in ast.walk(method):
            if isinstance(node, ast.Try) and any(_skipping_handler(h, skips) for h in node.handlers):
                calls = [n for s in node.body for n in ast.walk(s) if isinstance(n, ast.Call)
                         and isinstance(n.func, ast.Attribute) and n.func.attr == function.name
                         and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
                if calls:
                    handler = next(h for h in node.handlers if _skipping_handler(h, skips))
                    caught = ast.unparse(handler.type) if handler.type else "(bare)"
                    wrapped = f"except {caught} at {_site(file, handler)} (around self.{function.name}())"
    return expected, skipped, wrapped


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(_last(n) in _BROAD for n in names)


def _last(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def find_usage(index: SuiteIndex, routes: Routes) -> Usage:
    """Every backend call in the scanned files, with the mock its runner argument denotes."""
    usage = Usage()
    for file in index.files:
        skips = _skip_classes(file)
        scopes = [Scope(file, function, cls) for function, cls in file_functions(file)]
        nested = [Scope(file, node, s.cls) for s in scopes for node in _own_nodes_deep(s)]
        for scope in [*scopes, *nested]:
            assert scope.function is not None
            contexts: tuple[dict[int, str], dict[int, str], str] | None = None
            for node in own_nodes(scope.function):
                if not isinstance(node, ast.Call):
                    continue
                found = routes.of(node, scope)
                argument = _runner_argument(node) if found is not None else None
                if found is None or argument is None:
                    continue
                if contexts is None:  # only functions that build a backend pay for the walk
                    contexts = _contexts(file, scope.function, scope.cls, skips)
                expected, skipped, wrapped = contexts
                via, reached = found
                call = BackendCall(via, reached, f"{file.display}:{node.lineno}", ast.unparse(argument), scope,
                                   expected.get(id(node), ""), skipped.get(id(node), wrapped))
                values = index.alternatives(argument, scope)  # `A() if flag else B()`: each is audited
                mocks = [value for value in values if value.is_mock]
                for value in mocks:
                    usage.used.setdefault(value.key, (value, []))[1].append(call)
                if not reached:
                    usage.not_dsa.append(call)
                elif not mocks:
                    strict = (isinstance(argument, ast.Name) and argument.id in DSAKIT_FIXTURES
                              and index.find_fixture(argument.id, scope) is None)
                    (usage.strict if strict else usage.untraced).append(call)
                elif any(value.kind == "opaque" for value in values):
                    usage.untraced.append(call)  # one branch is a mock, another one the audit cannot see
    return usage


def _own_nodes_deep(scope: Scope) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions nested in a function (a test's local helper), which the flat walk skips."""
    assert scope.function is not None
    return [n for n in ast.walk(scope.function)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not scope.function]
