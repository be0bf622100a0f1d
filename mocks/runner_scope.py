"""The SGLang scope a model-runner fixture opens for its role, so SGLang code that reads the
runtime context (`DSATopKBackend.resolve(runner)` -> `get_exec()` / `get_spec()`) works on it.

Owns: when a runner fixture opens one (the test's module imported SGLang, SGLang's runtime context
is loaded and nothing is published yet: a scope the test or `topk_scope` opened wins) and its
server args (the role's per-role `server_args.*` contract defaults). Must not import SGLang where
the test did not.
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Iterator
from types import ModuleType
from typing import Any

# at module level, not in scoped_runner: a from-import inside a function costs every call (every
# test) ~8,700 instructions on Python 3.11 (bench/README.md, "Kit overhead")
from dsakit.contracts.schema import Role
from dsakit.mocks.model_runner import MockModelRunner

RUNTIME_CONTEXT = "sglang.srt.runtime_context"

def role_server_args(runner: Any) -> dict[str, Any]:
    """The server args that differ per role in the runner's contract (e.g. a draft worker's
    speculative_eagle_topk), for the fields this SGLang's ServerArgs has."""
    from dsakit.contracts.schema import Factory
    from dsakit.sglang_facts.scope import server_arg_fields
    from sglang.srt.server_args import ServerArgs

    fields = server_arg_fields(ServerArgs)
    contract = object.__getattribute__(runner, "_dsakit_contract")
    role = object.__getattribute__(runner, "_dsakit_role")
    args: dict[str, Any] = {}
    for entry in contract:
        name = entry.path.removeprefix("server_args.")
        if name == entry.path or entry.same_for_roles or "." in name or name not in fields:
            continue
        value = entry.default_for(role)
        args[name] = value.build(runner) if isinstance(value, Factory) else value
    return args


# test module -> imports something of SGLang (weak: pytester re-imports modules of the same name)
_MODULE_USES_SGLANG: weakref.WeakKeyDictionary[ModuleType, bool] = weakref.WeakKeyDictionary()


def _module_uses_sglang(module: Any) -> bool:
    """Did the test's module import SGLang (a module, or a name from one)? Once per module."""
    if not isinstance(module, ModuleType):
        return False
    found = _MODULE_USES_SGLANG.get(module)
    if found is None:
        found = any(
            str(getattr(value, "__name__", "") if isinstance(value, ModuleType)
                else getattr(value, "__module__", "") or "").split(".", 1)[0] == "sglang"
            for value in list(vars(module).values()))
        _MODULE_USES_SGLANG[module] = found
    return found


def _published() -> bool | None:
    """Is SGLang's runtime context published (None: the test has not loaded SGLang's context)?"""
    module = sys.modules.get(RUNTIME_CONTEXT)
    if module is None:
        return None
    published = getattr(module.get_context(), "is_config_namespace_published", None)
    if published is None:  # a release without config namespaces (0.5.17-0.5.20): nothing to open
        return None
    return bool(published("exec"))


_BY_PATH: dict[str, ModuleType] = {}  # the test file of $PYTEST_CURRENT_TEST -> its module


def _current_test_module() -> ModuleType | None:
    """The module of the test being set up ($PYTEST_CURRENT_TEST names its file): found without the
    fixture asking for `request`, which costs every test ~20 us (bench/bench_kit_overhead.py)."""
    path = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]
    if not path.endswith(".py"):
        return None
    cached = _BY_PATH.get(path)
    if cached is not None and sys.modules.get(cached.__name__) is cached:
        return cached
    suffix = os.sep + path.replace("/", os.sep)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None) or ""
        if isinstance(module, ModuleType) and (file.endswith(suffix) or file == path):
            _BY_PATH[path] = module
            return module
    return None


def scoped_runner(role: str) -> Iterator[Any]:
    """A MockModelRunner for `role` (a generator fixture's body). When the test's module imported
    SGLang, its runtime context is loaded and nothing is published, the runner is yielded inside
    an `SGLangScope` with the role's server args, closed after the test even when it raised; else
    the plain runner: no SGLang import, no cost for suites that never touch SGLang's context.

    The runner's per-role server args are pinned as overrides: SGLang normalises some of them
    when it publishes (a draft's speculative_eagle_topk without a speculative algorithm becomes
    None), and the mock keeps its role's contract defaults either way."""
    runner = MockModelRunner.of_role(Role.parse(role))
    if _published() is not False or not _module_uses_sglang(_current_test_module()):
        yield runner
        return
    from dsakit.sglang_facts.scope import SGLangScope

    args = role_server_args(runner)
    if args:
        runner = MockModelRunner(role=role, overrides={f"server_args.{k}": v for k, v in args.items()})
    with SGLangScope(server_args=args):
        yield runner
