"""One GPU per xdist worker: the node's GPU inventory, the worker -> GPU plan, and the node lock.

Owns: finding the GPUs (controller, before CUDA starts), the plan `gwK` -> GPU handed to workers
(execnet `env:` + `workerinput`), each worker's CPU-thread share, and the reader-writer node lock
behind `dsakit_gpus(n)` / `dsakit_whole_node`. All of it is opt-in (--dsakit-workers-per-gpu,
--dsakit-split-threads): xdist decides -n auto before any test is collected, so a run that does not
ask keeps xdist's worker count and environment. Never imports torch, SGLang or CUDA; must not
decide which tests run (gates do).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsakit.errors import UsageError
from dsakit.options import environment
from dsakit.reasons import Reason

GPU_COUNT_ENV = "DSAKIT_GPU_COUNT"
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
HIP_ENV = "HIP_VISIBLE_DEVICES"
WORKER_KEY = "dsakit_gpu_pin"
GPUS_MARKER = "dsakit_gpus"
WHOLE_NODE_MARKER = "dsakit_whole_node"


class DsakitPinningWarning(pytest.PytestWarning):
    """More xdist workers than GPUs x workers-per-GPU, or CUDA initialised before pinning."""


@dataclass(frozen=True)
class GpuInventory:
    """The GPUs this run may use. `ids` are what goes into the visibility variable (indices or
    UUIDs, respecting an outer restriction); empty means no pinning and `note` says why."""

    vendor: str  # nvidia, amd, or none
    ids: tuple[str, ...]
    source: str
    note: str = ""

    @property
    def env_var(self) -> str:
        return HIP_ENV if self.vendor == "amd" else CUDA_ENV

    def describe(self) -> str:
        if not self.ids:
            return f"no GPU pinning: {self.note}"
        return f"{len(self.ids)} {self.vendor} GPU(s) [{','.join(self.ids)}] from {self.source}"


def _outer_restriction(env: Mapping[str, str], vendor: str) -> list[str] | None:
    """The entries of an outer CUDA_/HIP_VISIBLE_DEVICES (None when unset)."""
    names = (HIP_ENV, CUDA_ENV) if vendor == "amd" else (CUDA_ENV,)
    for name in names:
        if name in env:
            return [part.strip() for part in env[name].split(",") if part.strip()]
    return None


def discover(device_name: str | None = None, env: Mapping[str, str] | None = None) -> GpuInventory:
    """The GPUs to pin, decided without initialising CUDA.

    `$DSAKIT_GPU_COUNT` overrides the probe (simulating a node or fixing a broken probe); a
    simulated `--dsakit-device` without it pins nothing; otherwise the real device's count
    (NVML / nvidia-smi / rocminfo). An outer visibility variable wins over both: workers map onto
    its entries, in order.
    """
    from dsakit.gates.device_model import REAL, resolve_device, validate_device_name

    env = os.environ if env is None else env
    override = str(environment("dsakit_gpu_count", env) or "").strip()
    if override:
        if not override.isdigit():
            raise UsageError(f"${GPU_COUNT_ENV} must be a GPU count (0, 1, 2, ...), not {override!r}")
        count, vendor, source = int(override), "nvidia", f"${GPU_COUNT_ENV}={override}"
        name = validate_device_name(device_name)
        if name != REAL and resolve_device(name).vendor == "amd":
            vendor = "amd"
    else:
        device = resolve_device(device_name)
        if device.simulated:
            return GpuInventory("none", (), "simulated device",
                                f"simulated device {device.key} (set ${GPU_COUNT_ENV} to simulate pinning)")
        if not device.is_gpu:
            return GpuInventory("none", (), "probe", "no CUDA or ROCm GPU on this machine")
        count, vendor, source = device.device_count, device.vendor, "NVML/nvidia-smi/rocminfo"
    if count <= 0:
        return GpuInventory("none", (), source, f"{source} reports no GPU")
    outer = _outer_restriction(env, vendor)
    if outer is not None:
        var = HIP_ENV if vendor == "amd" and HIP_ENV in env else CUDA_ENV
        if not outer:
            return GpuInventory(vendor, (), f"outer {var}", f"outer {var} is empty: no GPU visible")
        return GpuInventory(vendor, tuple(outer), f"outer {var}={','.join(outer)}")
    return GpuInventory(vendor, tuple(str(i) for i in range(count)), source)


discover_gpus = discover  # the public name (dsakit.discover_gpus)


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class WorkerPin:
    worker: str
    env_var: str
    gpu: str  # this worker's own GPU
    all_gpus: tuple[str, ...]  # the node's GPUs (for dsakit_gpus / dsakit_whole_node)
    lock_dir: str

    def as_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "env_var": self.env_var, "gpu": self.gpu,
                "all_gpus": list(self.all_gpus), "lock_dir": self.lock_dir}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerPin:
        return cls(str(data["worker"]), str(data["env_var"]), str(data["gpu"]),
                   tuple(str(g) for g in data["all_gpus"]), str(data["lock_dir"]))

    def gpus_for(self, n: int) -> tuple[str, ...]:
        """n GPUs for a multi-GPU test: the worker's own first, then the rest in node order."""
        return (self.gpu, *[g for g in self.all_gpus if g != self.gpu])[:n]


