"""SGLang's own attention unit-test kit (sglang/test/kits/attention_unittest) on dsakit's strict runner.

Owns: swapping the kit's DSA / DeepSeek-V4 runner classes (looked up by name when its builders
run) for `MockModelRunner(role)` carrying the kit runner's state, the declared target -> draft turn
(`MockModelRunner.draft_from`) before the kit's draft-runner setup, and undoing all of it.
Must not copy the kit's code: the kit's own builders run. Imports SGLang lazily.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from dsakit.contracts.schema import NAMESPACE, Role
from dsakit.errors import UsageError

KIT_PACKAGE = "sglang.test.kits.attention_unittest"
# kit family -> (module below KIT_PACKAGE, the runner class its builders call by name)
KIT_RUNNER_CLASSES: dict[str, tuple[str, str]] = {
    "dsa": ("attention_methods.dsa_attention", "DSAMockModelRunner"),
    "dsv4": ("attention_methods.dsv4_attention", "MockDSV4ModelRunner"),
}
KIT_DRAFT_SETUP = ("runner_modes.speculative_draft_runner", "_configure_runner_for_eagle_draft")

# Served as the kit runner's real objects (as dsakit's harness serves a real DSATokenToKVPool):
# the kit's pools, and its published ServerArgs (the draft setup deep-copies it through
# sglang.test.test_utils.server_args_variant and reads ServerArgs.__struct_fields__).
REAL_OBJECTS = ("req_to_token_pool", "token_to_kv_pool", "server_args")
# Never copied from the kit's runner: the role says is_draft_worker; the translator is built from
# the strict runner's own pools and role; hf_text_config aliases hf_config; forward would be the
# kit runner's bound ModelRunner.forward.
NOT_COPIED = frozenset({"is_draft_worker", "kv_index_translator", "model_config.hf_text_config", "forward"})


def kit_module(relative: str) -> Any:
    """A module of the installed kit, e.g. kit_module("attention_methods.dsa_attention")."""
    return importlib.import_module(f"{KIT_PACKAGE}.{relative}")


_MISSING = object()


def _kit_value(kit_runner: Any, path: str) -> Any:
    value = kit_runner
    for part in path.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            return _MISSING
    return value


def strict_runner_from_kit(kit_runner: Any, role: str | Role) -> Any:
    """`MockModelRunner(role)` carrying the kit runner's value for every attribute the role
    contract declares (its pools and ServerArgs as they are); contract defaults for the rest.
    A value of the wrong declared type raises UsageError naming the attribute."""
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
    from dsakit.mocks.model_runner import MockModelRunner

    parsed = Role.parse(role)
    below_real = tuple(f"{name}." for name in REAL_OBJECTS)
    overrides: dict[str, Any] = {}
    for entry in MODEL_RUNNER_CONTRACT:
        if entry.path in NOT_COPIED or entry.path.startswith(below_real):
            continue
        if parsed is Role.DRAFT and not entry.same_for_roles:
            continue  # the kit builds target runners: a draft keeps its role's defaults
        value = _kit_value(kit_runner, entry.path)
        if value is _MISSING or inspect.ismethod(value):
            continue
        if entry.type == NAMESPACE and entry.path not in REAL_OBJECTS:
            continue  # a strict namespace: its declared children get the kit's values
        overrides[entry.path] = value
    return MockModelRunner(parsed, overrides=overrides)


@dataclass
class KitSwap:
    """What one `kit_on_strict_runner` block built: per kit runner, the strict runner in its place."""

    role: Role
    kit_runners: list[Any] = field(default_factory=list)
    runners: list[Any] = field(default_factory=list)
    drafts: list[Any] = field(default_factory=list)

    def factory(self, kit_class: type) -> Callable[..., Any]:
        def build(**kit_kwargs: Any) -> Any:
            kit_runner = kit_class(**kit_kwargs)  # the kit's pools, config and server-args override
            self.kit_runners.append(kit_runner)
            runner = strict_runner_from_kit(kit_runner, self.role)
            self.runners.append(runner)
            return runner

        return build

    def draft_setup(self, configure: Callable[..., Any]) -> Callable[..., Any]:
        """The kit's draft-runner setup, preceded by the declared target -> draft turn."""
        from dsakit.mocks.model_runner import MockModelRunner

        def setup(runner: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(runner, MockModelRunner) and runner not in self.drafts:
                if not runner.is_draft_worker:
                    MockModelRunner.draft_from(runner)
                self.drafts.append(runner)
            return configure(runner, *args, **kwargs)

        return setup

    def restore_kit_overrides(self) -> None:
        """Undo the server-args overrides the kit's runners installed, newest first."""
        for kit_runner in reversed(self.kit_runners):
            override = getattr(kit_runner, "_server_args_override", None)
            if override is not None:
                override.restore()


def _patch(stack: ExitStack, module: Any, name: str, value: Any) -> None:
    if not hasattr(module, name):
        raise UsageError(
            f"the installed SGLang kit has no {module.__name__}.{name}: dsakit's swap names the kit's "
            f"runner classes {', '.join(c for _, c in KIT_RUNNER_CLASSES.values())} and "
            f"{KIT_DRAFT_SETUP[1]}"
        )
    original = getattr(module, name)
    setattr(module, name, value)
    stack.callback(setattr, module, name, original)


@contextmanager
def kit_on_strict_runner(role: str | Role = Role.TARGET, *, draft_setup: bool = False) -> Iterator[KitSwap]:
    """`with kit_on_strict_runner("target") as swap:` — inside, the kit's DSA / DeepSeek-V4 builders
    build dsakit's strict runner for `role` instead of their own mock (`swap.runners`).
    `draft_setup=True` also routes the kit's draft-runner setup through MockModelRunner.draft_from
    (imports the kit's runner_modes: needs sglang.test.test_utils and setproctitle).
    On exit the kit's names, its server-args overrides and SGLang's runtime context are restored."""
    from dsakit.sglang_facts.scope import SGLangScope

    swap = KitSwap(Role.parse(role))
    with ExitStack() as stack:
        stack.enter_context(SGLangScope())  # restores whatever the kit publishes (set_server_args)
        for relative, class_name in KIT_RUNNER_CLASSES.values():
            module = kit_module(relative)
            _patch(stack, module, class_name, swap.factory(getattr(module, class_name)))
        if draft_setup:
            module = kit_module(KIT_DRAFT_SETUP[0])
            _patch(stack, module, KIT_DRAFT_SETUP[1], swap.draft_setup(getattr(module, KIT_DRAFT_SETUP[1])))
        stack.callback(swap.restore_kit_overrides)
        yield swap
