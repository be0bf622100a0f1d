"""Gates in pytest: the `dsakit_requires` marker, `dsakit.gate(...)`, `dsakit.require(...)` and the
one collection hook that turns closed gates into skip markers (FlashInfer-conftest style).

Owns: the gate session (the device gates see, the skip inventory; the run's DsakitSession holds it)
and the collection pass. The device is resolved on first use, not at configure time; never imports
torch or SGLang itself.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, cast

import pytest

from dsakit import active
from dsakit.errors import UsageError
from dsakit.gates.inventory import SkipInventory, format_reasons

if TYPE_CHECKING:
    from dsakit.gates.device_model import DeviceModel
    from dsakit.reasons import Reason

# the gate table and the device model are imported on first use (a gate evaluated, an option
# given): a run that uses no gate never loads them (bench/bench_kit_overhead.py)
REAL = "real"

MARKER = "dsakit_requires"


class DsakitGateWarning(pytest.PytestWarning):
    """A gate combination that no known device can open."""


class GateSession:
    """One pytest run's view of gates: the device (resolved on first use, by `device`) and the skip
    inventory. The run's DsakitSession (dsakit.session) holds it; outside pytest, `active_session`
    makes one from $DSAKIT_DEVICE."""

    def __init__(self, device: Callable[[], DeviceModel]) -> None:
        self._resolve = device
        self.inventory = SkipInventory()
        # the plugin's per-test hooks start on first use (`require` in a run whose collected tests
        # use nothing of dsakit); None once started or outside pytest
        self.on_use: Callable[[], None] | None = None

    @functools.cached_property
    def device(self) -> DeviceModel:
        return self._resolve()


def _from_environment() -> DeviceModel:
    from dsakit.gates.device_model import resolve_device

    return resolve_device(None)


def active_session() -> GateSession:
    """The innermost configured pytest run's gate session; outside pytest, one from $DSAKIT_DEVICE."""
    run = active.run()
    gates = run.gates if run is not None else None
    if gates is not None:
        return cast(GateSession, gates)  # a DsakitSession holds a GateSession (a class check would
        # fail across pytester's in-process runs, which drop and re-import modules)
    return GateSession(_from_environment)


# ---------------------------------------------------------------- public helpers


def gate(*codes: str) -> pytest.MarkDecorator:
    """A `dsakit_requires` mark: `@dsakit.gate("cuda", "module:flashinfer")` or
    `pytest.param(..., marks=dsakit.gate("fa3"))`. Unknown codes raise UsageError right here."""
    try:
        return _gate_mark(codes)
    except TypeError:  # an unhashable argument: validate_codes refuses it by name
        return _gate_mark.__wrapped__(codes)


@functools.lru_cache(maxsize=256)
def _gate_mark(codes: tuple[str, ...]) -> pytest.MarkDecorator:
    """One mark per distinct tuple: a matrix calls `gate()` once per param with the same codes (a
    MarkDecorator is immutable, so one object serves every param)."""
    from dsakit.gates.table import validate_codes

    if not codes:
        raise UsageError("dsakit.gate() needs at least one gate code (see `dsakit capabilities`)")
    mark: pytest.MarkDecorator = getattr(pytest.mark, MARKER)
    return mark(*validate_codes(codes))


def require(*codes: str) -> None:
    """Inside a test or fixture: skip (recorded in the skip inventory) unless every gate is open.
    The skip is reported at the caller's line (-rs), not here."""
    __tracebackhide__ = True
    from dsakit.gates.table import closed_reasons, validate_codes

    session = active_session()
    on_use, session.on_use = session.on_use, None
    if on_use is not None:
        on_use()  # first use: the plugin starts its per-test hooks
    reasons = closed_reasons(codes, session.device)
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    if current:
        session.inventory.declare(current.rsplit(" (", 1)[0], validate_codes(codes))
    if not reasons:
        return
    if current:
        session.inventory.plan(current.rsplit(" (", 1)[0], reasons)
    _skip(format_reasons(reasons))


def _skip(message: str) -> NoReturn:
    __tracebackhide__ = True  # pytest reports a skip at the last frame that is not hidden
    pytest.skip(message)


# ---------------------------------------------------------------- collection (the run's DsakitSession hands off)


