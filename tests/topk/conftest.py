"""Fixtures of the kernel-launch guard's tests: the process's launch tally kept aside, and a
stand-in `torch.cuda.CUDAGraph` class with the guard's capture and replay wrappers installed."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def tally() -> Iterator[dict[str, dict[str, int]]]:
    """The launch guard's tally, empty for the test and restored after it."""
    from dsakit.topk import launch_guard

    saved = launch_guard._tally_copy()
    launch_guard._TALLY.clear()
    try:
        yield launch_guard._TALLY
    finally:
        launch_guard._TALLY.clear()
        launch_guard._TALLY.update(saved)


@pytest.fixture
def guarded_graphs() -> Iterator[Callable[..., type]]:
    """`guarded_graphs(on_replay=None)`: a stand-in CUDAGraph class (the methods torch.cuda.CUDAGraph's
    Python class defines; `on_replay` runs as the replayed graph) whose capture and replay the guard
    wraps; unwrapped and the capture stack cleared after the test."""
    from dsakit.stack.import_hooks import Patches
    from dsakit.topk import launch_guard

    patches = Patches()

    def install(on_replay: Callable[[], Any] | None = None) -> type:
        class CUDAGraph:
            def capture_begin(self, *args: object, **kwargs: object) -> None:
                pass

            def capture_end(self) -> None:
                pass

            def replay(self) -> None:
                if on_replay is not None:
                    on_replay()

        launch_guard._guard_graphs(patches, types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=CUDAGraph)))
        return CUDAGraph

    try:
        yield install
    finally:
        patches.restore()
        launch_guard._GRAPHS.stack().clear()


@pytest.fixture
def graph_class(guarded_graphs: Callable[..., type]) -> type:
    """A guarded stand-in CUDAGraph class whose replay does nothing."""
    return guarded_graphs()
