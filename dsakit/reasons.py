"""Reasons as data: why a test skipped, why a configuration is invalid, why a contract failed.

A reason has a stable machine code (grouped and counted by reports) and a sentence a person can
act on: what is missing and what would cover the case instead. Never imports torch or SGLang.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any


class Reason:
    """A frozen record (equal, hashable and shown by its fields, as a frozen dataclass). A plain
    class, not a dataclass: creating a dataclass compiles its generated methods, ~3-5 M instructions
    in every run that loads it (bench/README.md, "Kit overhead")."""

    __match_args__ = ("code", "message")

    def __init__(self, code: str, message: str) -> None:
        self.__dict__.update(code=code, message=message)

    code: str
    message: str

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}(code={self.code!r}, message={self.message!r})"

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
