"""Every file dsakit writes for the user (reports, JSON, markdown, JUnit, logs, cache tarballs).

Owns: `output_file` (checks a path before any run starts: empty, `~`, a directory, a parent that
cannot be created, a special file) and `OutputFile`, the one writer (text, bytes, JSON in one layout):
atomic for regular files, through for character devices and FIFOs, never replacing a special file
or a symlink; a failed write is an `OutputError` naming the path. `writable_dir` checks a directory.
Must not write anything while checking.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from dsakit.errors import UsageError


class OutputError(UsageError):
    """A requested output could not be written (exit 2 on the command line, 4 inside pytest)."""


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


def _expanded(path: str | os.PathLike[str], what: str, kind: str) -> Path:
    text = os.fspath(path)
    if not str(text).strip():
        raise UsageError(f"{what} is empty: pass a {kind} path (for example {what} "
                         f"{'report.json' if kind == 'file' else 'out'})")
    return Path(os.path.expanduser(text))


def writable_dir(path: str | os.PathLike[str], what: str) -> Path:
    """`path` (with `~` expanded) as a directory dsakit can create or write into; UsageError otherwise."""
    target = _expanded(path, what, "directory")
    if target.exists() and not target.is_dir():
        raise UsageError(f"{what} {os.fspath(path)!r} cannot be used: it is a file, not a directory; "
                         "pass a directory you can write")
    why = _blocker(target)
    if why:
        raise UsageError(f"{what} {os.fspath(path)!r} cannot be used: {why}; pass a directory you can write")
    return target


_THROUGH = {stat.S_IFCHR: "a character device", stat.S_IFIFO: "a FIFO"}
_REFUSED = {stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


@dataclass(frozen=True)
class OutputFile:
    """A checked output path. `target`: the file written (a symlink's target); `through`: written
    in place (a character device such as /dev/null, or a FIFO), never replaced."""

    given: str  # as the user spelled it, for messages
    what: str  # the option that named it ("--json")
    target: Path
    through: bool = False

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def write_json(self, data: Any) -> None:
        """Every JSON file dsakit writes (reports, verdicts, stamps): 2-space indent, keys in the
        order built, one trailing newline."""
        self.write_text(json.dumps(data, indent=2) + "\n")

    def write_bytes(self, data: bytes) -> None:
        with self.open() as out:
            out.write(data)

    @contextlib.contextmanager
    def open(self) -> Iterator[BinaryIO]:
        """A binary file to write; on a clean exit it becomes `target` at once (a reader sees the
        old file or the new one), on an exception nothing is left behind. OSError -> OutputError."""
        try:
            checked = output_file(self.given, self.what)  # still what it was at the start?
        except UsageError as error:
            raise OutputError(f"not written (the path changed during the run): {error}") from None
        tmp: str | None = None
        try:
            if checked.through:
                with checked._open_through() as out:
                    yield out
                return
            checked.target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=checked.target.parent, prefix=f".{checked.target.name}.",
                                       suffix=".tmp")
            with os.fdopen(fd, "wb") as out:
                yield out
            os.chmod(tmp, _mode_for(checked.target))
            os.replace(tmp, checked.target)
            tmp = None
        except OSError as error:
            raise OutputError(f"{self.what} {self.given}: not written: {error.strerror or error}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    @contextlib.contextmanager
    def _open_through(self) -> Iterator[BinaryIO]:
        try:  # a FIFO with no reader would block forever: ENXIO instead
            fd = os.open(self.target, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno == errno.ENXIO:
                raise OutputError(f"{self.what} {self.given}: not written: the FIFO has no reader; "
                                  "start its reader first, or pass a regular file path") from None
            raise
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as out:
            yield out


def _mode_for(target: Path) -> int:
    """An existing file keeps its permissions; a new one gets the umask's (mkstemp makes 0600)."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def output_file(path: str | os.PathLike[str], what: str) -> OutputFile:
    """`path` checked as a file dsakit will write, before anything runs; UsageError naming what is
    in the way and what would be right. Creates nothing."""
    given = os.fspath(path)
    target = _expanded(path, what, "file")
    right = "pass a file path you can write"
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # written through: the link stays a link
    try:
        mode = target.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None  # the parent is checked below
    except OSError as error:
        raise UsageError(f"{what} {given!r} cannot be written: {error.strerror or error}; {right}") from None
    if mode is not None:
        kind = stat.S_IFMT(mode)
        if stat.S_ISDIR(mode):
            raise UsageError(f"{what} {given!r} is a directory; pass a file path (for example {given}/report.json)")
        if kind in _REFUSED:
            raise UsageError(f"{what} {given!r} is {_REFUSED[kind]}: dsakit writes regular files, "
                             f"character devices and FIFOs only; {right}")
        if kind in _THROUGH:
            if not os.access(target, os.W_OK):
                raise UsageError(f"{what} {given!r} ({_THROUGH[kind]}) is not writable; {right}")
            return OutputFile(given, what, target, through=True)
        if not stat.S_ISREG(mode):
            raise UsageError(f"{what} {given!r} is not a regular file; {right}")
        if not os.access(target, os.W_OK):
            raise UsageError(f"{what} {given!r} is not writable; {right}")
    why = _blocker(target.parent)  # a missing parent is created when the file is written
    if why:
        raise UsageError(f"{what} {given!r} cannot be written: {why}; {right}")
    return OutputFile(given, what, target)
