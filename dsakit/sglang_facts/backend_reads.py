"""Where SGLang's or a downstream suite's backends read `model_runner.X` (AST only: nothing is
imported, no GPU needed).

Owns the reads (`RunnerRead`: path, site, guards, the calls followed), the runner's flow through
helpers (`RunnerFlow`) and the scans (`scan_runner_reads`, `scan_backend_reads`, `scan_runner_flow`).
What the ModelRunner itself sets is `runner_source`'s. Never imports torch or SGLang.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import DSA_BACKEND_FILE, RUNNER_READER_FILES, SGLangRelease
from dsakit.sglang_facts.runner_source import SourceSite, dotted_name, relative_file, self_targets


RUNNER_NAME = "model_runner"
"""The parameter / local name under which backends receive the runner."""

# Calls are followed into these folders only: the backends' own helpers. Config helpers
# (configs/model_config.py) take HF configs as dicts or objects and would make noise.
_FOLLOW_UNDER = ("srt/layers/attention/",)
_FOLLOW_DEPTH = 3

_HARDWARE_WORDS = re.compile(
    r"(^|_)(sm\d*|cuda|hip|npu|xpu|musa|gfx\d*|blackwell|hopper|capability|device_sm\w*)(_|$|\d)",
    re.IGNORECASE,
)
_ROLE_WORDS = re.compile(r"draft|spec|eagle|mtp|dspark", re.IGNORECASE)


def _guard_names(guard: str) -> list[str]:
    """Identifiers (names and attribute names) used by a guard expression."""
    try:
        tree = ast.parse(guard, mode="eval")
    except SyntaxError:
        return re.findall(r"[A-Za-z_]\w*", guard)
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            names.append(node.func.id)
    return names


@dataclass(frozen=True)
class RunnerRead:
    """One read of `model_runner.<path>` in SGLang source.

    path      dotted path below the runner, up to the first call or subscript
    site      where the read is
    function  qualified name of the enclosing function (``Class.method``)
    soft      a `getattr(..., default)` / `hasattr` read: a missing attribute is not an error
    guards    conditions (source text) of the enclosing `if`/`elif`/ternary/`and`/`or` that must
              hold for the read to run; earlier `if`/`elif` branches appear negated
    via       call sites through which a followed helper received the runner (outermost first)
    """

    path: str
    site: SourceSite
    function: str
    soft: bool = False
    guards: tuple[str, ...] = ()
    via: tuple[str, ...] = ()

    @property
    def guard(self) -> str:
        """All guards as one condition ("" when the read is unconditional)."""
        if not self.guards:
            return ""
        values: list[ast.expr] = []
        for text in self.guards:
            condition = ast.parse(text, mode="eval").body
            if isinstance(condition, ast.BoolOp) and isinstance(condition.op, ast.And):
                values.extend(condition.values)
            else:
                values.append(condition)
        return ast.unparse(values[0] if len(values) == 1 else ast.BoolOp(op=ast.And(), values=values))

    @property
    def conditional(self) -> bool:
        return bool(self.guards)

    @property
    def hardware_conditional(self) -> bool:
        """The guard mentions the device: SM version, capability, CUDA/HIP/NPU/XPU, an arch name."""
        return any(_HARDWARE_WORDS.search(name) for g in self.guards for name in _guard_names(g))

    @property
    def role_conditional(self) -> bool:
        """The guard mentions the worker role or speculative decoding (draft, spec, EAGLE, MTP)."""
        return any(_ROLE_WORDS.search(name) for g in self.guards for name in _guard_names(g))

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "site": str(self.site),
            "function": self.function,
            "soft": self.soft,
            "guard": self.guard,
            "hardware_conditional": self.hardware_conditional,
            "role_conditional": self.role_conditional,
            "via": list(self.via),
        }


def reader_files(release: SGLangRelease) -> list[Path]:
    """The files scanned directly: the DSA and DeepSeek-V4 backends and the dsa/ and nsa/ helpers."""
    return release.python_files(RUNNER_READER_FILES)


@dataclass
class _Module:
    path: Path
    relative: str
    tree: ast.Module
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]  # qualname -> node
    classes: dict[str, ast.ClassDef]
    imports: dict[str, str]  # local name -> "sglang.x.y.name" (module-level `from sglang... import`)


_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


class _Scanner:
    """Scans functions for runner reads; follows calls that hand runner values to backend helpers."""

    def __init__(self, release: SGLangRelease) -> None:
        self.release = release
        self.modules: dict[Path, _Module] = {}
        self.reads: list[RunnerRead] = []
        self.writes: list[RunnerWrite] = []
        self.followed: set[tuple[Path, str, tuple[tuple[str, str], ...]]] = set()
        self.direct: set[Path] = set()
        self.calls: set[RunnerCall] = set()
        self._self_aliases: dict[tuple[Path, str], dict[str, str]] = {}

    # ------------------------------------------------------------ modules

    def module(self, path: Path) -> _Module:
        """The parsed module of a scanned or followed file; UnparsableSource naming `file:line`
        when it does not parse: its reads cannot be seen, so no scan says OK without them."""
        if path in self.modules:
            return self.modules[path]
        tree = sglang_source.source(path).require(relative_file(self.release, path))
        functions: dict[str, _FunctionNode] = {}
        classes: dict[str, ast.ClassDef] = {}
        imports: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        functions[f"{node.name}.{item.name}"] = item
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        module = _Module(path, relative_file(self.release, path), tree, functions, classes, imports)
        self.modules[path] = module
        return module

    def _module_for(self, dotted_module: str) -> _Module | None:
        parts = dotted_module.split(".")
        if parts[0] != "sglang":
            return None
        relative = "/".join(parts[1:])
        if not any(relative.startswith(prefix) for prefix in _FOLLOW_UNDER):
            return None
        for candidate in (self.release.file(relative + ".py"), self.release.file(relative + "/__init__.py")):
            if candidate.is_file():
                return self.module(candidate)
        return None

    def self_aliases(self, module: _Module, class_name: str | None) -> dict[str, str]:
        """`self.X` names that the class's methods bind to the runner itself and nothing else
        (`self.runner = model_runner`, `self.mr = mr`), so `self.runner.x` reads `x` in any method.
        A name also bound to something else (`self.runner = None`) is no alias; neither is one bound
        to a part of the runner (`self.pool = model_runner.token_to_kv_pool`: what the backend then
        does with its own pool is not a read of the runner)."""
        if class_name is None or class_name not in module.classes:
            return {}
        key = (module.path, class_name)
        if key in self._self_aliases:
            return self._self_aliases[key]
        self._self_aliases[key] = {}  # while computing: methods resolve `self.X` without them
        methods = [(qualname, function) for qualname, function in module.functions.items()
                   if qualname.startswith(class_name + ".") and qualname.count(".") == 1]
        found: dict[str, str] = {}
        for _ in range(3):  # `self.a = model_runner; self.b = self.a` chains
            values: dict[str, set[str | None]] = {}
            for qualname, function in methods:
                scan = _FunctionScan(self, module, function, qualname, class_name, {}, (), ())
                for node in ast.walk(function):
                    targets = list(node.targets) if isinstance(node, ast.Assign) else (
                        [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
                    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                    for target in targets:
                        for single, taken in _paired(target, value):
                            for name in self_targets(single):
                                values.setdefault(name, set()).add(scan.resolve(taken) if taken is not None else None)
            found = {name: "" for name, paths in values.items() if name != RUNNER_NAME and paths == {""}}
            if found == self._self_aliases[key]:
                break
            self._self_aliases[key] = found
        return found

    # ------------------------------------------------------------ entry points

    def scan_file(self, path: Path) -> None:
        module = self.module(path)
        self._scan_body(module, module.tree.body, prefix="", class_name=None)

    def _scan_body(self, module: _Module, body: list[ast.stmt], prefix: str, class_name: str | None) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                self._scan_body(module, node.body, prefix + node.name + ".", node.name)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = prefix + node.name
                _FunctionScan(self, module, node, qualname, class_name, {}, (), ()).run()

    def follow(
        self,
        module: _Module,
        function: _FunctionNode,
        qualname: str,
        class_name: str | None,
        bindings: dict[str, str],
        guards: tuple[str, ...],
        via: tuple[str, ...],
    ) -> None:
        key = (module.path, qualname, tuple(sorted(bindings.items())))
        if key in self.followed or len(via) > _FOLLOW_DEPTH:
            return
        self.followed.add(key)
        _FunctionScan(self, module, function, qualname, class_name, bindings, guards, via).run()


class _FunctionScan:
    """One pass over one function body with its runner aliases and the guards around each node."""

    def __init__(
        self,
        scanner: _Scanner,
        module: _Module,
        function: _FunctionNode,
        qualname: str,
        class_name: str | None,
        bindings: dict[str, str],
        guards: tuple[str, ...],
        via: tuple[str, ...],
    ) -> None:
        self.scanner = scanner
        self.module = module
        self.function = function
        self.qualname = qualname
        self.class_name = class_name
        self.base_guards = guards
        self.via = via
        self.aliases: dict[str, str] = {RUNNER_NAME: ""}
        self.aliases.update((name, "") for name in _runner_parameters(function, module.classes.get(class_name or "")))
        self.aliases.update(bindings)
        self.self_aliases = scanner.self_aliases(module, class_name)
        self.local_imports: dict[str, str] = {}
        self._collect_aliases()

    # ------------------------------------------------------------ aliases

    def _collect_aliases(self) -> None:
        """Names bound only ever to one runner path in this function become aliases of that path."""
        assignments: list[tuple[str, ast.expr | None]] = []
        for node in ast.walk(self.function):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.local_imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(node, ast.Assign):
                targets, value = list(node.targets), node.value
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                targets, value = [node.target], node.value
            elif isinstance(node, ast.NamedExpr):
                targets, value = [node.target], node.value
            elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                targets = (
                    [item.optional_vars for item in node.items if item.optional_vars is not None]
                    if isinstance(node, (ast.With, ast.AsyncWith))
                    else [node.target]
                )
            for target, taken in (pair for whole in targets for pair in _paired(whole, value)):
                if isinstance(target, ast.Name):
                    assignments.append((target.id, taken))
                else:  # names a starred target rebinds; `mr.x = 1` or `mr[0] = 1` rebinds no name
                    assignments.extend((name, None) for name in _bound_names(target))
        # Iterate so that `cfg = model_runner.model_config; hf = cfg.hf_config` chains.
        for _ in range(3):
            values: dict[str, set[str | None]] = {}
            for name, value in assignments:
                if isinstance(value, ast.Name) and value.id == name:
                    continue  # `mr = mr` binds nothing new
                values.setdefault(name, set()).add(self.resolve(value) if value is not None else None)
            changed = False
            for name, found in values.items():
                if name == RUNNER_NAME:
                    continue
                path = next(iter(found)) if len(found) == 1 else None
                if path is None and name in self.aliases:
                    del self.aliases[name]
                    changed = True
                elif path is not None and self.aliases.get(name) != path:
                    self.aliases[name] = path
                    changed = True
            if not changed:
                break

    def resolve(self, node: ast.expr | None) -> str | None:
        """The runner path an expression denotes ("" for the runner itself), or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                if node.attr == RUNNER_NAME:
                    return ""
                if node.attr in self.self_aliases:
                    return self.self_aliases[node.attr]
            base = self.resolve(node.value)
            if base is None:
                return None
            return f"{base}.{node.attr}" if base else node.attr
        return None

    # ------------------------------------------------------------ walking

    def run(self) -> None:
        args = self.function.args
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None:
                self.visit(default, self.base_guards)
        for statement in self.function.body:
            self.visit(statement, self.base_guards)

    def record(self, path: str, node: ast.AST, guards: tuple[str, ...], soft: bool = False) -> None:
        if not path:
            return
        site = SourceSite(self.module.relative, getattr(node, "lineno", self.function.lineno))
        self.scanner.reads.append(RunnerRead(path, site, self.qualname, soft, guards, self.via))

    def visit(self, node: ast.AST, guards: tuple[str, ...]) -> None:
        if isinstance(node, ast.ClassDef):
            return  # a class inside a function: rare in backends, and its methods get no runner
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # A closure sees this function's aliases; it runs (at most) where it is defined.
            bindings = {name: path for name, path in self.aliases.items() if name not in _parameters(node)}
            qualname = f"{self.qualname}.<locals>.{node.name}"
            _FunctionScan(self.scanner, self.module, node, qualname, self.class_name, bindings, guards, self.via).run()
            return
        if isinstance(node, (ast.If, ast.While)):
            self.visit(node.test, guards)
            test = ast.unparse(node.test)
            for statement in node.body:
                self.visit(statement, guards + (test,))
            for statement in node.orelse:
                self.visit(statement, guards + (_negate(node.test),))
            return
        if isinstance(node, ast.IfExp):
            self.visit(node.test, guards)
            self.visit(node.body, guards + (ast.unparse(node.test),))
            self.visit(node.orelse, guards + (_negate(node.test),))
            return
        if isinstance(node, ast.BoolOp):
            earlier: tuple[str, ...] = ()
            for value in node.values:
                self.visit(value, guards + earlier)
                text = ast.unparse(value) if isinstance(node.op, ast.And) else _negate(value)
                earlier = earlier + (text,)
            return
        if isinstance(node, ast.Attribute):
            path = self.resolve(node)
            if path is not None:
                if isinstance(node.ctx, ast.Load):
                    self.record(path, node, guards)
                else:
                    self.record(self.resolve(node.value) or "", node, guards)
                    if path and isinstance(node.ctx, ast.Store):
                        site = SourceSite(self.module.relative, node.lineno)
                        self.scanner.writes.append(RunnerWrite(path, site, self.qualname))
                return
        if isinstance(node, ast.Call):
            if self._visit_getattr(node, guards):
                return
            self._maybe_follow(node, guards)
        for child in ast.iter_child_nodes(node):
            self.visit(child, guards)

    def _visit_getattr(self, node: ast.Call, guards: tuple[str, ...]) -> bool:
        func = node.func
        if not (isinstance(func, ast.Name) and func.id in ("getattr", "hasattr") and len(node.args) >= 2):
            return False
        base = self.resolve(node.args[0])
        name = node.args[1]
        if base is None or not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return False
        self.record(base, node, guards)  # the object itself must exist: a hard read
        soft = func.id == "hasattr" or len(node.args) >= 3
        self.record(f"{base}.{name.value}" if base else name.value, node, guards, soft=soft)
        for extra in node.args[2:]:
            self.visit(extra, guards)
        return True

    # ------------------------------------------------------------ following helpers

    def _callee(self, func: ast.expr) -> tuple[_Module, _FunctionNode, str, str | None, bool] | None:
        """(module, function, qualname, class, skips-first-parameter) of a call's target."""
        module = self.module
        if isinstance(func, ast.Name):
            if func.id in module.functions:
                return module, module.functions[func.id], func.id, None, False
            if func.id in module.classes:
                return self._method(module, func.id, "__init__")
            target = self.local_imports.get(func.id) or module.imports.get(func.id)
            if target is None:
                return None
            owner_name, _, name = target.rpartition(".")
            owner = self.scanner._module_for(owner_name)
            if owner is None:
                return None
            if name in owner.functions:
                return owner, owner.functions[name], name, None, False
            if name in owner.classes:
                return self._method(owner, name, "__init__")
            return None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            owner_name = func.value.id
            if owner_name == "self" and self.class_name is not None:
                return self._method(module, self.class_name, func.attr)
            if owner_name in module.classes:
                return self._method(module, owner_name, func.attr)
            target = self.local_imports.get(owner_name) or module.imports.get(owner_name)
            if target is not None:
                owner = self.scanner._module_for(target.rpartition(".")[0])
                class_name = target.rpartition(".")[2]
                if owner is not None and class_name in owner.classes:
                    return self._method(owner, class_name, func.attr)
        return None

    @staticmethod
    def _method(
        module: _Module, class_name: str, name: str
    ) -> tuple[_Module, _FunctionNode, str, str | None, bool] | None:
        qualname = f"{class_name}.{name}"
        function = module.functions.get(qualname)
        if function is None:
            return None
        static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in function.decorator_list)
        return module, function, qualname, class_name, not static

    def _maybe_follow(self, node: ast.Call, guards: tuple[str, ...]) -> None:
        passed = [(i, self.resolve(arg)) for i, arg in enumerate(node.args) if not isinstance(arg, ast.Starred)]
        keywords = [(k.arg, self.resolve(k.value)) for k in node.keywords if k.arg is not None]
        if all(p is None for _, p in passed) and all(p is None for _, p in keywords):
            return
        callee = self._callee(node.func)
        if callee is None:
            return
        module, function, qualname, class_name, skip_first = callee
        params = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
        if skip_first:
            params = params[1:]
        keyword_params = set(params) | {a.arg for a in function.args.kwonlyargs}
        bindings: dict[str, str] = {}
        for index, path in passed:
            if path is not None and index < len(params):
                bindings[params[index]] = path
        for name, path in keywords:
            if path is not None and name in keyword_params:
                bindings[name] = path
        if bindings:
            self.scanner.calls.add(RunnerCall(self.module.relative, self.qualname, module.relative, qualname))
        # A runner handed on under its usual name to a file scanned anyway adds nothing new.
        if not bindings or bindings == {RUNNER_NAME: ""} and module.path in self.scanner.direct:
            return
        call_site = f"{SourceSite(self.module.relative, node.lineno)} ({self.qualname})"
        self.scanner.follow(module, function, qualname, class_name, bindings, guards, self.via + (call_site,))


