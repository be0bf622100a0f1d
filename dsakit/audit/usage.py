"""Which backend each mock runner is used with, from the calls that hand it one.

Owns the table of backend entry points (`DeepseekSparseAttnBackend(runner)`,
`DeepseekV4AttnBackend(runner)`, `DSATopKBackend.resolve(runner)`, the multi-step wrappers) and
the same-file data flow from a call's runner argument to a `MockValue` (locals, fixtures,
helpers that return the mock, `self.x` set in setUp). Never imports the scanned tree or SGLang.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from dsakit.audit.mock_finder import MockValue, Scope, SuiteIndex, _functions, _own_nodes
from dsakit.sglang_release import DEEPSEEK_V4_BACKEND_FILE, DSA_BACKEND_FILE, DSA_TOPK_BACKEND_FILE


@dataclass(frozen=True)
class Backend:
    """A callable a suite hands a runner to, and where SGLang defines it (file below `sglang/`)."""

    name: str
    file: str
    qualname: str

    @property
    def call(self) -> tuple[str, ...]:
        """The callee spelling: ("DeepseekSparseAttnBackend",) or ("DSATopKBackend", "resolve")."""
        return tuple(self.name.split("."))


BACKENDS: tuple[Backend, ...] = (
    Backend("DeepseekSparseAttnBackend", DSA_BACKEND_FILE, "DeepseekSparseAttnBackend"),
    Backend("DeepseekSparseAttnMultiStepBackend", DSA_BACKEND_FILE, "DeepseekSparseAttnMultiStepBackend"),
    Backend("DeepseekV4AttnBackend", DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4AttnBackend"),
    Backend("DeepseekV4MultiStepBackend", DEEPSEEK_V4_BACKEND_FILE, "DeepseekV4MultiStepBackend"),
    Backend("DSATopKBackend.resolve", DSA_TOPK_BACKEND_FILE, "DSATopKBackend.resolve"),
)
ASSUMED = ("DeepseekSparseAttnBackend", "DeepseekV4AttnBackend")
"""What a mock whose use the audit cannot trace is checked against (every backend it constructs)."""

_BY_CALL = {backend.call: backend for backend in BACKENDS}

DSAKIT_FIXTURES = frozenset({"model_runner", "target_runner", "draft_runner"})
"""dsakit's own strict-mock fixtures: built from the contract, so there is nothing to audit."""


@dataclass(frozen=True)
class BackendCall:
    """One call handing a runner to a backend: where, which backend, the argument as written."""

    backend: Backend
    site: str
    argument: str


@dataclass
class Usage:
    """The mocks reached from backend calls, and the calls whose runner the audit could not trace."""

    used: dict[tuple[str, str], tuple[MockValue, list[BackendCall]]] = field(default_factory=dict)
    untraced: list[BackendCall] = field(default_factory=list)
    strict: list[BackendCall] = field(default_factory=list)  # handed dsakit's strict MockModelRunner


def _backend_of(call: ast.Call, scope: Scope) -> Backend | None:
    func = call.func
    if isinstance(func, ast.Name):
        return _BY_CALL.get((scope.file.imports.get(func.id, func.id),))
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name):
            owner = scope.file.imports.get(func.value.id, func.value.id)
            backend = _BY_CALL.get((owner, func.attr))
            if backend is not None:
                return backend
        return _BY_CALL.get((func.attr,))  # module.DeepseekSparseAttnBackend(...)
    return None


def _runner_argument(call: ast.Call) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == "model_runner":
            return keyword.value
    return call.args[0] if call.args and not isinstance(call.args[0], ast.Starred) else None


def find_usage(index: SuiteIndex) -> Usage:
    """Every backend call in the scanned files, with the mock its runner argument denotes."""
    usage = Usage()
    for file in index.files:
        scopes = [Scope(file, function, cls) for function, cls in _functions(file)]
        nested = [Scope(file, node, s.cls) for s in scopes for node in _own_nodes_deep(s)]
        for scope in [*scopes, *nested]:
            assert scope.function is not None
            for node in _own_nodes(scope.function):
                if not isinstance(node, ast.Call):
                    continue
                backend = _backend_of(node, scope)
                argument = _runner_argument(node) if backend is not None else None
                if backend is None or argument is None:
                    continue
                call = BackendCall(backend, f"{file.display}:{node.lineno}", ast.unparse(argument))
                value = index.value(argument, scope)
                if not value.is_mock:
                    strict = (isinstance(argument, ast.Name) and argument.id in DSAKIT_FIXTURES
                              and index.find_fixture(argument.id, scope) is None)
                    (usage.strict if strict else usage.untraced).append(call)
                    continue
                entry = usage.used.setdefault(value.key, (value, []))
                entry[1].append(call)
    return usage


def _own_nodes_deep(scope: Scope) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions nested in a function (a test's local helper), which the flat walk skips."""
    assert scope.function is not None
    return [n for n in ast.walk(scope.function)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not scope.function]
