"""What is active in this process: the pytest runs dsakit serves and the device SGLang's probes
answer as, each a stack (innermost last: pytester nests runs in one process, simulations nest).

Owns the two stacks and nothing else. A run's state is its `DsakitSession` (dsakit.session), which
pushes itself at configure and leaves at unconfigure; a simulation pushes its device
(dsakit.simulation). Read by what runs without a config: `dsakit.require` (the gate session), a
`MockModelRunner` (the contract; the device a violation names), the `sglang:import-chain` gate.
Imports nothing: asking costs a list lookup.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # types only: creating a Protocol class costs every run that loads this leaf
    from typing import Protocol

    class Run(Protocol):
        """What the lower wings read of a run (its DsakitSession): each reader narrows the part it owns."""

        @property
        def pid(self) -> int:
            """The process that configured the run (a forked child inherits the stack, not the run)."""

        @property
        def contract(self) -> object:
            """The suite's contract (dsakit.contracts.schema.Contract), None: dsakit's own."""

        @property
        def gates(self) -> object:
            """The gate session (dsakit.gates.marks.GateSession)."""

    class Device(Protocol):
        """A simulated device as the strict mock names it (dsakit.gates.device_model.DeviceModel)."""

        @property
        def key(self) -> str: ...

        @property
        def name(self) -> str: ...


_RUNS: list[Run] = []
_DEVICES: list[Device] = []


def run() -> Run | None:
    """The innermost configured pytest run, or None (a forked child still sees its parent's run)."""
    return _RUNS[-1] if _RUNS else None


def run_in_this_process() -> Run | None:
    """The innermost run, where this process configured it (not a child that inherited it)."""
    found = _RUNS[-1] if _RUNS else None
    return found if found is not None and found.pid == os.getpid() else None


def enter_run(session: Run) -> None:
    _RUNS.append(session)


def leave_run(session: Run) -> None:
    """`session` leaves the stack wherever it is (an inner run that failed to configure may still sit above)."""
    for index in range(len(_RUNS) - 1, -1, -1):
        if _RUNS[index] is session:
            del _RUNS[index]
            return


def simulated_device() -> Device | None:
    """The device SGLang's probes answer as right now (the innermost simulation), or None."""
    return _DEVICES[-1] if _DEVICES else None


def enter_device(device: Device) -> None:
    _DEVICES.append(device)


def leave_device() -> None:
    _DEVICES.pop()