def _paired(target: ast.expr, value: ast.expr | None) -> list[tuple[ast.expr, ast.expr | None]]:
    """Each single target of an assignment with the value it takes: `self.a, self.r = 1, model_runner`
    pairs element-wise; an unpacked value it cannot pair (`a, b = f()`, a starred side) is None."""
    if isinstance(target, (ast.Tuple, ast.List)):
        values = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        if values is None or len(values) != len(target.elts) or any(
                isinstance(e, ast.Starred) for e in [*target.elts, *values]):
            return [pair for element in target.elts for pair in _paired(element, None)]
        return [pair for element, taken in zip(target.elts, values) for pair in _paired(element, taken)]
    if isinstance(target, ast.Starred):
        return _paired(target.value, None)
    return [(target, value)]


def _runner_parameters(function: _FunctionNode, cls: ast.ClassDef | None) -> list[str]:
    """Parameters that take the runner under another name than `model_runner`: one annotated
    `ModelRunner`, and the first of a backend's constructor named `runner` or `*_runner` (SGLang
    builds every attention backend as `Backend(model_runner)`; minimax_sparse_backend.py names it
    `runner`)."""
    positional = [*function.args.posonlyargs, *function.args.args]
    found = []
    for arg in [*positional, *function.args.kwonlyargs]:
        note = arg.annotation
        named = note.value if isinstance(note, ast.Constant) and isinstance(note.value, str) else (
            dotted_name(note) if note is not None else None)
        if named is not None and named.rsplit(".", 1)[-1] == "ModelRunner" and arg.arg != RUNNER_NAME:
            found.append(arg.arg)
    if cls is not None and function.name == "__init__" and len(positional) >= 2:
        first = positional[1].arg
        backend = any((dotted_name(base) or "").endswith("Backend") for base in cls.bases)
        if backend and (first == "runner" or first.endswith("_runner")) and first != RUNNER_NAME:
            found.append(first)
    return found


