"""The simulation's watchdog: no test runs forever under a simulated device.

Owns stopping a test that outlives `--dsakit-simulation-timeout` (a kernel sized for the simulated
GPU that hangs on this one, a build that never ends): the test fails with `SimulationTimeout`
naming the call in flight and the run goes on. A signal to the main thread interrupts a sleep or a
wait for a subprocess (the subprocess is ended); where the main thread still does not return
(blocked inside a kernel or a driver call) the process is ended after the message, its child
processes first (under xdist the worker is replaced and the test reported crashed). The time a test
spends in a JIT build (`BUILD_FRAMES`: flashinfer, SGLang, torch, tvm-ffi, Triton, DeepGEMM) does not
count, up to `BUILD_LIMIT_S`: a simulated plan may build what the plain run never did. Must not run
where no device is simulated.
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
# A JIT build for this GPU is progress, not a hang: a simulated plan can need modules the plain run
# never built (on the H200, contracts/ under sm103 spent > 150 s in flashinfer's JitSpec.build_and_load,
# its workers queued on the build's file lock). Its time does not count toward the timeout, up to
# BUILD_LIMIT_S per test, after which the build itself is stopped as any call.
BUILD_LIMIT_S = 1800.0
BUILD_FRAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("/flashinfer/jit/core.py", ("build_and_load", "build", "load")),
    ("/sglang/kernels/jit/utils/compile/loader.py", ("load_jit",)),
    ("/torch/utils/cpp_extension.py", ("load", "load_inline", "_jit_compile")),
    ("/tvm_ffi/cpp/", ()),  # any function: SGLang's JIT kernels build through it
    ("/triton/compiler/compiler.py", ("compile",)),
    ("/deep_gemm/", ("build", "compile")),
)
_MACHINERY = ("/_pytest/", "/pytest/", "/pluggy/", "/xdist/", "/execnet/", "/dsakit/", "/threading.py", "/unittest/")
# the signal that interrupts the main thread: Python raises from its handler once a blocking call
# (a sleep, a wait for a subprocess) returns EINTR; a real-time one where the OS has them (nothing
# else claims it), else SIGUSR2
INTERRUPT = getattr(signal, "SIGRTMIN", signal.SIGUSR2) + (7 if hasattr(signal, "SIGRTMIN") else 0)


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


def building(frame: Any) -> str | None:
    """The JIT build the stack is in ("flashinfer/jit/core.py:305 in build_and_load"), or None."""
    while frame is not None:
        code = frame.f_code
        path = code.co_filename.replace(os.sep, "/")
        for part, functions in BUILD_FRAMES:
            if part in path and (not functions or code.co_name in functions):
                return f"{shown_path(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        frame = frame.f_back
    return None


def _waited_command(frame: Any) -> str | None:
    """The argv of the subprocess a frame of the stack waits for (subprocess.Popen's own frames)."""
    owner = _waited_popen(frame)
    args = getattr(owner, "args", None)
    if not args:
        return None
    words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    return " ".join(words[:6]) + (" ..." if len(words) > 6 else "")


def _waited_popen(frame: Any) -> Any:
    """The subprocess.Popen a frame of the stack waits for, or None."""
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_filename.endswith("subprocess.py") else None
        if getattr(owner, "args", None) and isinstance(getattr(owner, "pid", None), int):
            return owner
        frame = frame.f_back
    return None


def _kill_tree(pid: int) -> None:
    """SIGKILL to a process and its descendants (children first): nothing outlives a stopped test."""
    for target in [*reversed(_descendants(pid)), pid]:
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            continue


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
        self._raised = False  # the fired message was raised in the main thread (once per test)
        self.build_seconds: dict[str, float] = {}  # per test: the seconds its JIT builds did not count
        self._previous: Any = None  # the interrupt signal's handler before ours (restored at close)
        self._signalled = self._install_handler()
        self._thread = threading.Thread(target=self._watch, name="dsakit-simulation-watchdog", daemon=True)
        self._thread.start()

    def _install_handler(self) -> bool:
        """Our handler for INTERRUPT (only the main thread may install one); False: none installed,
        the watchdog falls back on an asynchronous exception (a sleep then runs to its end)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        try:
            self._previous = signal.signal(INTERRUPT, self._on_interrupt)
        except (ValueError, OSError):
            return False
        return True

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        __tracebackhide__ = True  # the failure shows the test's line, not this handler
        with self._lock:
            message = self._fired if not self._raised else None
            self._raised = self._raised or message is not None
        if message is not None:
            raise SimulationTimeout(message)
        if callable(self._previous):  # someone else's signal: theirs to handle
            self._previous(signum, frame)

    def close(self) -> None:
        self._stop.set()
        if self._signalled and threading.current_thread() is threading.main_thread():
            self._signalled = False
            signal.signal(INTERRUPT, self._previous if self._previous is not None else signal.SIG_DFL)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        with self._lock:
            self._test, self._fired, self._raised = (nodeid, time.monotonic()), None, False

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        with self._lock:
            self._test, self._fired = None, None

    def _watch(self) -> None:
        last = time.monotonic()
        built: dict[str, float] = {}  # per test: the seconds its JIT builds took so far
        while not self._stop.wait(1.0):
            now, tick = time.monotonic(), time.monotonic() - last
            last = now
            with self._lock:
                test = self._test
            if test is None:
                built.clear()
                continue
            build = self._building()
            if build is not None and built.get(test[0], 0.0) + tick <= BUILD_LIMIT_S:
                built[test[0]] = built.get(test[0], 0.0) + tick
                with self._lock:  # the build's time does not count: the test's clock moves on
                    if self._test is not None and self._test[0] == test[0] and self._test[1] != float("inf"):
                        self._test = (test[0], self._test[1] + tick)
                        self.build_seconds[test[0]] = built[test[0]]
                continue
            if now - test[1] < self.timeout_s:
                continue
            self._fire(test[0])

    def _building(self) -> str | None:
        frame = sys._current_frames().get(self._main or 0)
        try:
            return building(frame)
        except Exception:  # noqa: BLE001 - a stack that cannot be read is not a build
            return None

    def _fire(self, nodeid: str) -> None:
        frame = sys._current_frames().get(self._main or 0)
        waited = None
        try:
            where = in_flight(frame) if frame is not None else "<unknown>"
            waited = _waited_popen(frame)
        except Exception as error:  # noqa: BLE001 - the test must still be stopped
            where = f"<the stack could not be read: {error!r}>"
        message = (f"{nodeid} ran longer than --dsakit-simulation-timeout={self.timeout_s:g} s under simulated "
                   f"{self.device_key}; stopped. In flight: {where}")
        with self._lock:
            if self._test is None or self._test[0] != nodeid:
                return
            self._fired = message
            self._test = (nodeid, float("inf"))  # fired once per test
        if self._signalled:
            signal.pthread_kill(self._main or 0, INTERRUPT)  # a sleep or a wait returns, the handler raises
        else:
            _raise_in_main(self._main, message)
        if waited is not None:  # the test unwinds without it: it must not outlive the test
            _kill_tree(waited.pid)
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
        for written in (sys.stdout, sys.__stdout__):  # what the terminal reporter wrote so far
            try:
                if written is not None:
                    written.flush()
            except Exception:  # noqa: BLE001 - the process ends either way
                pass
        stream = sys.__stderr__
        if stream is not None:
            stream.write(f"\ndsakit: {message}; the main thread did not return within {GRACE_S:g} s, so this "
                         "process ends (under xdist the worker is replaced and the test reported crashed)\n")
            so_far = self._outcomes_so_far()
            if so_far:
                stream.write(f"dsakit: before the stop: {so_far}, then 1 stopped\n")
            stream.flush()
        os._exit(1)

    def _outcomes_so_far(self) -> str:
        """The terminal reporter's counts of the tests that ended before the stop ("3 passed, 1 failed")."""
        reporter = self.config.pluginmanager.getplugin("terminalreporter") if self.config is not None else None
        stats = getattr(reporter, "stats", None) or {}
        counts = [(key, sum(1 for r in reports if getattr(r, "when", "call") in ("call", "setup", "teardown")
                            and (key != "passed" or getattr(r, "when", "call") == "call")))
                  for key, reports in stats.items() if key]
        return ", ".join(f"{n} {key}" for key, n in counts if n)


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
