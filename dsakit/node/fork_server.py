"""xdist workers forked from a preloaded interpreter: the fork server's lifetime in the controller.

Owns: when a run uses the server (--dsakit-fork-server), starting it (`fork_server_process`) and
waiting for its preload, pointing execnet's `python` at `fork_client`, stopping it and removing its
socket folder. Any failure falls back to a plain spawn, with a Reason in the header. Never imports
torch or SGLang in the controller.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from dsakit.reasons import Reason

OPTION = "dsakit_fork_server"
PRELOAD_INI = "dsakit_fork_server_preload"
TIMEOUT_ENV = "DSAKIT_FORK_SERVER_TIMEOUT_S"  # how long the controller waits for the preload
DEFAULT_TIMEOUT_S = 180.0
MODES = ("auto", "on", "off", "keep")
KEEP_INI = "dsakit_fork_server_keep_s"  # how long a kept server waits for the next run
# environment variables that differ between otherwise identical runs: not part of a kept server's key
_VOLATILE_ENV = ("OLDPWD", "PWD", "SHLVL", "_", "TERM", "COLUMNS", "LINES", "PYTEST_ADDOPTS",
                 "PYTEST_CURRENT_TEST", "OMP_NUM_THREADS")


def default_preload() -> tuple[str, ...]:
    """torch, then what the contract suites import from SGLang (which pulls in triton,
    transformers and the rest of the chain); absent modules are skipped with a reason."""
    from dsakit.node.bytecode import SGLANG_IMPORTS

    return ("torch", *SGLANG_IMPORTS)


# ---------------------------------------------------------------- the controller side


@dataclass
class ServerHandle:
    """A started server (or why there is none): `reason` is set when workers spawn plainly."""

    directory: str = ""
    process: subprocess.Popen[bytes] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    reason: Reason | None = None
    waited_s: float = 0.0
    kept: bool = False  # outlives the run (--dsakit-fork-server=keep)
    reused: bool = False  # a kept server an earlier run started
    _ready_line: list[bytes] = field(default_factory=list)
    _reader: threading.Thread | None = None

    @property
    def socket_path(self) -> str:
        from dsakit.node.fork_server_process import SOCKET_NAME

        return os.path.join(self.directory, SOCKET_NAME)

    @property
    def serving(self) -> bool:
        if self.reason is not None:
            return False
        if self.process is None:  # a reused kept server
            return _alive(int(self.info.get("pid") or 0)) and os.path.exists(self.socket_path)
        return self.process.poll() is None

    def stop(self) -> None:
        if self.kept:  # it stops itself when idle; only our end of its pipe goes
            if self.process is not None and self.process.stdout is not None:
                self.process.stdout.close()
            return
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)


def node_capability() -> str | None:
    """The CUDA capability every GPU of this node has ("9.0"), from the NVML probe (no CUDA):
    the fork server answers `get_device_capability()` with it while preloading. None without an
    NVIDIA GPU, or when the node mixes GPU kinds (then the preload refuses those queries)."""
    from dsakit.gates.device_model import REAL, resolve_device

    try:
        device = resolve_device(REAL)
    except Exception:  # noqa: BLE001 - no answer: the preload refuses the queries instead
        return None
    if device.vendor != "nvidia" or device.sm is None or device.simulated:
        return None
    capability = f"{device.sm[0]}.{device.sm[1]}"
    try:  # every GPU, not only the first the device model describes
        listed = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20, check=False).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        listed = []
    return capability if set(listed) <= {capability} else None


def start(modules: Sequence[str], env: dict[str, str] | None = None, *, directory: str = "",
          keep_s: float = 0.0) -> ServerHandle:
    """Start the server in the background with `env` (default: ours); `wait_ready` collects its
    answer. Libraries that size thread pools at import (OpenBLAS) see the workers' OMP_NUM_THREADS."""
    from dsakit.node import fork_server_process

    if directory:
        os.makedirs(directory, mode=0o700)
    else:
        directory = tempfile.mkdtemp(prefix="dsakit-fs-", dir=socket_root())
    os.chmod(directory, 0o700)
    handle = ServerHandle(directory, kept=keep_s > 0)
    idle = ["--idle", str(keep_s)] if keep_s > 0 else []
    capability = node_capability()
    if capability:
        idle += ["--capability", capability]
    env = dict(os.environ) if env is None else env
    # the preload's import-time warnings would interleave with pytest's output: to a log instead
    log = open(os.path.join(directory, "preload.log"), "wb")  # noqa: SIM115 - the child holds it
    try:
        handle.process = subprocess.Popen(
            [sys.executable, fork_server_process.__file__, directory, *idle, *modules],
            stdin=subprocess.DEVNULL if handle.kept else subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, start_new_session=True)
    except OSError as error:
        handle.reason = Reason("fork-server-start", f"could not start the fork server: {error}")
        return handle
    finally:
        log.close()
    stdout = handle.process.stdout
    assert stdout is not None

    def read() -> None:
        with contextlib.suppress(Exception):
            handle._ready_line.append(stdout.readline())

    handle._reader = threading.Thread(target=read, name="dsakit-fork-server-ready", daemon=True)
    handle._reader.start()
    atexit.register(handle.stop)
    return handle


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # not ours
    return True


