"""What the `selection_snapshot` fixture needs installed (the `snapshot` extra: syrupy 7, numpy),
checked without importing either. Must not import syrupy, numpy or torch."""

from __future__ import annotations

import importlib.metadata
import importlib.util

SYRUPY_MAJOR = 7  # the amber extension API and serializer versions dsakit's goldens use


def missing_snapshot_requirements() -> str | None:
    """A phrase naming what is missing or too old, or None when the extra is satisfied."""
    if importlib.util.find_spec("syrupy") is None:
        return "syrupy (not installed)"
    try:
        version = importlib.metadata.version("syrupy")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    major = version.split(".", 1)[0]
    if major.isdigit() and int(major) < SYRUPY_MAJOR:
        return f"syrupy>={SYRUPY_MAJOR} (found {version})"
    if importlib.util.find_spec("numpy") is None:
        return "numpy (not installed)"
    return None