def _bound_names(target: ast.expr) -> list[str]:
    """The names an assignment target rebinds (`a, (b, *c)`), not the bases of an attribute or
    subscript target."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound_names(element)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _parameters(function: _FunctionNode) -> set[str]:
    args = function.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    return names


def _negate(test: ast.expr) -> str:
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return ast.unparse(test.operand)
    return ast.unparse(ast.UnaryOp(op=ast.Not(), operand=test))


def _dedupe(reads: list[RunnerRead]) -> list[RunnerRead]:
    """One read per (path, site, soft): the least guarded one (a read on any unguarded path is unguarded)."""
    best: dict[tuple[str, SourceSite, bool], RunnerRead] = {}
    for read in reads:
        key = (read.path, read.site, read.soft)
        kept = best.get(key)
        if kept is None or (len(read.guards), len(read.via)) < (len(kept.guards), len(kept.via)):
            best[key] = read
    return sorted(best.values(), key=lambda r: (r.site.file, r.site.line, r.path, r.soft))


@dataclass(frozen=True)
class RunnerCall:
    """A call that hands a runner value to a function of a scanned file: caller -> callee (qualnames)."""

    caller_file: str
    caller: str
    callee_file: str
    callee: str


@dataclass(frozen=True)
class RunnerWrite:
    """An assignment below the runner, `model_runner.<path> = ...` (also `+=`, annotated, and
    through the same aliases as the reads: `self.runner.<path> = ...`)."""

    path: str
    site: SourceSite
    function: str


@dataclass(frozen=True)
class RunnerFlow:
    """The reads of one scan and the calls through which the runner travels between functions."""

    reads: tuple[RunnerRead, ...]
    calls: frozenset[RunnerCall]
    writes: tuple[RunnerWrite, ...] = ()

    def reached_from(self, file: str, qualname: str) -> set[tuple[str, str]]:
        """(file, qualname) of the functions whose body a runner given to `qualname` (or to any
        method below it when it names a class) can reach, that function(s) included."""
        frontier = {(c.caller_file, c.caller) for c in self.calls if c.caller_file == file}
        frontier |= {(r.site.file, r.function) for r in self.reads if r.site.file == file}
        reached = {(f, q) for f, q in frontier if q == qualname or q.startswith(qualname + ".")}
        pending = list(reached)
        while pending:
            f, q = pending.pop()
            for call in self.calls:
                # a closure (`q.<locals>.inner`) runs with its enclosing function's runner
                if call.caller_file == f and (call.caller == q or call.caller.startswith(q + ".<locals>.")):
                    target = (call.callee_file, call.callee)
                    if target not in reached:
                        reached.add(target)
                        pending.append(target)
        return reached

    def reads_from(self, file: str, qualname: str) -> list[RunnerRead]:
        """The reads a runner given to `qualname` (a function, or a class: all its methods) can reach."""
        reached = self.reached_from(file, qualname)
        return [
            r for r in self.reads
            if any(r.site.file == f and (r.function == q or r.function.startswith(q + ".<locals>."))
                   for f, q in reached)
        ]


def scan_runner_flow(release: SGLangRelease) -> RunnerFlow:
    """`scan_runner_reads` plus the runner-passing calls between the scanned functions."""
    if not release.file(DSA_BACKEND_FILE).is_file():
        raise UsageError(
            f"{release.package_dir} (SGLang {release.version}) has no DSA backend: expected "
            f"{DSA_BACKEND_FILE}; SGLang 0.5.17 and 0.5.23 have one"
        )
    return _scan(release, reader_files(release))


def backend_files(backend_src: Path) -> list[Path]:
    """A downstream backend's Python files: one file, or every *.py below a folder."""
    if backend_src.is_file() and backend_src.suffix == ".py":
        return [backend_src]
    files = sorted(backend_src.rglob("*.py")) if backend_src.is_dir() else []
    if not files:
        raise UsageError(
            f"--backend-src {backend_src}: expected a .py file or a folder holding your backend's "
            "Python files; found none"
        )
    return files