def kept_directory(modules: Sequence[str], env: dict[str, str]) -> str:
    """The folder of the kept server for this interpreter, preload, cwd and environment: any
    difference gets its own server (SGLang reads some variables at import)."""
    import hashlib

    key = json.dumps({"python": sys.executable, "modules": list(modules), "cwd": os.getcwd(),
                      "env": {k: v for k, v in sorted(env.items())
                              if k not in _VOLATILE_ENV and not k.startswith("PYTEST_XDIST")}})
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return os.path.join(socket_root(), f"dsakit-fs-keep-{os.getuid()}-{digest}")


def socket_root() -> str:
    """The temp folder, unless its path is too long for a unix socket below it (107 bytes)."""
    root = tempfile.gettempdir()
    return root if len(root.encode()) <= 72 else "/tmp"


def start_kept(modules: Sequence[str], keep_s: float, env: dict[str, str] | None = None) -> ServerHandle:
    """Reuse the kept server for this key when it is alive, else start one that stops itself
    after `keep_s` seconds without a worker (or when a preloaded file changes)."""
    env = dict(os.environ) if env is None else env
    directory = kept_directory(modules, env)
    handle = live_kept(modules, env)
    if handle is not None:
        return handle
    shutil.rmtree(directory, ignore_errors=True)
    return start(modules, env, directory=directory, keep_s=keep_s)


def live_kept(modules: Sequence[str], env: dict[str, str]) -> ServerHandle | None:
    """The kept server an earlier run started for this key, when it is alive and ready."""
    directory = kept_directory(modules, env)
    with contextlib.suppress(OSError, ValueError):
        if os.stat(directory).st_uid == os.getuid():
            with open(os.path.join(directory, "ready.json"), encoding="utf-8") as handle_file:
                info = json.load(handle_file)
            handle = ServerHandle(directory, info=info, kept=True, reused=True)
            if info.get("ready") and handle.serving:
                return handle
    return None


def wait_ready(handle: ServerHandle, timeout: float) -> ServerHandle:
    if handle.reason is not None or handle.info or handle._reader is None:
        return handle
    tic = time.perf_counter()
    handle._reader.join(timeout)
    handle.waited_s = time.perf_counter() - tic
    line = handle._ready_line[0] if handle._ready_line else b""
    if not line:
        code = None
        if handle.process is not None:
            if handle._reader.is_alive():
                handle.process.kill()  # still preloading: out of time
            else:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = handle.process.wait(timeout=5)
        handle.reason = (Reason("fork-server-timeout", f"the preload took longer than {timeout:.0f} s "
                                f"(${TIMEOUT_ENV})") if code is None else
                         Reason("fork-server-crash", f"the fork server exited {code} while preloading: "
                                + _log_tail(handle)))
        handle.stop()
        return handle
    handle.info = json.loads(line)
    if not handle.info.get("ready"):
        handle.reason = Reason(str(handle.info.get("code") or "fork-server-refused"),
                               str(handle.info.get("message") or "the fork server refused to serve"))
        handle.stop()
    return handle


def _log_tail(handle: ServerHandle, lines: int = 3) -> str:
    try:
        with open(os.path.join(handle.directory, "preload.log"), encoding="utf-8", errors="replace") as log:
            return " | ".join(line.strip() for line in log.read().strip().splitlines()[-lines:]) or "(no output)"
    except OSError:
        return "(no output)"


def client_python(handle: ServerHandle) -> str:
    """What execnet runs as `python` for a worker forked from `handle`."""
    import shlex

    from dsakit.node import fork_client

    # -I -S: the client needs only the stdlib, so it starts in milliseconds and imports no dsakit
    return " ".join(shlex.quote(part) for part in (sys.executable, "-I", "-S", fork_client.__file__,
                                                  handle.socket_path))


