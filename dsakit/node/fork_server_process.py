"""The fork server process: preload torch and SGLang without CUDA, then fork one xdist worker per client.

Owns: the CUDA-guarded preload (single-threaded, or it refuses), the serve loop (stdio fds in over a
unix socket, fork, reap, exit status back) and turning a forked child into execnet's `python -c`.
Run by path (`python fork_server_process.py DIR MODULE...`) so it imports no dsakit and no pytest:
those must load in the worker, where assertion rewriting applies. Standard library only.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

SOCKET_NAME = "s"  # short: a unix socket path holds at most 107 bytes
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"
FORKED_ENV = "DSAKIT_FORKED_FROM"  # set in a forked worker: the server's pid


class CudaTouched(RuntimeError):
    """Raised by the guarded `torch.cuda._lazy_init` while the server preloads."""


@dataclass
class Preload:
    loaded: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    tainted: list[str] = field(default_factory=list)  # imported although CUDA was refused inside
    seconds: float = 0.0


class _TorchCudaWatcher:
    """A meta-path finder: guards `torch.cuda` the moment it has been executed, so a module that
    imports torch and initialises CUDA in the same import is caught too."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "torch.cuda":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            _guard(module)

        loader.exec_module = exec_module
        return spec


@contextlib.contextmanager
def _cuda_guard(capability: tuple[int, int] | None) -> Iterator[None]:
    """While preloading: NVML answers `torch.cuda.is_available()` (no cuInit); with the node's
    `capability` (every GPU's, from the controller's NVML probe) `current_device()` is 0 and
    `get_device_capability()` answers it, as CUDA would; anything else that would create a CUDA
    context raises CudaTouched."""
    had_env = os.environ.get(NVML_CHECK_ENV)
    os.environ[NVML_CHECK_ENV] = "1"
    _CAPABILITY[:] = [capability] if capability else []
    watcher = _TorchCudaWatcher()
    sys.meta_path.insert(0, watcher)
    if "torch.cuda" in sys.modules:
        _guard(sys.modules["torch.cuda"])
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(watcher)
        while _GUARDS:
            cuda, originals = _GUARDS.pop()
            for name, original in originals.items():
                setattr(cuda, name, original)
        if had_env is None:
            os.environ.pop(NVML_CHECK_ENV, None)
        else:
            os.environ[NVML_CHECK_ENV] = had_env


_GUARDS: list[tuple[Any, dict[str, Any]]] = []
_CAPABILITY: list[tuple[int, int]] = []
_REFUSALS: list[int] = []  # one entry per refused CUDA initialisation


def _guard(cuda: Any) -> None:
    if any(guarded is cuda for guarded, _ in _GUARDS) or not hasattr(cuda, "_lazy_init"):
        return
    names = ["_lazy_init"] + (["current_device", "get_device_capability"] if _CAPABILITY else [])
    _GUARDS.append((cuda, {name: getattr(cuda, name) for name in names}))

    def refuse() -> None:
        _REFUSALS.append(1)
        raise CudaTouched("initialises CUDA at import")

    cuda._lazy_init = refuse
    if _CAPABILITY:
        capability = _CAPABILITY[0]
        cuda.current_device = lambda: 0
        cuda.get_device_capability = lambda device=None: capability


def preload(modules: Sequence[str], capability: tuple[int, int] | None = None) -> Preload:
    """Import `modules` under the CUDA guard. A module that imports although a CUDA
    initialisation was refused inside it is `tainted` when the node has a GPU (it may have cached
    "no GPU"); without one, the refusal is what CUDA itself would have answered."""
    result = Preload()
    tic = time.perf_counter()
    with _cuda_guard(capability):
        for name in modules:
            if name == "dsakit" or name.startswith("dsakit."):
                result.skipped[name] = "dsakit is never preloaded (its assertion rewriting must apply)"
                continue
            refused = len(_REFUSALS)
            try:
                importlib.import_module(name)
                result.loaded.append(name)
                if len(_REFUSALS) > refused and _gpu_present(capability):
                    result.tainted.append(name)
            except CudaTouched as error:
                result.skipped[name] = f"CudaTouched: {error}"
            except BaseException as error:  # noqa: BLE001 - a module that cannot load is not preloaded
                result.skipped[name] = f"{type(error).__name__}: {error}"
    result.seconds = time.perf_counter() - tic
    return result


def _gpu_present(capability: tuple[int, int] | None) -> bool:
    if capability is not None:
        return True
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_available())  # NVML-based here: no context
    except Exception:  # noqa: BLE001 - an NVML that cannot answer: assume a GPU (the safe side)
        return True