@dataclass
class PinPlan:
    inventory: GpuInventory
    workers_per_gpu: int
    pins: dict[str, WorkerPin] = field(default_factory=dict)
    warnings: list[Reason] = field(default_factory=list)

    def header_lines(self) -> list[str]:
        if not self.pins:
            return [f"dsakit: {self.inventory.describe()}"]
        by_gpu: dict[str, list[str]] = {}
        for pin in self.pins.values():
            by_gpu.setdefault(pin.gpu, []).append(pin.worker)
        mapping = "; ".join(f"{pin.worker} -> {pin.env_var}={pin.gpu}" for pin in self.pins.values())
        lines = [f"dsakit: GPU pinning ({self.inventory.describe()}, {self.workers_per_gpu} worker(s) per GPU): "
                 + mapping]
        lines += [f"dsakit: WARNING [{w.code}] {w.message}" for w in self.warnings]
        return lines


def plan(inventory: GpuInventory, workers: Sequence[str], workers_per_gpu: int = 1,
         lock_dir: str = "") -> PinPlan:
    """Worker `workers[k]` gets GPU `ids[k % len(ids)]`: round robin, so -n 2 on 2 GPUs uses both
    even with 2 workers per GPU allowed. More workers than GPUs x workers-per-GPU: warned."""
    if workers_per_gpu < 0:
        raise UsageError(f"--dsakit-workers-per-gpu must be 0 (no pinning) or more, not {workers_per_gpu}")
    result = PinPlan(inventory, workers_per_gpu)
    ids = inventory.ids
    if not ids or not workers or workers_per_gpu == 0:
        return result
    for k, worker in enumerate(workers):
        result.pins[worker] = WorkerPin(worker, inventory.env_var, ids[k % len(ids)], ids, lock_dir)
    capacity = len(ids) * workers_per_gpu
    if len(workers) > capacity:
        result.warnings.append(Reason(
            "gpu-oversubscribed",
            f"{len(workers)} xdist workers > {len(ids)} GPU(s) x {workers_per_gpu} worker(s) per GPU; "
            f"workers share GPUs round robin. Use -n {capacity} (or -n auto, which dsakit sets to "
            f"GPUs x workers-per-GPU) or raise --dsakit-workers-per-gpu"))
    return result


THREADS_ENV = "OMP_NUM_THREADS"


def cpu_threads_per_worker(workers: int, env: Mapping[str, str] | None = None, cpus: int | None = None) -> int | None:
    """CPU threads each of `workers` xdist workers may use: the machine's CPUs split evenly.

    torch (and OpenMP/MKL under it) start one thread per core in *every* worker, so N workers
    oversubscribe the CPU N times: on a 32-core node, -n 4 ran the CPU side of the 1M-token
    top-k cases 20x slower (9 s vs 0.4 s) than -n 1. None when the user set OMP_NUM_THREADS
    (their choice wins) or when there is a single worker."""
    source = os.environ if env is None else env
    if THREADS_ENV in source or workers < 2:
        return None
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // workers)


def new_lock_dir(config: pytest.Config) -> str:
    from dsakit.node.run_dirs import private_dir

    return private_dir(config, "dsakit-gpu-lock")


# ---------------------------------------------------------------- the worker side


def apply(pin: WorkerPin, env: dict[str, str] | None = None) -> str | None:
    """Set the worker's visibility variable; returns a warning sentence when it comes too late
    (CUDA already initialised in this process), else None."""
    import sys

    target = os.environ if env is None else env
    late = None
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    initialized = getattr(cuda, "is_initialized", None)
    if initialized is not None and initialized() and target.get(pin.env_var) != pin.gpu:
        late = (f"CUDA was initialised in worker {pin.worker} before dsakit pinned it to "
                f"{pin.env_var}={pin.gpu}; this worker may use another GPU")
    target[pin.env_var] = pin.gpu
    return late


# ---------------------------------------------------------------- the node lock


