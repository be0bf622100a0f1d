"""`--dsakit-kernel-contracts`: every entry point of `kernel_contracts.KERNEL_ENTRIES` checks the
arguments it is handed before its kernel launches, and a metadata kernel what it wrote when it
returns, for a whole run, in SGLang's unmodified suites too.

Owns wrapping the entry points (where their modules import, now or later, and in every module that
bound the name), the CUDA-graph side (at capture the shapes and types; before each `replay()` the
values of the static buffers the captured launches read, one sync per replay) and undoing all of it.
A violation raises `KernelContractViolation` naming the kernel, the argument, the offending row and
value, and the call site; a broken postcondition is raised when the kernel returns (eagerly: before
SGLang's caller, or a CUDA-graph replay after it, reads the outputs; captured inside a graph: after
each replay). Must not change a call's arguments or result; imports torch only once the
run imports it.
"""

from __future__ import annotations

import inspect
import threading
import types
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dsakit.errors import KernelContractViolation
from dsakit.mocks.call_site import site_outside
from dsakit.stack.import_hooks import ImportWatch, Patches, rebind_everywhere
from dsakit.stack.kernel_libraries import library_paths
from dsakit.topk.kernel_contracts import KernelEntry, Violation, entries_by_module, violations

# Frames a call site skips: the wrapper, the entry point's own module and the kernel libraries.
_MACHINERY = ("/dsakit/", "/torch/", *library_paths(), "/contextlib.py", "/functools.py", "/sglang/kernels/ops/")


def caller_site() -> str:
    """Who called the entry point (the first frame outside the wrapper and the kernel's own modules)."""
    return site_outside(_MACHINERY, depth=2, function=True)


def violation(entry: KernelEntry, found: Sequence[Violation], site: str, when: str = "", *,
              wrote: bool = False) -> KernelContractViolation:
    lines = "\n".join(f"  {v.describe()}" for v in found)
    what, after = (("wrote outputs its consumers cannot read", "raised when it returned, before any consumer read "
                    "them") if wrote else ("would launch with arguments its kernel does not accept",
                                           "nothing was launched"))
    return KernelContractViolation(
        f"{entry.kernel} ({entry.target}) {what}{when}; called at {site}:\n{lines}\n({after}; dsakit's "
        "kernel-launch contracts, dsakit/topk/kernel_contracts.py)",
        kernel=entry.kernel, argument=found[0].argument, row=found[0].row, value=found[0].value, site=site)


# ---------------------------------------------------------------- CUDA graphs


class _Graphs:
    """The graphs being captured (a stack per thread) and what each captured launch read."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.launches: weakref.WeakKeyDictionary[Any, list[tuple[KernelEntry, dict[str, Any], str]]] = (
            weakref.WeakKeyDictionary())
        # the captured launches of kernels with postconditions: what they wrote is checked after each replay
        self.writes: weakref.WeakKeyDictionary[Any, list[tuple[KernelEntry, dict[str, Any], str]]] = (
            weakref.WeakKeyDictionary())

    def stack(self) -> list[Any]:
        if not hasattr(self.local, "stack"):
            self.local.stack = []
        stack: list[Any] = self.local.stack
        return stack

    def capturing(self) -> Any:
        """The graph this thread captures into, else None."""
        stack = self.stack()
        return stack[-1] if stack else None


_GRAPHS = _Graphs()

# What this process checked: "launch" / "replay" / "wrote" / "refused" -> kernel -> count (the run's summary;
# an xdist worker hands its tally to the controller)
_TALLY: dict[str, dict[str, int]] = {}


def _count(kind: str, kernel: str, n: int = 1) -> None:
    per_kernel = _TALLY.setdefault(kind, {})
    per_kernel[kernel] = per_kernel.get(kernel, 0) + n


def _tally_copy() -> dict[str, dict[str, int]]:
    return {kind: dict(counts) for kind, counts in _TALLY.items()}


def _guard_graphs(patches: Patches, torch: Any) -> None:
    graph_class = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    begin, end, replay = (getattr(graph_class, name, None) for name in ("capture_begin", "capture_end", "replay"))
    if not isinstance(graph_class, type) or begin is None or end is None or replay is None:
        return  # no CUDA graphs here (a CPU-placed simulation refuses them)

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        _GRAPHS.stack().append(self)
        _GRAPHS.launches[self] = []
        _GRAPHS.writes[self] = []
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            _GRAPHS.stack().pop()
            raise

    def capture_end(self: Any) -> Any:
        try:
            return end(self)
        finally:
            stack = _GRAPHS.stack()
            if stack and stack[-1] is self:
                stack.pop()

    def checked_replay(self: Any) -> Any:
        for entry, arguments, site in _GRAPHS.launches.get(self, ()):
            found = violations(entry, arguments)
            _count("replay", entry.kernel)
            if found:
                _count("refused", entry.kernel)
                raise violation(entry, found, site, " when this CUDA graph replays (its captured static buffers "
                                "now hold these values)")
        result = replay(self)
        for entry, arguments, site in _GRAPHS.writes.get(self, ()):
            check_written(entry, arguments, site, " when this CUDA graph replayed (the captured kernel wrote these "
                          "values; consumers captured in the same graph read them)")
        return result

    patches.set(graph_class, "capture_begin", capture_begin)
    patches.set(graph_class, "capture_end", capture_end)
    patches.set(graph_class, "replay", checked_replay)


# ---------------------------------------------------------------- wrapping the entry points


def check_written(entry: KernelEntry, arguments: Mapping[str, Any], site: str, when: str = "") -> None:
    """The entry's postconditions on what one call wrote (its outputs read back: one sync)."""
    found = violations(entry, arguments, written=True)
    _count("wrote", entry.kernel)
    if found:
        _count("refused", entry.kernel)
        raise violation(entry, found, site, when, wrote=True)