def native_threads() -> int:
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/self/task"))
    return 1


def fork_safety(tainted: Sequence[str] = ()) -> tuple[str, str] | None:
    """Why forking this process would be unsafe now (None: safe). Extra *native* threads are
    tolerated and reported: the pools libraries start at import (OpenBLAS under numpy) shut down
    in a pthread_atfork handler; a Python thread could hold a lock the child then never gets.
    A module that swallowed the CUDA refusal may hold "no GPU" state: nothing is served then."""
    if tainted:
        return ("fork-server-cuda-caught", f"{', '.join(tainted)} caught the refused CUDA initialisation "
                "during its import and may have cached a wrong device state")
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and cuda.is_initialized():
        return ("fork-server-cuda", "CUDA was initialised while preloading; a forked worker could not use it")
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        return ("fork-server-threads", f"the preload left Python threads running ({names}); forking a "
                "multi-threaded process is unsafe")
    return None


def fork_canary(check: Callable[[], object]) -> str | None:
    """Run `check` in a forked child, as a worker would run: None when it returns, else what it
    raised. torch's own guard only sees its lazy init, not a CUDA driver that a preloaded
    extension initialised (cuInit) before the fork; then every forked worker gets 'CUDA error:
    initialization error' (seen on the H200 with SGLang 0.5.17), and only a real fork shows it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running any of the server's cleanup
        os.close(read_end)
        try:
            check()
            message = b""
        except BaseException as error:  # noqa: BLE001 - whatever the child hit is the answer
            message = f"{type(error).__name__}: {error}".encode()[:2000] or b"failed"
        os.write(write_end, message)
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    answer = b"".join(chunks).decode(errors="replace")
    return answer or None


def _cuda_in_a_fork() -> None:
    import torch

    torch.zeros(1, device="cuda").add_(1)
    torch.cuda.synchronize()


# ---------------------------------------------------------------- the server loop


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection mid-request")
        data += chunk
    return data


def _send(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        conn.sendall(json.dumps(message).encode() + b"\n")


@dataclass
class ChildTask:
    """What a forked child runs once it has left the server loop: a `python -c` of execnet's."""

    code: str
    dont_write_bytecode: bool


def _become_worker(fds: Sequence[int], request: dict[str, Any], close: Sequence[Any]) -> ChildTask:
    """In the forked child: the client's stdio, cwd, environ and argv; the server's state dropped."""
    for handle in close:
        if handle is not None:
            with contextlib.suppress(OSError):
                handle.close()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    with contextlib.suppress(Exception):  # die with the server (Linux): no orphaned workers
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    _OLD_STDIO.extend((sys.stdin, sys.stdout, sys.stderr))  # never closed: they own fds 0-2
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), write_through=True)
    sys.stderr = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), write_through=True,
                                  errors="backslashreplace")
    for name in ("__stdin__", "__stdout__", "__stderr__"):
        setattr(sys, name, getattr(sys, name.strip("_")))
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ[FORKED_ENV] = str(_SERVER_PID[0])  # read (and removed) by the worker's dsakit plugin
    argv = list(request["argv"])
    code = argv[argv.index("-c") + 1]
    sys.argv = ["-c", *argv[argv.index("-c") + 2:]]
    if sys.path and sys.path[0] != "":
        sys.path[0] = ""  # `python -c` puts the cwd first, `python -m` its start directory
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is not None and hasattr(cuda, "_cached_device_count"):
        cuda._cached_device_count = None  # CUDA_VISIBLE_DEVICES of this worker decides
    return ChildTask(code, "-B" in argv[: argv.index("-c")])


def loaded_sources() -> dict[str, int]:
    """{file: mtime_ns} of every module loaded from a file: what a fork would inherit."""
    out: dict[str, int] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            with contextlib.suppress(OSError):
                out[path] = os.stat(path).st_mtime_ns
    return out


def first_changed(sources: dict[str, int]) -> str | None:
    for path, mtime in sources.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return path
        except OSError:
            return path
    return None


