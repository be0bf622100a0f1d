"""Reasons as data: why a test skipped, why a configuration is invalid, why a contract failed.

A reason has a stable machine code (grouped and counted by reports) and a sentence a person can
act on: what is missing and what would cover the case instead. Also the base every declared record
of dsakit shares (`FrozenRecord`: frozen, equal and hashed by its fields). Never imports torch or
SGLang.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any


class FrozenRecord:
    """The base of dsakit's declared records (a reason, a device entry, a gate, a contract entry,
    ...): fields set once in `__init__` (`self.__dict__.update(...)`), then frozen; equal, hashed and
    shown by its fields, in the order `__match_args__` names them, as a frozen dataclass (a record
    may compare fewer: `_compared_fields`). A plain class, not a dataclass: creating a dataclass
    compiles its generated methods, ~3-5 M instructions in every run that loads it (bench/README.md,
    "Kit overhead")."""

    __match_args__: tuple[str, ...] = ()
    _compared_fields: tuple[str, ...] | None = None  # None: every field of __match_args__

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def _compared(self) -> tuple[Any, ...]:
        fields = self.__dict__
        return tuple([fields[name] for name in self._compared_fields or self.__match_args__])

    def __repr__(self) -> str:
        fields = self.__dict__
        shown = ", ".join(f"{name}={fields[name]!r}" for name in self.__match_args__)
        return f"{type(self).__qualname__}({shown})"


class Reason(FrozenRecord):
    """Why: a stable code and a sentence (a frozen record)."""

    __match_args__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        self.__dict__.update(code=code, message=message)

    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