# ---------------------------------------------------------------- pytest wiring (hooks live in plugin.py)


def mode(config: pytest.Config) -> str:
    from dsakit.options import value as option_value

    value = option_value(config, OPTION) or "auto"
    if value not in MODES:
        raise pytest.UsageError(f"--dsakit-fork-server must be one of {', '.join(MODES)}, not {value!r}")
    return str(value)


def _workers(config: pytest.Config) -> int:
    n = getattr(config.option, "numprocesses", None)
    dist = getattr(config.option, "dist", "no")
    return n if isinstance(n, int) and dist != "no" else 0


def wanted(config: pytest.Config) -> Reason | None:
    """None when this run should fork its workers; else why not (a Reason)."""
    chosen = mode(config)
    if chosen == "off":
        return Reason("fork-server-off", "--dsakit-fork-server=off")
    if any(tx != "popen" for tx in getattr(config.option, "tx", None) or ()):  # -n N gives N plain "popen"
        return Reason("fork-server-tx", "--tx gateways are the user's own; workers spawn as given")
    if _workers(config) < 1:
        return Reason("fork-server-no-xdist", "no xdist workers in this run")
    if chosen == "auto" and live_kept(_modules(config), dict(os.environ)) is None:
        return Reason("fork-server-auto", "auto: no kept fork server for this interpreter, cwd and "
                      "environment (--dsakit-fork-server=keep starts one)")
    return None


def _modules(config: pytest.Config) -> list[str]:
    configured = config.getini(PRELOAD_INI)
    return list(configured) if configured else list(default_preload())


class XdistForkServer:
    """Controller-side hooks: start the server at configure, point execnet at it, stop it."""

    def __init__(self, config: pytest.Config) -> None:
        from dsakit.node.gpu_pinning import THREADS_ENV, cpu_threads_per_worker

        self.config = config
        env = dict(os.environ)
        if mode(config) in ("keep", "auto"):  # serves runs with any -n: the pools keep their default size
            self.handle = start_kept(_modules(config), float(config.getini(KEEP_INI) or 900), env)
            return
        threads = cpu_threads_per_worker(_workers(config))
        if threads is not None:
            env[THREADS_ENV] = str(threads)  # what every worker gets (gpu_pinning's split)
        self.handle = start(_modules(config), env)

    def ready(self) -> ServerHandle:
        timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT_S)
        return wait_ready(self.handle, timeout)

    def header(self) -> list[str]:
        handle = self.ready()
        if handle.reason is not None:
            return [f"dsakit: fork server off, workers spawn [{handle.reason.code}] {handle.reason.message}"]
        info = handle.info
        skipped = info.get("skipped") or {}
        kept = (" (kept from an earlier run)" if handle.reused else " (kept for later runs)") if handle.kept else ""
        line = (f"dsakit: fork server pid {info.get('pid')}{kept}: workers forked after preloading "
                f"{len(info.get('loaded') or [])} modules in {info.get('seconds')} s "
                f"({info.get('native_threads')} native thread(s))")
        return [line] + [f"dsakit: fork server did not preload {name}: {why}" for name, why in skipped.items()]

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return self.header()

    def pytest_xdist_setupnodes(self, config: pytest.Config, specs: Sequence[Any]) -> None:
        handle = self.ready()
        if not handle.serving:
            return
        python = client_python(handle)
        for spec in specs:
            if not spec.python and spec.popen:
                spec.python = python

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.handle.stop()


def configure_forked_worker() -> None:
    """In a worker forked from the server: torch was imported (and sized its intra-op pool) in
    the server, before execnet set this worker's OMP_NUM_THREADS; apply it as a fresh import would."""
    from dsakit.node.fork_server_process import FORKED_ENV
    from dsakit.node.gpu_pinning import THREADS_ENV

    if os.environ.pop(FORKED_ENV, None) is None:
        return
    torch = sys.modules.get("torch")
    value = os.environ.get(THREADS_ENV, "")
    if torch is not None and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def configure(config: pytest.Config) -> dict[str, object]:
    """pytest_configure: the controller's fork-server hooks when this run wants them; in a
    forked worker, the thread count."""
    mode(config)  # validate early
    if hasattr(config, "workerinput"):
        configure_forked_worker()
        return {}
    if not config.pluginmanager.hasplugin("xdist"):
        return {}
    if wanted(config) is not None:
        return {}
    return {"dsakit-fork-server": XdistForkServer(config)}