def serve(directory: str, control: Any, idle_s: float = 0.0) -> ChildTask | None:
    """Accept clients on `directory/s` until the controller closes `control` (our
    stdin), or, with `control` None, until `idle_s` pass without a worker, or until a preloaded
    file changes (that client is told so and spawns plainly). Returns a ChildTask in each forked
    child; None in the server when it stops."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(directory, SOCKET_NAME))
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    if control is not None:
        selector.register(control, selectors.EVENT_READ, "control")
    children: dict[int, socket.socket] = {}
    sources = loaded_sources()
    idle_since = time.monotonic()
    try:
        while True:
            if children:
                idle_since = time.monotonic()
            elif control is None and time.monotonic() - idle_since > idle_s:
                return None
            for key, _ in selector.select(timeout=0.05):
                if key.data == "control":
                    if not os.read(control.fileno(), 4096):
                        return None  # the controller is gone
                elif key.data == "accept":
                    conn, _ = listener.accept()
                    try:
                        _, fds, _, _ = socket.recv_fds(conn, 4, 3)
                        size = struct.unpack("!I", _recv_exact(conn, 4))[0]
                        request = json.loads(_recv_exact(conn, size))
                    except (OSError, ValueError, ConnectionError):
                        conn.close()
                        continue
                    if len(fds) != 3:
                        for fd in fds:
                            os.close(fd)
                        _send(conn, {"error": f"expected 3 fds, got {len(fds)}"})
                        conn.close()
                        continue
                    changed = first_changed(sources)
                    if changed is not None:
                        for fd in fds:
                            os.close(fd)
                        _send(conn, {"error": f"stale: {changed} changed since the preload"})
                        conn.close()
                        return None  # a preload that no longer matches the sources serves no one
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        return _become_worker(fds, request, [listener, control, conn, *children.values()])
                    for fd in fds:
                        os.close(fd)
                    children[pid] = conn
                    selector.register(conn, selectors.EVENT_READ, pid)
                    _send(conn, {"pid": pid})
                else:  # a client's connection: readable only when it went away
                    pid = int(key.data)
                    with contextlib.suppress(OSError):
                        if not key.fileobj.recv(1):  # type: ignore[union-attr]
                            os.kill(pid, signal.SIGKILL)  # execnet killed the client: kill its worker
            _reap(children, selector)
    finally:
        if os.getpid() == _SERVER_PID[0]:
            for pid in children:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            for pid in list(children):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
            listener.close()


_SERVER_PID = [0]
_OLD_STDIO: list[Any] = []


def _reap(children: dict[int, socket.socket], selector: selectors.BaseSelector) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            code = os.waitstatus_to_exitcode(status)
            _send(conn, {"exit": code})
            with contextlib.suppress(KeyError, ValueError):
                selector.unregister(conn)
            conn.close()


def _run_child(task: ChildTask) -> None:
    """Execute execnet's bootstrap as `__main__`, at the top of the child's stack."""
    import builtins
    import types

    sys.dont_write_bytecode = task.dont_write_bytecode
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    exec(compile(task.code, "<string>", "exec"), main.__dict__)  # noqa: S102 - execnet's own bootstrap


def main(argv: Sequence[str]) -> int:
    """`python fork_server_process.py DIR [--idle S] [--capability 9.0] MODULE...`: one JSON line on stdout (ready
    or why not; also DIR/ready.json), then serve until stdin closes (or, with --idle, until S
    seconds pass without a worker). A kept server (--idle) removes DIR when it stops."""
    directory, modules = argv[0], list(argv[1:])
    idle_s, capability = 0.0, None
    while modules[:1] in (["--idle"], ["--capability"]):
        if modules[0] == "--idle":
            idle_s = float(modules[1])
        else:
            major, minor = modules[1].split(".")
            capability = (int(major), int(minor))
        modules = modules[2:]
    if sys.path:
        sys.path[0] = ""  # run by path: not this file's folder, but the cwd, as `python -c` has it
    _SERVER_PID[0] = os.getpid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the controller stops us (stdin EOF, SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    loaded = preload(modules, capability)
    unsafe = fork_safety(loaded.tainted)
    if unsafe is None and _gpu_present(capability):
        failed = fork_canary(_cuda_in_a_fork)
        if failed is not None:
            unsafe = ("fork-server-cuda-driver", f"a forked child cannot use CUDA ({failed.splitlines()[0]}): "
                      "the preload initialised the CUDA driver in the server")
    ready = {"ready": unsafe is None, "pid": os.getpid(), "loaded": loaded.loaded, "skipped": loaded.skipped,
             "seconds": round(loaded.seconds, 3),
             "native_threads": native_threads(), "code": unsafe[0] if unsafe else "",
             "message": unsafe[1] if unsafe else ""}
    tmp = os.path.join(directory, f".ready.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(ready, handle)
    os.replace(tmp, os.path.join(directory, "ready.json"))
    with contextlib.suppress(OSError):
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
    if unsafe is not None:
        return 3
    try:
        task = serve(directory, None if idle_s else sys.stdin, idle_s)
    finally:
        if idle_s and os.getpid() == _SERVER_PID[0]:
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
    if task is None:
        return 0
    _run_child(task)
    return 0



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
