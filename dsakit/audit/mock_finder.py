"""Mock model runners in a downstream test tree, found by AST, with the attributes each provides.

Owns: the index of the scanned files (classes, functions, fixtures), what an expression denotes
as a mock (`MockValue`: a `*ModelRunner*` class or a subclass, `type("X", (), {...})()`,
`SimpleNamespace(...)`, `MagicMock(spec=...)`) and its `AttrTree`, including attributes set in
`__init__`, class bodies, `setattr`, and `obj.attr = ...` after construction in the same function.
Must not import anything of the scanned tree (nor torch or SGLang).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.suite_files import SourceFile, Scope, node_site, last_name, attribute_chain, own_nodes, file_functions

_FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

RUNNER_CLASS = re.compile(r"ModelRunner(?!Output|Config|Args|Result)")
RUNNER_NAME = re.compile(r"runner", re.IGNORECASE)
_MOCK_CLASSES = {"MagicMock", "Mock", "NonCallableMagicMock", "NonCallableMock", "AsyncMock"}
_MOCK_OPTIONS = {"spec", "spec_set", "name", "side_effect", "return_value", "wraps", "unsafe", "new", "instance"}
_PLAIN_BASES = {"object", "ABC", "Generic", "Protocol"}
_PLAIN_METACLASSES = {"type", "ABCMeta"}  # set no attributes an audit would look for
_MAX_DEPTH = 12
_BUILDERS = {"type", "SimpleNamespace", "create_autospec", *_MOCK_CLASSES}  # calls that build a mock themselves


MockKey = tuple[str, str, int]
"""What tells two mocks apart: where each is built (file:line), its kind and its column."""


@dataclass
class MockValue:
    """A value a suite builds and may hand to a backend as `model_runner`.

    kind   "class", "type()", "SimpleNamespace", "MagicMock(spec=X)", "MagicMock", "constant", "opaque"
    label  what the report calls it ("MockModelRunner", "SimpleNamespace", ...)
    site   file:line where it is defined (a class) or built (an object)
    name   the variable, fixture or class it is bound to ("" when inline)
    added  attributes set after construction (`runner.x = ...`), with their sites
    """

    kind: str
    label: str
    site: str
    tree: AttrTree
    name: str = ""
    added: list[str] = field(default_factory=list)
    class_site: str = ""  # the class, when this is an instance of a scanned class
    column: int = 0  # where on its line it is built: two mocks of one line (`A() if c else B()`) are two

    @property
    def is_mock(self) -> bool:
        return self.kind not in ("constant", "opaque")

    @property
    def key(self) -> MockKey:
        return (self.site, self.kind, self.column)


@dataclass(frozen=True)
class RunnerAttributes:
    """The real ModelRunner's attributes (from `runner_source.runner_assignments`): all, and class-level."""

    everything: frozenset[str]
    class_level: frozenset[str]


