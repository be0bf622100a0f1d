"""Output paths the user names (reports, JSON, kept logs): checked before any run starts.

Owns: `writable_file` / `writable_dir`, the one validator for a path dsakit will write to; a bad
one is a `UsageError` naming the path and what is in the way. Must not create the file itself.
"""

from __future__ import annotations

import os
from pathlib import Path

from dsakit.errors import UsageError


def _blocker(path: Path) -> str | None:
    """Why a directory cannot exist at `path` (a file in the way, no permission), or None."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a directory"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f"{parent} is not writable"
            return None
    return None


def writable_dir(path: str | os.PathLike[str], what: str) -> Path:
    """`path` as a directory dsakit can create or write into; UsageError otherwise."""
    target = Path(path)
    why = _blocker(target)
    if why:
        raise UsageError(f"{what} {str(path)!r} cannot be used: {why}; pass a directory you can write")
    return target


def writable_file(path: str | os.PathLike[str], what: str) -> Path:
    """`path` as a file dsakit can write (its directory creatable, not itself a directory)."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{what} {str(path)!r} is a directory; pass a file path")
    if target.exists() and not os.access(target, os.W_OK):
        raise UsageError(f"{what} {str(path)!r} is not writable; pass a file path you can write")
    why = _blocker(target.parent)
    if why:
        raise UsageError(f"{what} {str(path)!r} cannot be written: {why}; pass a file path you can write")
    return target
