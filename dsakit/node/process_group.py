"""Child runs in a process group of their own, ended with everything they forked.

Owns: running a command in a new session (output to a file, not a pipe), ending its group after it
exits, times out or is interrupted (SIGINT first, so a pytest child removes its own temp folders,
then SIGTERM, then SIGKILL), the groups live in this process, and SIGTERM raised as SystemExit while
a dsakit command runs, so its `finally` blocks (a removed workdir) run. Never imports torch or pytest.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from dsakit.errors import UsageError

GRACE_S = 3.0  # how long each signal gets before the next, stronger one
TERMINATED = 128 + signal.SIGTERM  # the exit status of a command ended by SIGTERM

_live: set[int] = set()  # process groups started here and not yet ended
_lock = threading.Lock()
_stopping = threading.Event()  # set by stop_all(): no new child starts


class Interrupted(Exception):
    """A child was not started (or was ended) because the command is being interrupted."""


@dataclass(frozen=True)
class GroupRun:
    returncode: int
    output: str  # stdout and stderr, interleaved as written
    timed_out: bool
    leftovers: bool  # processes of the group outlived the command's own exit


def check_timeout(timeout: float | None) -> None:
    """A --timeout: a positive, finite number of seconds, or None (no limit)."""
    if timeout is not None and not (timeout > 0 and math.isfinite(timeout)):
        raise UsageError(f"--timeout must be a positive number of seconds, got {timeout:g}"
                         + ("; for no limit leave --timeout out" if timeout == math.inf else ""))


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def end_group(pgid: int, signals: Sequence[signal.Signals] = (signal.SIGTERM,)) -> bool:
    """End every process of the group `pgid`: each of `signals` in turn, a grace period apart, then
    SIGKILL. True when any process was still there."""
    if not _alive(pgid):
        return False
    for sig in signals:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            if not _alive(pgid):
                return True
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return True


_INTERRUPT = (signal.SIGINT, signal.SIGTERM)  # a pytest child cleans up on SIGINT, not on SIGTERM


def run_in_own_group(command: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                     timeout: float | None = None) -> GroupRun:
    """Run `command` in a new session, so its process group holds it and every child it forks;
    the group is ended after the command exits, when it times out, and on Ctrl-C or SIGTERM (the
    new session does not get the terminal's SIGINT). Raises Interrupted when stop_all() ran."""
    if _stopping.is_set():
        raise Interrupted(f"not started (interrupted): {' '.join(command)}")
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                cwd=cwd, env=None if env is None else dict(env), start_new_session=True)
        with _lock:
            _live.add(proc.pid)
        timed_out = False
        try:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                end_group(proc.pid, _INTERRUPT)
                code = proc.wait()
            leftovers = end_group(proc.pid)
        except BaseException:
            end_group(proc.pid, _INTERRUPT)
            raise
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            with _lock:
                _live.discard(proc.pid)
        out.seek(0)
        output = out.read().decode("utf-8", errors="replace")
    if _stopping.is_set():
        raise Interrupted(f"ended (interrupted): {' '.join(command)}")
    return GroupRun(code, output, timed_out, leftovers)


def stop_all() -> None:
    """Start no new child and end every live group (the threads waiting on them then return)."""
    _stopping.set()
    with _lock:
        groups = list(_live)
    for pgid in groups:
        end_group(pgid, _INTERRUPT)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(TERMINATED)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Around a command that starts children: SIGTERM raises SystemExit(143) in the main thread
    (as Ctrl-C raises KeyboardInterrupt), and on either every live group is ended. The previous
    SIGTERM handler and the module's state are restored on the way out."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    try:
        yield
    except BaseException:
        stop_all()
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        _stopping.clear()