class SuiteIndex:
    """The scanned files' classes and functions by name, and the evaluation of expressions as mocks."""

    def __init__(self, files: list[SourceFile], runner: RunnerAttributes) -> None:
        self.files = files
        self.runner = runner
        self.classes: dict[str, list[tuple[SourceFile, ast.ClassDef]]] = {}
        self.functions: dict[str, list[tuple[SourceFile, _FunctionNode, ast.ClassDef | None]]] = {}
        self._class_trees: dict[tuple[str, int, bool], AttrTree] = {}
        self._building: set[tuple[str, int, bool]] = set()
        for file in files:
            for node in ast.walk(file.tree):
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append((file, node))
            for node in file.tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for name in _fixture_names(node):
                        self.functions.setdefault(name, []).append((file, node, None))
                elif isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            for name in _fixture_names(item):
                                self.functions.setdefault(name, []).append((file, item, node))

    # ------------------------------------------------------------ lookups

    def find_class(self, name: str, file: SourceFile) -> tuple[SourceFile, ast.ClassDef] | None:
        """A scanned class by the name `file` uses for it: its own, or an import of one."""
        local = [(f, c) for f, c in self.classes.get(name, []) if f is file]
        if local:
            return local[0]
        original = file.imports.get(name)
        if original is None:
            return None
        found = self.classes.get(original, [])
        module = file.modules.get(name, "").lstrip(".").split(".")[-1]
        preferred = [(f, c) for f, c in found if f.path.stem == module]
        chosen = preferred or found
        return chosen[0] if chosen else None

    def find_fixture(self, name: str, scope: Scope) -> tuple[SourceFile, _FunctionNode, ast.ClassDef | None] | None:
        found = self.functions.get(name, [])
        for candidate in found:  # the suite's own file first, then its class, then conftest and others
            if candidate[0] is scope.file and (candidate[2] is None or candidate[2] is scope.cls):
                return candidate
        return found[0] if found else None

    # ------------------------------------------------------------ classes

    def class_value(self, file: SourceFile, cls: ast.ClassDef, *, name: str = "") -> MockValue:
        tree = self.class_tree(file, cls)
        return MockValue("class", cls.name, node_site(file, cls), tree, name or cls.name, class_site=node_site(file, cls))

    def class_tree(self, file: SourceFile, cls: ast.ClassDef, *, on_self: bool = True) -> AttrTree:
        """What an instance (on_self) or the class object (`dir(cls)`: class level) provides."""
        key = (str(file.path), cls.lineno, on_self)
        if key in self._class_trees:
            return self._class_trees[key]
        if key in self._building:
            return AttrTree.opaque(f"class {cls.name} derives from itself")
        self._building.add(key)
        try:
            tree = self._build_class_tree(file, cls, on_self)
        finally:
            self._building.discard(key)
        self._class_trees[key] = tree
        return tree

    def _build_class_tree(self, file: SourceFile, cls: ast.ClassDef, on_self: bool) -> AttrTree:
        tree = AttrTree()
        class_scope = Scope(file, None, cls)
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if item.name == "__getattr__":
                    tree.open = f"class {cls.name} defines __getattr__ ({node_site(file, item)})"
                tree.set(item.name, AttrTree.opaque("a method or property"), node_site(file, item))
            elif isinstance(item, ast.ClassDef):
                tree.set(item.name, self.class_tree(file, item, on_self=False), node_site(file, item))
            elif isinstance(item, ast.Assign):
                for target in item.targets:
                    if isinstance(target, ast.Name):
                        tree.set(target.id, self.value(item.value, class_scope).tree, node_site(file, item))
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                dataclass_field = on_self and any(last_name(d if not isinstance(d, ast.Call) else d.func)
                                                  == "dataclass" for d in cls.decorator_list)
                if item.value is not None:
                    tree.set(item.target.id, self.value(item.value, class_scope).tree, node_site(file, item))
                elif dataclass_field:
                    tree.set(item.target.id, AttrTree.opaque("a dataclass field"), node_site(file, item))
        if on_self:
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    _apply_additions(self, tree, ["self"], Scope(file, item, cls), own=False)
        for base in cls.bases:
            tree.merge(self._base_tree(file, cls, base, on_self))
        for keyword in cls.keywords:
            if keyword.arg == "metaclass":
                tree.merge(self._metaclass_tree(file, cls, keyword.value, on_self))
        return tree

    def _metaclass_tree(self, file: SourceFile, cls: ast.ClassDef, meta: ast.expr, on_self: bool) -> AttrTree:
        """What a metaclass visibly sets: on the class in its `__new__` (the namespace dict's keys,
        `made.x = ...` on what `super().__new__` returns) and `__init__` (`cls.x = ...`), and on the
        instance in its `__call__` (on_self). What it cannot read (a computed name, the class handed
        to a helper, a metaclass outside the scanned files) opens the tree: never a silent OK."""
        name = last_name(meta)
        if name in _PLAIN_METACLASSES:
            return AttrTree()
        found = self.find_class(name, file) if name is not None else None
        if found is None:
            module = file.modules.get(name or "", "")
            where = f" (imported from {module})" if module else ""
            return AttrTree.opaque(f"metaclass {ast.unparse(meta)}{where} of class {cls.name} is not in the scanned "
                                   "paths, so what it sets is unknown: add the file that defines it")
        meta_file, meta_cls = found
        tree = AttrTree()
        for item in meta_cls.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) or \
                    item.name not in ("__new__", "__init__", "__call__") or item.name == "__call__" and not on_self:
                continue
            params = [a.arg for a in [*item.args.posonlyargs, *item.args.args]]
            made = {params[0]} if item.name == "__init__" and params else set()
            made |= {t.id for node in own_nodes(item) if isinstance(node, ast.Assign)
                     and isinstance(node.value, ast.Call) and last_name(node.value.func) in ("__new__", "__call__")
                     for t in node.targets if isinstance(t, ast.Name)}
            scope = Scope(meta_file, item, meta_cls)
            for root in made:
                _apply_additions(self, tree, [root], scope, own=True)
            namespace = params[3] if item.name == "__new__" and len(params) >= 4 else ""
            handed = [[root] for root in (*made, namespace) if root]
            for node in own_nodes(item):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and namespace and \
                        isinstance(target := node.targets[0], ast.Subscript) and attribute_chain(target.value) == [namespace]:
                    key = target.slice
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        tree.set(key.value, self.value(node.value, scope).tree, node_site(meta_file, node))
                    else:
                        tree.open = f"metaclass {meta_cls.name} sets a computed name at {node_site(meta_file, node)}"
                elif isinstance(node, ast.Call) and last_name(node.func) not in ("setattr", "__new__", "__call__") \
                        and any(attribute_chain(a) in handed for a in node.args):
                    tree.open = (f"metaclass {meta_cls.name} hands the class to {ast.unparse(node.func)}() at "
                                 f"{node_site(meta_file, node)}, which the audit does not follow")
        return tree

    def _base_tree(self, file: SourceFile, cls: ast.ClassDef, base: ast.expr, on_self: bool) -> AttrTree:
        name = last_name(base)
        if name is None or name in _PLAIN_BASES:
            return AttrTree()
        found = self.find_class(name, file)
        if found is not None:
            return self.class_tree(found[0], found[1], on_self=on_self)
        module = file.modules.get(name, "")
        if name == "ModelRunner" and module.startswith("sglang"):
            names = self.runner.everything if on_self else self.runner.class_level
            return AttrTree({n: AttrTree.opaque("the real ModelRunner's") for n in names},
                            {n: "sglang ModelRunner" for n in names})
        if name in _MOCK_CLASSES:
            return AttrTree.opaque(f"class {cls.name} derives from {name} (no spec): every attribute exists")
        where = f" (imported from {module})" if module else ""
        return AttrTree.opaque(
            f"base class {name}{where} is not in the scanned paths, so its attributes are unknown: "
            "add the file that defines it"
        )

    # ------------------------------------------------------------ expressions

    def value(self, node: ast.expr, scope: Scope, depth: int = 0) -> MockValue:
        """What `node` denotes as a mock in `scope` (kind "opaque" when the audit cannot see it)."""
        site = node_site(scope.file, node)
        if depth > _MAX_DEPTH:
            return MockValue("opaque", "", site, AttrTree.opaque("too many indirections"))
        if isinstance(node, ast.Call):
            return self._call_value(node, scope, depth)
        if isinstance(node, ast.Name):
            return self._name_value(node.id, scope, depth, site)
        if isinstance(node, ast.Attribute):
            chain = attribute_chain(node)
            if chain and len(chain) == 2 and chain[0] in ("self", "cls") and scope.cls is not None:
                return self._member_value(chain[1], scope, depth, site)
            return MockValue("opaque", "", site, AttrTree.opaque(f"{ast.unparse(node)} is not a literal mock"))
        if isinstance(node, ast.Constant):
            return MockValue("constant", "", site, AttrTree.constant(node.value))
        if isinstance(node, (ast.List, ast.Tuple, ast.Dict, ast.Set, ast.JoinedStr, ast.Lambda,
                             ast.ListComp, ast.DictComp, ast.SetComp, ast.BinOp)):
            return MockValue("constant", "", site, AttrTree.constant())
        return MockValue("opaque", "", site, AttrTree.opaque(f"{ast.unparse(node)} is not a literal mock"))

    def alternatives(self, node: ast.expr, scope: Scope, depth: int = 0) -> list[MockValue]:
        """Every value `node` may denote: both branches of `A() if flag else B()` (each operand of
        `a or b`), every return of the helper or fixture it calls, a local name or fixture argument
        bound to one of those; `[value(node)]` where there is one."""
        found = self._alternatives(node, scope, depth)
        return found if len(found) > 1 else [self.value(node, scope, depth)]

    def _alternatives(self, node: ast.expr, scope: Scope, depth: int) -> list[MockValue]:
        if depth > _MAX_DEPTH:
            return []
        if isinstance(node, ast.IfExp):  # each branch named by its condition: two mocks of one line stay apart
            test = ast.unparse(node.test)
            negated = f"not {test}" if isinstance(node.test, (ast.Name, ast.Attribute, ast.Call)) else f"not ({test})"
            return [*(_named(v, f"when {test}") for v in self.alternatives(node.body, scope, depth + 1)),
                    *(_named(v, f"when {negated}") for v in self.alternatives(node.orelse, scope, depth + 1))]
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return [value for operand in node.values for value in self.alternatives(operand, scope, depth + 1)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _BUILDERS \
                and self.find_class(node.func.id, scope.file) is None:
            helper = self.find_fixture(node.func.id, scope)
            return self.returned_all(*helper, depth=depth + 1) if helper is not None else []
        if isinstance(node, ast.Name) and scope.function is not None:
            bound = _binding(scope.function, node.id)
            if bound is not None:
                found = self._alternatives(bound, scope, depth + 1)
            elif node.id in _parameters(scope.function):
                fixture = self.find_fixture(node.id, scope)
                found = self.returned_all(*fixture, depth=depth + 1) \
                    if fixture is not None and fixture[1] is not scope.function else []
            else:
                found = []
            return [_named(_with_additions(self, value, [node.id], scope), node.id) if value.is_mock else value
                    for value in found]
        return []

    def _call_value(self, node: ast.Call, scope: Scope, depth: int) -> MockValue:
        site = node_site(scope.file, node)
        func = node.func
        if isinstance(func, ast.Call) and last_name(func.func) == "type":
            made = self._call_value(func, scope, depth + 1)  # type("X", (), {...})(): an instance
            return MockValue(made.kind, made.label, site, made.tree, made.name, column=node.col_offset)
        name = last_name(func)
        if name == "type" and len(node.args) == 3:
            return self._type_value(node, scope, depth)
        if name == "SimpleNamespace":
            tree = AttrTree()
            for keyword in node.keywords:
                if keyword.arg is None:
                    tree.open = f"SimpleNamespace(**{ast.unparse(keyword.value)}) at {site}"
                else:
                    tree.set(keyword.arg, self.value(keyword.value, scope, depth + 1).tree, site)
            return MockValue("SimpleNamespace", "SimpleNamespace", site, tree, column=node.col_offset)
        if name in _MOCK_CLASSES or name == "create_autospec":
            return self._magicmock_value(node, name, scope, depth)
        if name is not None:
            found = self.find_class(name, scope.file)
            if found is not None:
                value = self.class_value(*found)
                return MockValue(value.kind, value.label, value.site, _copy(value.tree), class_site=value.site)
            target = self.find_fixture(name, scope) if isinstance(func, ast.Name) else None
            if target is not None:
                returned = self.returned(*target, depth=depth + 1)
                if returned is not None:
                    return returned
        return MockValue("opaque", "", site, AttrTree.opaque(f"{ast.unparse(func)}(...) is not a literal mock"))

    def _type_value(self, node: ast.Call, scope: Scope, depth: int) -> MockValue:
        site = node_site(scope.file, node)
        title = str(node.args[0].value) if isinstance(node.args[0], ast.Constant) else "?"
        tree = AttrTree()
        namespace = node.args[2]
        if isinstance(namespace, ast.Dict):
            for key, item in zip(namespace.keys, namespace.values):
                if key is None:
                    tree.open = f"type(..., {{**{ast.unparse(item)}}}) at {site}"
                elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                    tree.set(key.value, self.value(item, scope, depth + 1).tree, node_site(scope.file, key))
                else:
                    tree.open = f"type(...) with a computed key at {site}"
        else:
            tree.open = f"type(...) with a namespace that is not a dict literal at {site}"
        bases = node.args[1]
        for base in bases.elts if isinstance(bases, ast.Tuple) else []:
            base_name = last_name(base)
            found = self.find_class(base_name, scope.file) if base_name else None
            if found is not None:
                tree.merge(self.class_tree(*found))
            elif base_name not in _PLAIN_BASES:
                tree.open = f"type(...) base {ast.unparse(base)} is not in the scanned paths"
        return MockValue("type()", f'type("{title}", ...)()', site, tree, column=node.col_offset)

    def _magicmock_value(self, node: ast.Call, name: str, scope: Scope, depth: int) -> MockValue:
        site = node_site(scope.file, node)
        spec: ast.expr | None = None
        for keyword in node.keywords:
            if keyword.arg in ("spec", "spec_set"):
                spec = keyword.value
        if spec is None and node.args:
            spec = node.args[0]  # Mock(spec) / create_autospec(spec)
        if spec is None:
            tree = AttrTree.opaque(f"{name}() without spec provides every attribute")
            return MockValue("MagicMock", f"{name}()", site, tree, column=node.col_offset)
        tree = self.spec_tree(spec, scope, depth)
        for keyword in node.keywords:
            if keyword.arg is not None and keyword.arg not in _MOCK_OPTIONS:
                tree.set(keyword.arg, self.value(keyword.value, scope, depth + 1).tree, site)
        spec_text = ast.unparse(spec)
        return MockValue(f"{name}(spec={spec_text})", f"{name}(spec={spec_text})", site, tree, column=node.col_offset)

    def spec_tree(self, spec: ast.expr, scope: Scope, depth: int) -> AttrTree:
        """A spec'd mock allows the names of `dir(spec)`; each child is a MagicMock (open)."""
        name = last_name(spec)
        names: set[str] | None = None
        if isinstance(spec, (ast.Name, ast.Attribute)) and name is not None:
            found = self.find_class(name, scope.file)
            if found is not None:
                names = set(self.class_tree(*found, on_self=False).children)
            elif name == "ModelRunner":
                names = set(self.runner.class_level)
        elif isinstance(spec, ast.Call):
            instance = self.value(spec, scope, depth + 1)
            if instance.is_mock and not instance.tree.open:
                names = set(instance.tree.children)
        if names is None:
            return AttrTree.opaque(f"spec={ast.unparse(spec)} is not a class the audit can see")
        why = "a spec'd MagicMock's attributes are MagicMocks"
        return AttrTree({n: AttrTree.opaque(why) for n in names}, {n: f"spec={name}" for n in names})

    def _name_value(self, name: str, scope: Scope, depth: int, site: str) -> MockValue:
        function = scope.function
        value: MockValue | None = None
        if function is not None:
            bound = _binding(function, name)
            if bound is not None:
                value = self.value(bound, scope, depth + 1)
            elif name in _parameters(function):
                fixture = self.find_fixture(name, scope)
                if fixture is not None and fixture[1] is not function:
                    value = self.returned(*fixture, depth=depth + 1)
        if value is None:
            found = self.find_class(name, scope.file)
            if found is not None:
                return self.class_value(*found, name=name)
            module_level = _module_binding(scope.file, name)
            if module_level is None or function is None and scope.cls is None:
                return MockValue("opaque", "", site, AttrTree.opaque(f"{name} is not a literal mock"))
            value = self.value(module_level, Scope(scope.file), depth + 1)
        if function is not None and value.is_mock:
            value = _with_additions(self, value, [name], scope)
        if value.is_mock and not value.name:
            value.name = name
        return value

    def _member_value(self, member: str, scope: Scope, depth: int, site: str) -> MockValue:
        """`self.runner` in a test class: what its setUp (or any method) assigns to it."""
        assert scope.cls is not None
        for item in scope.cls.body:
            if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in own_nodes(item):
                if isinstance(node, ast.Assign) and any(attribute_chain(t) in (["self", member], ["cls", member])
                                                        for t in node.targets):
                    method_scope = Scope(scope.file, item, scope.cls)
                    value = self.value(node.value, method_scope, depth + 1)
                    if value.is_mock:
                        root = ["self" if attribute_chain(node.targets[0]) == ["self", member] else "cls", member]
                        value = _with_additions(self, value, root, method_scope)
                        value.name = value.name or f"self.{member}"
                    return value
        return MockValue("opaque", "", site, AttrTree.opaque(f"self.{member} is not assigned in its class"))

    def returned_all(self, file: SourceFile, function: _FunctionNode, cls: ast.ClassDef | None,
                     depth: int = 0) -> list[MockValue]:
        """Every value a helper or fixture may return (or yield): each `return`, each branch."""
        found: list[MockValue] = []
        for node in own_nodes(function):
            if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
                for value in self.alternatives(node.value, Scope(file, function, cls), depth + 1):
                    found.append(_named(value, function.name) if value.is_mock and value.kind == "class" else value)
        return found

    def returned(self, file: SourceFile, function: _FunctionNode, cls: ast.ClassDef | None,
                 depth: int = 0) -> MockValue | None:
        """What a fixture or helper returns (or yields), as a mock; None when it returns nothing."""
        for node in own_nodes(function):
            if isinstance(node, (ast.Return, ast.Yield)) and node.value is not None:
                value = self.value(node.value, Scope(file, function, cls), depth + 1)
                if value.is_mock:
                    value.name = value.name if value.kind != "class" else function.name
                return value
        return None


def _named(value: MockValue, name: str) -> MockValue:
    """`value` called `name` in the report, unless it has a name of its own (a class instance takes
    its helper's name, as `returned` gives it)."""
    if value.is_mock and (not value.name or value.kind == "class" and value.name == value.label):
        value.name = name
    return value


def _fixture_names(function: _FunctionNode) -> list[str]:
    """A function's own name, plus `@pytest.fixture(name="x")`."""
    names = [function.name]
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and last_name(decorator.func) == "fixture":
            for keyword in decorator.keywords:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    names.append(str(keyword.value.value))
    return names


def _parameters(function: _FunctionNode) -> set[str]:
    args = function.args
    return {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}


def _binding(function: _FunctionNode, name: str) -> ast.expr | None:
    """The first value assigned to a local `name` in `function`."""
    for node in own_nodes(function):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            return node.value
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if isinstance(item.optional_vars, ast.Name) and item.optional_vars.id == name:
                    return item.context_expr
    return None


def _module_binding(file: SourceFile, name: str) -> ast.expr | None:
    """A module-level `NAME = value` (a shared runner built once per test file)."""
    for node in file.tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return node.value
    return None


def _copy(tree: AttrTree) -> AttrTree:
    return AttrTree({k: _copy(v) for k, v in tree.children.items()}, dict(tree.sites), tree.open, tree.leaf,
                    tree.value)


def _with_additions(index: SuiteIndex, value: MockValue, root: list[str], scope: Scope) -> MockValue:
    """`value` plus what `scope`'s function sets on it after construction (a new MockValue if any)."""
    tree = _copy(value.tree)
    added = _apply_additions(index, tree, root, scope, own=True)
    if not added and tree.open == value.tree.open:  # a computed setattr / update(**...) alone opens it
        return value
    label = value.label if value.kind != "class" else f"{value.label} instance"
    where = node_site(scope.file, scope.function) if scope.function is not None else value.site
    return MockValue(value.kind, label, value.site if value.kind != "class" else where, tree,
                     value.name, [*value.added, *added], value.class_site)


def _apply_additions(index: SuiteIndex, tree: AttrTree, root: list[str], scope: Scope, *, own: bool) -> list[str]:
    """Apply `root.a.b = v` and `setattr(root.a, "b", v)` found in `scope.function` to `tree`."""
    function = scope.function
    if function is None:
        return []
    added: list[str] = []
    nodes = own_nodes(function) if own else ast.walk(function)
    for node in nodes:
        writes: list[tuple[list[str], ast.expr | None, ast.AST]] = []
        if isinstance(node, ast.Assign):
            writes = [(c, node.value, node) for t in node.targets if (c := attribute_chain(t)) is not None]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and (c := attribute_chain(node.target)) is not None:
            writes = [(c, node.value, node)]
        elif isinstance(node, ast.Call) and last_name(node.func) == "setattr" and len(node.args) == 3:
            owner = attribute_chain(node.args[0])
            attribute = node.args[1]
            if owner is not None and owner == root[: len(owner)] and len(owner) >= len(root):
                if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str):
                    writes = [([*owner, attribute.value], node.args[2], node)]
                else:
                    tree.open = f"setattr with a computed name at {node_site(scope.file, node)}"
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("update", "configure_mock")):
            owner = attribute_chain(node.func.value)
            if owner in ([*root, "__dict__"], root):
                for keyword in node.keywords:
                    if keyword.arg is None:
                        tree.open = f"{ast.unparse(node.func)}(**...) at {node_site(scope.file, node)}"
                    else:
                        writes.append(([*root, keyword.arg], keyword.value, node))
                if node.args:
                    tree.open = f"{ast.unparse(node.func)}(...) at {node_site(scope.file, node)}"
        for chain, value, where in writes:
            if len(chain) <= len(root) or chain[: len(root)] != root:
                continue
            path = chain[len(root):]
            node_tree: AttrTree | None = tree
            for part in path[:-1]:
                node_tree = node_tree.child_for_update(part) if node_tree is not None else None
            if node_tree is None:
                continue
            child = index.value(value, scope).tree if value is not None else AttrTree.opaque("")
            if path[-1] in node_tree.children and isinstance(where, ast.AugAssign):
                continue
            node_tree.set(path[-1], child, node_site(scope.file, where))
            added.append(".".join(path))
    return added