# Multi-GPU design. A worker's visible set is fixed when its CUDA context starts, so a test that
# needs n GPUs cannot borrow them from inside a pinned worker's CUDA context. Instead such a test
# (marker `dsakit_gpus(n)` or `dsakit_whole_node`) takes the node lock *exclusively*: it waits until
# every other worker has finished its current test (single-GPU tests hold the lock *shared*) and no
# new test starts until it is done. For its duration `CUDA_VISIBLE_DEVICES` in `os.environ` names n
# GPUs (the worker's own first), so the ranks it launches (subprocesses, `mp.spawn`, a server) see
# them; a worker that has not initialised CUDA yet sees them in-process too. Fewer GPUs than n on
# the node: the test skips with reason `gpus:n`. Add `@pytest.mark.xdist_group("dsakit-multi-gpu")`
# and `--dist loadgroup` to queue them on one worker instead of parking several workers on the lock.
class NodeLock:
    """A reader-writer lock over the node's GPUs, shared by the workers of one run (fcntl.flock).

    Single-GPU tests hold it shared, multi-GPU tests exclusively. A writer first takes the `gate`
    exclusively, and readers pass through the gate before taking the lock, so a waiting writer is
    not starved by workers that keep starting new tests.
    """

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    @contextlib.contextmanager
    def _flock(self, name: str, mode: int) -> Iterator[None]:
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / name, "a+") as handle:
            fcntl.flock(handle, mode)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._flock("gate", fcntl.LOCK_SH):
            pass
        with self._flock("gpus", fcntl.LOCK_SH):
            yield

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._flock("gate", fcntl.LOCK_EX), self._flock("gpus", fcntl.LOCK_EX):
            yield


def gpus_needed(item: Any) -> int | None:
    """GPUs a test declares (None: an ordinary single-GPU-or-less test; 0: the whole node)."""
    if item.get_closest_marker(WHOLE_NODE_MARKER) is not None:
        return 0
    marker = item.get_closest_marker(GPUS_MARKER)
    if marker is None:
        return None
    n = marker.args[0] if marker.args else marker.kwargs.get("n")
    if not isinstance(n, int) or n < 1:
        raise UsageError(f"{item.nodeid}: @pytest.mark.{GPUS_MARKER}(n) needs a GPU count n >= 1, got {n!r}")
    return n


def multi_gpu_skip(need: int, available: int) -> Reason | None:
    if need == 0 or need <= available:
        return None
    return Reason(f"gpus:{need}", f"needs {need} GPUs, but this node has {available}; "
                  "a larger node (e.g. nvidia-h200-x2 / -x4 / -x8) runs it")



# ---------------------------------------------------------------- pytest wiring (the run's DsakitSession hands off)