def guarded(entry: KernelEntry, original: Callable[..., Any]) -> Callable[..., Any]:
    """`original` checking its arguments first (shapes and types only while a graph captures: the
    graph then checks the values before each replay)."""
    try:
        signature: inspect.Signature | None = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None

    def launch(*args: Any, **kwargs: Any) -> Any:
        if signature is not None:
            bound = signature.bind_partial(*args, **kwargs)
            bound.apply_defaults()
            arguments: dict[str, Any] = dict(bound.arguments)
            graph = _GRAPHS.capturing()
            found = violations(entry, arguments, values=graph is None)
            _count("launch", entry.kernel)
            if found:
                _count("refused", entry.kernel)
                raise violation(entry, found, caller_site())
            if graph is not None:
                _GRAPHS.launches.setdefault(graph, []).append((entry, arguments, caller_site()))
            result = original(*args, **kwargs)
            if entry.writes:
                if graph is None:
                    check_written(entry, arguments, caller_site())
                else:
                    _GRAPHS.writes.setdefault(graph, []).append((entry, arguments, caller_site()))
            return result
        return original(*args, **kwargs)

    launch.__name__ = getattr(original, "__name__", "launch")
    launch.__qualname__ = getattr(original, "__qualname__", launch.__name__)
    launch.__doc__ = getattr(original, "__doc__", None)
    launch.__wrapped__ = original  # type: ignore[attr-defined]
    return launch


def guard_module(patches: Patches, module: types.ModuleType, entries: Sequence[tuple[KernelEntry, str]],
                 wrapped: list[str]) -> None:
    for entry, function in entries:
        original = vars(module).get(function)
        if callable(original) and not getattr(original, "_dsakit_guarded", False):
            replacement = guarded(entry, original)
            replacement._dsakit_guarded = True  # type: ignore[attr-defined]
            rebind_everywhere(patches, original, replacement)
            wrapped.append(f"{module.__name__}.{function}")


class LaunchGuard:
    """The run's kernel-launch contracts, a part of the run's DsakitSession (where
    --dsakit-kernel-contracts asks for them): installed at configure, after the simulation (its
    guards get wrapped, not the reverse); the header line, the summary, a worker's launch tally
    handed to its controller; undone at close."""

    def __init__(self, config: Any = None) -> None:
        self.config = config
        self.patches = Patches()
        self.wrapped: list[str] = []

    def header_lines(self) -> list[str]:
        return ["dsakit: kernel-launch contracts on: every launch of the top-k and DSA metadata entry points "
                "(dsakit/topk/kernel_contracts.py) checks its arguments first, CUDA graphs before each replay; "
                "the metadata kernels' outputs when they return"]

    def summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_line(tally_line(_TALLY))
        if self.wrapped and terminalreporter.verbosity > 0:
            terminalreporter.write_line(f"dsakit: kernel-launch contracts wrapped {len(self.wrapped)} entry "
                                        f"points: {', '.join(sorted(self.wrapped))}")

    def worker_output(self) -> dict[str, dict[str, int]]:
        """An xdist worker's launches: the controller's summary counts them."""
        return _tally_copy()

    def merge(self, data: Mapping[str, Mapping[str, int]]) -> None:
        for kind, counts in data.items():
            for kernel, count in counts.items():
                _count(kind, kernel, count)

    def close(self) -> None:
        self.uninstall()

    def install(self, hooks: ImportWatch) -> None:
        """Each entry point's module wrapped when it imports (now, if it has), through the run's
        import watcher."""
        _TALLY.clear()
        for name, entries in entries_by_module().items():
            hooks.watch(name, self._guard(entries))
        hooks.watch("torch", lambda torch: _guard_graphs(self.patches, torch))

    def _guard(self, entries: Sequence[tuple[KernelEntry, str]]) -> Callable[[types.ModuleType], None]:
        return lambda module: guard_module(self.patches, module, entries, self.wrapped)

    def uninstall(self) -> None:
        self.patches.restore()


def tally_line(tally: Mapping[str, Mapping[str, int]]) -> str:
    """The run's one summary line: how many launches the contracts checked, of which kernels, and
    how many they refused (a run that checked none says so: the option then guarded nothing)."""
    launches, replays, wrote, refused = (sum(tally.get(kind, {}).values())
                                         for kind in ("launch", "replay", "wrote", "refused"))
    kernels = sorted(set(tally.get("launch", {})) | set(tally.get("replay", {})))
    if not kernels:
        return ("dsakit: kernel-launch contracts checked no launch: no test reached a top-k or DSA metadata "
                "entry point of dsakit/topk/kernel_contracts.py")
    graphs = f" and {replays} captured launch(es) before CUDA-graph replays" if replays else ""
    outputs = f"; the outputs of {wrote} metadata kernel call(s) when they returned" if wrote else ""
    return (f"dsakit: kernel-launch contracts checked {launches} launch(es){graphs} of {len(kernels)} kernel(s) "
            f"({', '.join(kernels)}){outputs}; {refused} refused")
