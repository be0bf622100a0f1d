"""Where code is: a frame as `file:line in qualname`, with site-packages prefixes stripped.

Owns the one spelling of a reading site that violations, reads and simulated kernel launches name.
"""

from __future__ import annotations

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