class Pinning:
    """One run's pinning (its DsakitSession holds it, built on first ask: xdist asks for `-n auto`
    before pytest_configure): the options, the node's inventory (discovered once), the plans by
    worker list and the node-lock directory (removed at the end). On an xdist controller the
    session hands it xdist's hooks."""

    def __init__(self, config: pytest.Config, workers_per_gpu: int, split_threads: bool,
                 device_name: str | None) -> None:
        if workers_per_gpu < 0:  # validated early: a bad value is a usage error, not a late crash
            raise pytest.UsageError(f"--dsakit-workers-per-gpu must be 0 (no pinning) or more, not {workers_per_gpu}")
        self.config = config
        self.workers_per_gpu = workers_per_gpu  # --dsakit-workers-per-gpu N: 0 (the default) is no pinning
        self.pin = workers_per_gpu > 0
        self.threads = split_threads  # --dsakit-split-threads: each worker's share of the CPUs as OMP_NUM_THREADS
        self.device_name = device_name  # the run's --dsakit-device ('real' or a key)
        self._inventory: GpuInventory | None = None
        self._plans: dict[tuple[str, ...], PinPlan] = {}
        self._lock_dir = ""

    def inventory(self) -> GpuInventory:
        """The controller's (or a non-xdist run's) inventory, discovered once per run."""
        if self._inventory is None:
            try:
                self._inventory = discover(self.device_name)
            except UsageError as error:
                raise pytest.UsageError(str(error)) from None
        return self._inventory

    def auto_num_workers(self) -> int | None:
        """`-n auto` with pinning asked for: GPUs x workers-per-GPU (None: let xdist count CPUs;
        without --dsakit-workers-per-gpu no GPU is counted)."""
        if not self.pin:
            return None
        found = self.inventory()
        return len(found.ids) * self.workers_per_gpu if found.ids else None

    def controller_plan(self, workers: Sequence[str]) -> PinPlan:
        key = tuple(workers)
        if key not in self._plans:
            if not self._lock_dir:
                self._lock_dir = new_lock_dir(self.config)
            self._plans[key] = plan(self.inventory(), workers, self.workers_per_gpu, self._lock_dir)
        return self._plans[key]

    def available(self) -> int:
        """GPUs of this node (a worker's from its pin, else the inventory's)."""
        data = getattr(self.config, "workerinput", {}).get(WORKER_KEY)
        return len(data["all_gpus"]) if data else len(self.inventory().ids)

    # ------------------------------------------------------------ the xdist controller (pytest-randomly style)

    def _plan(self, workers: Sequence[str]) -> PinPlan | None:
        return self.controller_plan(workers) if self.pin else None

    def _planned_workers(self) -> list[str]:
        n = getattr(self.config.option, "numprocesses", None)
        return [f"gw{k}" for k in range(n)] if isinstance(n, int) and n > 0 else []

    def header_lines(self) -> list[str]:
        workers = self._planned_workers()
        if not workers:
            return []
        threads = cpu_threads_per_worker(len(workers)) if self.threads else None
        split = [] if threads is None else [f"dsakit: {THREADS_ENV}={threads} per worker ({len(workers)} workers share "
                                            "the CPUs; set OMP_NUM_THREADS yourself to override)"]
        result = self._plan(workers)
        return (result.header_lines() if result is not None else []) + split

    def setup_nodes(self, specs: Sequence[Any]) -> None:
        # The execnet spec's env is applied in the worker process before pytest starts there:
        # earlier than any conftest or test module could touch CUDA.
        result = self._plan([str(spec.id) for spec in specs])
        threads = cpu_threads_per_worker(len(specs)) if self.threads else None
        for spec in specs:
            pin = result.pins.get(str(spec.id)) if result is not None else None
            if pin is not None:
                spec.env[pin.env_var] = pin.gpu
            if threads is not None:
                spec.env[THREADS_ENV] = str(threads)
        for reason in result.warnings if result is not None else ():
            self.config.issue_config_time_warning(DsakitPinningWarning(str(reason)), stacklevel=2)

    def configure_node(self, node: Any) -> None:
        workers = [str(spec.id) for spec in node.nodemanager.specs] if hasattr(node, "nodemanager") else []
        worker = str(node.gateway.id)
        result = self._plan(workers or self._planned_workers())
        pin = result.pins.get(worker) if result is not None else None
        if pin is not None:
            node.workerinput[WORKER_KEY] = pin.as_dict()

    def close(self) -> None:
        # the workers are gone by now; their lock files go with the directory
        if self._lock_dir:
            shutil.rmtree(self._lock_dir, ignore_errors=True)
            self._lock_dir = ""


class WorkerPinning:
    """Worker-side hooks: the node lock around each test, the GPUs of multi-GPU tests."""

    def __init__(self, pin: WorkerPin) -> None:
        self.pin = pin
        self.lock = NodeLock(pin.lock_dir)

    def header_lines(self) -> list[str]:
        return [f"dsakit: worker {self.pin.worker} pinned to {self.pin.env_var}={self.pin.gpu}"]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
        need = gpus_needed(item)
        if need is None:
            with self.lock.shared():
                yield
            return
        gpus = self.pin.gpus_for(need or len(self.pin.all_gpus))
        with self.lock.exclusive():
            before = os.environ.get(self.pin.env_var)
            os.environ[self.pin.env_var] = ",".join(gpus)
            try:
                yield
            finally:
                if before is None:
                    os.environ.pop(self.pin.env_var, None)
                else:
                    os.environ[self.pin.env_var] = before


def configure_worker(config: pytest.Config) -> WorkerPinning | None:
    """pytest_configure in an xdist worker: check/apply the pin; returns the lock hooks (None: not pinned)."""
    data = getattr(config, "workerinput", {}).get(WORKER_KEY)
    if not data:
        return None
    pin = WorkerPin.from_dict(data)
    late = apply(pin)
    if late:
        config.issue_config_time_warning(DsakitPinningWarning(late), stacklevel=2)
    return WorkerPinning(pin)


def skip_multi_gpu(pinning: Pinning, items: list[pytest.Item]) -> None:
    """Collection: tests declaring more GPUs than the node has skip with a [gpus:n] reason."""
    from dsakit.gates.marks import marker_names

    if not {GPUS_MARKER, WHOLE_NODE_MARKER} & marker_names(items):
        return  # the common case: one pass over the nodes instead of two marker lookups per test
    available: int | None = None
    for item in items:
        try:
            need = gpus_needed(item)
        except UsageError as error:
            raise pytest.UsageError(str(error)) from None
        if need is None:
            continue
        if available is None:
            available = pinning.available()
        reason = multi_gpu_skip(need, available)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=str(reason)))
