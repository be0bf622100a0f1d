"""The simulation's watchdog: no test runs forever under a simulated device.

Owns stopping a test that outlives `--dsakit-simulation-timeout` (a kernel sized for the simulated
GPU that hangs on this one, a build that never ends): the test fails with `SimulationTimeout`
naming the call in flight; where the main thread cannot be interrupted (blocked inside a kernel or
a driver call) the process is ended after the message, its child processes first (under xdist the
worker is replaced and the test reported crashed). Must not run where no device is simulated.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Any

import pytest

from dsakit.mocks.call_site import shown_path

GRACE_S = 10.0  # after the timeout: how long an interrupted test has to unwind before the process ends
_MACHINERY = ("/_pytest/", "/pluggy/", "/dsakit/", "/threading.py", "/unittest/")


class SimulationTimeout(RuntimeError):
    """A test ran past --dsakit-simulation-timeout under a simulated device. Raised asynchronously in
    the main thread (a class without arguments): its message is the watchdog's last."""

    pending = "a test ran past --dsakit-simulation-timeout"

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else SimulationTimeout.pending


def in_flight(frame: Any) -> str:
    """The call the main thread is in: its innermost frame, the innermost frames of an installed
    package (the kernel library, SGLang) and of the test's own code when they differ, and the
    command of a subprocess it waits for (a JIT build's compiler)."""
    stack = traceback.extract_stack(frame)
    if not stack:
        return "<no Python frame>"
    inner = stack[-1]
    package = next((f for f in reversed(stack) if ("-packages/" in f.filename or "/sglang/" in f.filename)
                    and not any(part in f.filename for part in _MACHINERY)), None)
    own = next((f for f in reversed(stack) if not any(part in f.filename for part in _MACHINERY)
                and "-packages/" not in f.filename and "/lib/python" not in f.filename), None)
    shown = [inner]
    for extra in (package, own):
        if extra is not None and all(extra is not f for f in shown):
            shown.append(extra)
    text = ", called from ".join(f"{shown_path(f.filename)}:{f.lineno} in {f.name}" for f in shown)
    command = _waited_command(frame)
    return f"{text}; waiting for: {command}" if command else text


def _waited_command(frame: Any) -> str | None:
    """The argv of the subprocess a frame of the stack waits for (subprocess.Popen's own frames)."""
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_filename.endswith("subprocess.py") else None
        args = getattr(owner, "args", None)
        if args:
            words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
            return " ".join(words[:6]) + (" ..." if len(words) > 6 else "")
        frame = frame.f_back
    return None


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Watchdog:
    """Armed at each test's start, disarmed at its end; one daemon thread per process."""

    def __init__(self, timeout_s: float, device_key: str, config: pytest.Config | None = None) -> None:
        self.config = config
        self.timeout_s = timeout_s
        self.device_key = device_key
        self._lock = threading.Lock()
        self._test: tuple[str, float] | None = None
        self._fired: str | None = None
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dsakit-simulation-watchdog", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        with self._lock:
            self._test, self._fired = (nodeid, time.monotonic()), None

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        with self._lock:
            self._test = None

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                test = self._test
            if test is None or time.monotonic() - test[1] < self.timeout_s:
                continue
            self._fire(test[0])

    def _fire(self, nodeid: str) -> None:
        frame = sys._current_frames().get(self._main or 0)
        try:
            where = in_flight(frame) if frame is not None else "<unknown>"
        except Exception as error:  # noqa: BLE001 - the test must still be stopped
            where = f"<the stack could not be read: {error!r}>"
        message = (f"{nodeid} ran longer than --dsakit-simulation-timeout={self.timeout_s:g} s under simulated "
                   f"{self.device_key}; stopped. In flight: {where}")
        with self._lock:
            if self._test is None or self._test[0] != nodeid:
                return
            self._fired = message
            self._test = (nodeid, float("inf"))  # fired once per test
        _raise_in_main(self._main, message)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            time.sleep(0.2)
            with self._lock:
                if self._test is None or self._test[0] != nodeid:
                    return  # the test unwound and ended: it fails with SimulationTimeout
        self._end_process(message)

    def _end_process(self, message: str) -> None:
        """The main thread is blocked in C (a kernel, a driver call): end the process, children first."""
        for pid in _descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
        capture = self.config.pluginmanager.getplugin("capturemanager") if self.config is not None else None
        if capture is not None:  # pytest holds file descriptor 2: the message must reach the real one
            try:
                capture.suspend_global_capture(in_=False)
            except Exception:  # noqa: BLE001 - the process ends either way
                pass
        stream = sys.__stderr__
        if stream is not None:
            stream.write(f"\ndsakit: {message}; the main thread did not return within {GRACE_S:g} s, so this "
                         "process ends (under xdist the worker is replaced and the test reported crashed)\n")
            stream.flush()
        os._exit(1)


def _raise_in_main(ident: int | None, message: str) -> None:
    """SimulationTimeout in the main thread at its next Python instruction (a blocked C call first returns)."""
    import ctypes

    SimulationTimeout.pending = message
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident or 0), ctypes.py_object(SimulationTimeout))


def checked_timeout(timeout: int) -> int:
    """--dsakit-simulation-timeout, refused when negative (also in an xdist controller, which runs no test)."""
    if timeout < 0:
        raise pytest.UsageError(f"--dsakit-simulation-timeout {timeout}: expected a number of seconds >= 0 "
                                "(0: never stop a test)")
    return timeout


def start(config: pytest.Config, device_key: str, timeout: int) -> Watchdog | None:
    """This process's watchdog, or None when the timeout is 0."""
    return Watchdog(float(timeout), device_key, config) if timeout else None
