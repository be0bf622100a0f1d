"""Exceptions dsakit raises. Never imports torch or SGLang.

`UsageError` is bad input from the user (exit code 2 on the command line); `ContractViolation`
is a read or write of a model-runner attribute outside the role contract. It subclasses
`AttributeError` so that `getattr(runner, name, default)` and `hasattr` keep their meaning.
"""

from __future__ import annotations


class DsakitError(Exception):
    """Base of dsakit's own errors."""


class UsageError(DsakitError, ValueError):
    """Bad input: names what is wrong and what would be right."""


class UnparsableSource(UsageError):
    """A source file that does not parse (or decode): `what` names `file:line` and the problem;
    the message adds what would be right, which a caller with other advice may replace."""

    def __init__(self, what: str, advice: str) -> None:
        super().__init__(f"{what}; {advice}")
        self.what = what


class ContractViolation(AttributeError):
    """An attribute access on a strict mock that the role contract does not allow."""

    def __init__(
        self, message: str, *, attribute: str, code: str, reading_site: str = "", device: str = ""
    ) -> None:
        super().__init__(message)
        self.attribute = attribute
        self.code = code
        self.reading_site = reading_site
        self.device = device  # the simulated device whose branch read it ("" when not simulating)


class KernelContractViolation(DsakitError, ValueError):
    """A kernel entry point was called with arguments its kernel does not accept (a negative padded
    length, a missing v2 plan, ...): raised before the launch, under `--dsakit-kernel-contracts`."""

    def __init__(self, message: str, *, kernel: str, argument: str, row: int | None, value: object,
                 site: str) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.argument = argument
        self.row = row
        self.value = value
        self.site = site


class ArchRuleBreach(DsakitError, AssertionError):
    """Under a simulated device, a kernel entry point was called with arguments the simulated arch's
    build of the kernel refuses (its rule in `dsakit.simulation.arch_rules`) though this GPU's build
    accepts them: a real simulated device fails here, so the test fails (raised before the launch)."""

    def __init__(self, message: str, *, kernel: str, argument: str, site: str) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.argument = argument
        self.site = site
