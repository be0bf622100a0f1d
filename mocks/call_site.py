"""Where code is: a frame as `file:line in qualname`, with site-packages prefixes stripped.

Owns the one spelling of a reading site that violations, reads, simulated kernel launches, kernel
contract violations and the simulation's watchdog name, and finding the first frame outside some
machinery (who called the kernel).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any


def call_site(frame: Any) -> str:
    """`sglang/srt/...py:781 in DeepseekSparseAttnBackend.__init__` for a frame (or \"<unknown>\")."""
    if frame is None:
        return "<unknown>"
    filename = frame.f_code.co_filename
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    qualname = getattr(frame.f_code, "co_qualname", frame.f_code.co_name)
    return f"{filename}:{frame.f_lineno} in {qualname}"


def short_path(path: str) -> str:
    """A file of an installed package from the package down; one of an SGLang tree elsewhere (on
    PYTHONPATH) from `sglang/` down; anything else unchanged."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    index = path.rfind("/sglang/")
    return path[index + 1:] if index >= 0 else path


def shown_path(path: str) -> str:
    """A path as a site names it: from the run's folder for a file under it (a test file), else as
    `short_path` gives it (`sglang/srt/...`)."""
    here = os.getcwd() + os.sep
    return path[len(here):] if path.startswith(here) else short_path(path)


def site_outside(machinery: Sequence[str], *, depth: int = 1, function: bool = False) -> str:
    """`file:line` (`... in name` with `function`) of the first caller frame whose file path holds
    none of `machinery`, starting `depth` frames above the caller of this function."""
    frame: Any = sys._getframe(depth + 1)
    while frame is not None and any(part in frame.f_code.co_filename for part in machinery):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    site = f"{shown_path(frame.f_code.co_filename)}:{frame.f_lineno}"
    return f"{site} in {frame.f_code.co_name}" if function else site