def scan_backend_reads(release: SGLangRelease, backend_src: Path) -> list[RunnerRead]:
    """Every read of `model_runner.X` in a downstream suite's own backend (`backend_files`), by the
    same scanner: calls into SGLang's attention helpers are followed in `release`."""
    return list(_scan(release, backend_files(backend_src)).reads)


def scan_files_flow(release: SGLangRelease, files: list[Path]) -> RunnerFlow:
    """The reads and runner-passing calls of `files` (SGLang's or a downstream backend's), one scan."""
    return _scan(release, files)


def _scan(release: SGLangRelease, files: list[Path]) -> RunnerFlow:
    scanner = _Scanner(release)
    scanner.direct = set(files)
    for path in files:
        scanner.scan_file(path)
    return RunnerFlow(tuple(_dedupe(scanner.reads)), frozenset(scanner.calls), tuple(scanner.writes))


def scan_runner_reads(release: SGLangRelease) -> list[RunnerRead]:
    """Every read of `model_runner.X` in the DSA / DeepSeek-V4 backends and their helpers.

    Reads `model_runner.a.b`, `self.model_runner.a.b`, local aliases (`cfg = model_runner.a; cfg.b`),
    `getattr`/`hasattr` (soft when a default is given or for `hasattr`), and follows calls that pass a
    runner value to a helper under srt/layers/attention/. Raises UsageError when the tree has no DSA
    backend.
    """
    return list(scan_runner_flow(release).reads)
