"""A run's private folders (the xdist hand-over files, the node lock): under pytest's basetemp.

Owns `private_dir`. A controller killed before its unconfigure (SIGTERM from a CI cancel, SIGKILL,
the OOM killer) then leaves them where pytest's own retention removes them, never loose in $TMPDIR.
Must not create anything for a run that does not ask for one; the caller removes it at unconfigure.
"""

from __future__ import annotations

import tempfile
from typing import Any


def private_dir(config: Any, prefix: str) -> str:
    """A new folder `<basetemp>/<prefix>-XXXXXXXX` (mkdtemp: private, no `current` link that
    would dangle once it is removed); with pytest's tmp_path plugin off (`-p no:tmpdir`) or its
    basetemp unusable, in $TMPDIR."""
    factory = getattr(config, "_tmp_path_factory", None)  # what xdist itself uses for its workers' basetemps
    if factory is not None:
        try:
            return tempfile.mkdtemp(prefix=f"{prefix}-", dir=factory.getbasetemp())
        except OSError:
            pass
    return tempfile.mkdtemp(prefix=f"{prefix}-")
