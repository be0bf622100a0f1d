"""Reasons as data: why a test skipped, why a configuration is invalid, why a contract failed.

A reason has a stable machine code (grouped and counted by reports) and a sentence a person can
act on: what is missing and what would cover the case instead. Never imports torch or SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}
