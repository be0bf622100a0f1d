"""`MockModelRunner`: the one strict stand-in for SGLang's ModelRunner, built from the role contract.

Every attribute a DSA / DeepSeek-V4 backend may read is present with its per-role default (so a
mock cannot silently lack `max_running_requests`); anything else raises `ContractViolation`.
Never imports torch or SGLang itself: lazy defaults do, when first read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dsakit.contracts.extension import active_contract
from dsakit.contracts.schema import Contract, Role
from dsakit.errors import UsageError
from dsakit.mocks.strict_node import _NO_PLAN, StrictNamespace, unsealed

_NOTHING_OMITTED: frozenset[str] = frozenset()


class MockModelRunner(StrictNamespace):
    """A strict model runner for one role.

    MockModelRunner(role="draft", max_running_requests=8, model_config__context_len=4096)
    MockModelRunner(overrides={"server_args.dsa_decode_backend": "trtllm"})
    MockModelRunner(omit=["max_running_requests"])   # reproduce a drifted hand-written mock
    MockModelRunner(contract=dsakit.effective_contract(path))   # another suite's extended contract

    Nested overrides use "__" in keywords or "." in `overrides` keys; each is checked against the
    declared type. `omit` removes declared attributes: reading one raises ContractViolation.
    `contract` defaults to the running pytest session's: dsakit's role contract plus the suite's
    `[tool.dsakit.contract]` entries (`dsakit.effective_contract`).

    Construction validates the role, `omit` and every override (bad ones raise UsageError here);
    the attribute tree itself is built level by level on first access, so a test that only passes
    the runner through pays for none of it.
    """

    # what it was built from (role, overrides, omit) and the writes made since, by path: a copy
    # or an unpickled runner is rebuilt from them (`__reduce__`)
    __slots__ = ("_dsakit_args", "_dsakit_writes")
    _dsakit_args: tuple[str, dict[str, Any], frozenset[str]]
    _dsakit_writes: dict[str, Any]

    def __init__(
        self,
        role: str | Role = Role.TARGET,
        *,
        omit: Iterable[str] = (),
        overrides: dict[str, Any] | None = None,
        contract: Contract | None = None,
        **keyword_overrides: Any,
    ) -> None:
        parsed_role = Role.parse(role)
        if contract is None:
            contract = active_contract()
        elif not isinstance(contract, Contract):
            raise UsageError(f"contract={contract!r}: expected a dsakit Contract (dsakit.effective_contract(path), "
                             f"or leave it out for the session's), got {type(contract).__name__}")
        if overrides is not None and not isinstance(overrides, Mapping):
            raise UsageError(f"overrides={overrides!r}: expected a dict of attribute paths to values, e.g. "
                             f"overrides={{'server_args.dsa_decode_backend': 'trtllm'}}, got {type(overrides).__name__}")
        if overrides is not None and not all(isinstance(key, str) for key in overrides):
            key = next(k for k in overrides if not isinstance(k, str))
            raise UsageError(f"overrides={overrides!r}: expected a dict of attribute paths (str) to values, e.g. "
                             f"overrides={{'server_args.dsa_decode_backend': 'trtllm'}}, got the key {key!r} "
                             f"({type(key).__name__})")
        omitted = _NOTHING_OMITTED
        if omit or isinstance(omit, str):  # omit="" is still refused below
            if isinstance(omit, str):
                omit = [omit]
            if not isinstance(omit, Iterable) or not all(isinstance(p, str) for p in omit):
                raise UsageError(f"omit={omit!r}: expected attribute paths (str), e.g. "
                                 "omit=['max_running_requests']")
            omitted = frozenset(omit)
            for path in omitted:
                if path not in contract:
                    raise UsageError(
                        f"cannot omit {path!r}: not declared by the role contract; declared top-level "
                        f"attributes: {', '.join(sorted(contract.top_level()))}"
                    )
        merged = dict(overrides) if overrides else {}
        for key, value in keyword_overrides.items():
            path = key.replace("__", ".")
            if path in merged:  # which one wins would be a guess: the caller says
                raise UsageError(
                    f"model_runner.{path} is given twice: {key}={value!r} and overrides={{{path!r}: "
                    f"{merged[path]!r}}}; give each attribute once, as a keyword or in overrides")
            merged[path] = value
        super().__init__(contract, "", parsed_role, None, merged, omitted)
        object.__setattr__(self, "_dsakit_args", (parsed_role.value, merged, omitted))
        object.__setattr__(self, "_dsakit_writes", {})

    @classmethod
    def of_role(cls, role: Role) -> MockModelRunner:
        """`MockModelRunner(role)`: nothing overridden or omitted, the session's contract. What the
        runner fixtures build for every test, without the keyword checks that need no check here
        (half the cost of a construction; bench/bench_kit_overhead.py)."""
        runner = object.__new__(unsealed(cls))  # filled with plain slot stores, then sealed
        runner._dsakit_fill(active_contract(), "", role, None, _NO_PLAN, _NOTHING_OMITTED)
        runner._dsakit_args = (role._value_, {}, _NOTHING_OMITTED)  # _value_: Role.value without the property call
        runner._dsakit_writes = {}
        runner.__class__ = cls
        return runner

    @classmethod
    def draft_from(cls, target: MockModelRunner, **overrides: Any) -> MockModelRunner:
        """Turn a target runner into a draft runner, in place, as SGLang's attention kit does to its
        runner before building draft backends (speculative_draft_runner.py:341): the role becomes
        draft in the whole tree, `is_draft_worker` True, then each override is set (type-checked;
        "__" for nested paths). Values already read or set stay; per-role defaults not read yet
        follow the draft role. Returns `target`. Setting `is_draft_worker=True` directly on a target
        runner stays refused: the role change is this one declared operation."""
        if not isinstance(target, MockModelRunner):
            raise UsageError(f"draft_from needs a MockModelRunner, got {type(target).__name__}")
        if target._dsakit_role is Role.DRAFT:
            raise UsageError("draft_from: this MockModelRunner already has role='draft'")
        target._dsakit_become(Role.DRAFT)
        _, overrides_given, omitted = target._dsakit_args  # a copy rebuilds a draft now
        object.__setattr__(target, "_dsakit_args", (Role.DRAFT.value, overrides_given, omitted))
        target.is_draft_worker = True
        for key, value in overrides.items():
            *parents, name = key.split("__")
            namespace: Any = target
            for part in parents:
                namespace = getattr(namespace, part)
            setattr(namespace, name, value)
        return target

    def _dsakit_written(self, path: str, value: Any) -> None:
        self._dsakit_writes[path] = value

    def __reduce__(self) -> tuple[Any, ...]:
        """copy.copy / copy.deepcopy / pickle: an equal strict mock, rebuilt from the role, the
        overrides and `omit`, with the writes made since applied as overrides (deepcopy copies
        them; copy.copy shares them). Contract defaults not yet read are built afresh."""
        role, overrides, omitted = self._dsakit_args
        return (_rebuild, (role, {**overrides, **self._dsakit_writes}, tuple(sorted(omitted))))


def _rebuild(role: str, overrides: dict[str, Any], omit: tuple[str, ...]) -> MockModelRunner:
    return MockModelRunner(role, omit=omit, overrides=overrides)