# ---------------------------------------------------------------- candidates


def candidates(index: SuiteIndex) -> list[MockValue]:
    """Every mock runner the files define, used or not: `*ModelRunner*` classes and their subclasses,
    and literal mocks bound to a runner-named variable, attribute or fixture."""
    found: dict[MockKey, MockValue] = {}
    runner_classes: set[tuple[str, int]] = set()
    changed = True
    while changed:  # subclasses of runner classes, across files, until nothing new
        changed = False
        for name, entries in index.classes.items():
            for file, cls in entries:
                key = (str(file.path), cls.lineno)
                if key in runner_classes:
                    continue
                bases = [index.find_class(n, file) for b in cls.bases if (n := last_name(b))]
                if RUNNER_CLASS.search(name) or any(
                    b is not None and (str(b[0].path), b[1].lineno) in runner_classes for b in bases
                ):
                    runner_classes.add(key)
                    value = index.class_value(file, cls)
                    found.setdefault(value.key, value)
                    changed = True
    for file in index.files:
        for function, owner in file_functions(file):
            scope = Scope(file, function, owner)
            if RUNNER_NAME.search(function.name):
                for returned in index.returned_all(file, function, owner):
                    if returned.is_mock and returned.kind != "class":
                        found.setdefault(returned.key, returned)
            for node in own_nodes(function):
                if not isinstance(node, ast.Assign):
                    continue
                for target in node.targets:
                    chain = attribute_chain(target)
                    if chain and RUNNER_NAME.search(chain[-1]) and len(chain) <= 2:
                        for value in index.alternatives(target, scope):
                            if value.is_mock and value.kind != "class":
                                found.setdefault(value.key, value)
    return list(found.values())