# Every fixture the plugin provides (tests/plugin/test_inert.py holds this to dsakit.plugin's): a test
# asking for one uses dsakit, so its coded skips are dsakit's business (the skip inventory).
FIXTURES = frozenset({"target_runner", "draft_runner", "model_runner", "model_runner_role", "simulated_device",
                      "selection_snapshot", "topk_cell", "topk_scope"})


def marker_names(items: list[pytest.Item]) -> set[str]:
    """Every marker name on the items and their parents, each node visited once: what
    `item.iter_markers()` per item would find, without walking the shared parents again."""
    names: set[str] = set()
    seen: set[int] = set()
    for item in items:
        node: pytest.Item | pytest.Collector | None = item
        while node is not None and id(node) not in seen:
            seen.add(id(node))
            for mark in node.own_markers:
                names.add(mark.name)
            node = node.parent
    return names


def uses_dsakit(items: list[pytest.Item], names: set[str]) -> bool:
    """Does a collected test ask for a dsakit fixture or carry a dsakit marker (`names`: the
    items' `marker_names`)?"""
    return (any(name.startswith("dsakit_") for name in names)
            or any(not FIXTURES.isdisjoint(getattr(item, "fixturenames", ())) for item in items))


def _validated(item: pytest.Item, raw: tuple[str, ...]) -> tuple[str, ...]:
    from dsakit.gates.table import validate_codes

    try:
        return validate_codes(raw)
    except UsageError as error:
        raise pytest.UsageError(f"{item.nodeid}: {error}") from None


def _own_codes(node: pytest.Item | pytest.Collector) -> tuple[str, ...]:
    codes: tuple[str, ...] = ()
    for mark in node.own_markers:  # a loop, not a generator: this runs for every item and parent
        if mark.name == MARKER:
            codes += mark.args
    return codes


def apply_gates(session: GateSession, items: list[pytest.Item]) -> set[str]:
    """pytest_collection_modifyitems: closed gates become skip markers, so --collect-only and -ra
    show the reason, and the skip inventory knows the gate codes. Returns the items' marker names
    (`marker_names`); `session.inventory.used` then says whether a collected test uses dsakit."""
    names = marker_names(items)
    if not session.inventory.used:
        session.inventory.used = uses_dsakit(items, names)
    if MARKER not in names:
        return names
    from dsakit.gates.table import closed_reasons, never_open_explanation

    warned: set[tuple[str, ...]] = set()
    # one evaluation per distinct code tuple: a matrix repeats a few tuples over thousands of
    # items, and the device and this machine's environment are fixed for the pass (module and
    # SGLang probes stat files each time; bench/bench_kit_overhead.py)
    verdicts: dict[tuple[str, ...], tuple[str | None, list[Reason]]] = {}
    validated: dict[tuple[str, ...], tuple[str, ...]] = {}  # as written -> canonical (once per tuple)
    # the codes of each parent chain, once per parent: what `item.iter_markers(MARKER)` finds
    # (closest node first), without walking the shared parents again for every item
    inherited: dict[int, tuple[str, ...]] = {}

    def chain_codes(node: pytest.Item | pytest.Collector | None) -> tuple[str, ...]:
        if node is None:
            return ()
        found = inherited.get(id(node))
        if found is None:
            found = inherited[id(node)] = _own_codes(node) + chain_codes(node.parent)
        return found

    for item in items:
        raw = _own_codes(item) + chain_codes(item.parent)
        if not raw:
            continue
        try:
            codes = validated[raw]
        except KeyError:
            codes = validated[raw] = _validated(item, raw)
        except TypeError:  # an unhashable argument: refused by name
            codes = _validated(item, raw)
        session.inventory.declare(item.nodeid, codes)
        verdict = verdicts.get(codes)
        if verdict is None:
            verdict = verdicts[codes] = (never_open_explanation(codes), closed_reasons(codes, session.device))
        explanation, reasons = verdict
        if explanation is not None and codes not in warned:
            warned.add(codes)
            item.warn(DsakitGateWarning(explanation))
        if reasons:
            item.add_marker(pytest.mark.skip(reason=format_reasons(reasons)))
            session.inventory.plan(item.nodeid, reasons)
    return names
