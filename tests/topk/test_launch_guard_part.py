"""The kernel-launch guard as a part of the run's session, in-process (issue 45, item 4: the survivors
of the mutation run over `dsakit/topk/launch_guard.py`): its header, summary and tally line word for
word, a worker's tally handed over and merged, what `install` watches, which graph classes get
wrapped, a capture end with nothing capturing, the counts of replays, writes and refusals, a wrapped
entry point's name and signature, and the call site a violation names. The checks themselves are
stubbed (`violations`): what each returns is `kernel_contracts`' test."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from dsakit.errors import KernelContractViolation
from dsakit.stack.import_hooks import Patches
from dsakit.topk import launch_guard
from dsakit.topk.kernel_contracts import KERNEL_ENTRIES, KernelEntry, Violation, entries_by_module

ENTRY: KernelEntry = KERNEL_ENTRIES[0]
BAD = [Violation("seq_lens", "must be >= 0", row=1, value=-4)]


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch) -> list[Violation]:
    """What the stubbed checks answer (empty: every call is valid)."""
    answer: list[Violation] = []
    monkeypatch.setattr(launch_guard, "violations", lambda entry, arguments, **_: list(answer))
    return answer


class _Reporter:
    def __init__(self, verbosity: int) -> None:
        self.verbosity = verbosity
        self.lines: list[str] = []

    def write_line(self, line: str) -> None:
        self.lines.append(line)


def _kernel(scores: Any, seq_lens: Any = None) -> str:
    """A stand-in entry point."""
    return "launched"


def _new_kernel() -> Any:
    """A stand-in entry point of its own (wrapping rebinds an original wherever it is bound)."""
    def kernel(scores: Any, seq_lens: Any = None) -> str:
        return "launched"
    return kernel


# ---------------------------------------------------------------- the tally line and the part's words


def test_a_run_that_checked_nothing_says_the_option_guarded_nothing() -> None:
    assert launch_guard.tally_line({}) == (
        "dsakit: kernel-launch contracts checked no launch: no test reached a top-k or DSA metadata entry "
        "point of dsakit/topk/kernel_contracts.py")
    # writes and refusals without a launch or a replay: still no kernel checked
    assert launch_guard.tally_line({"wrote": {"a": 2}, "refused": {"a": 1}}) == launch_guard.tally_line({})


def test_the_tally_line_counts_launches_replays_writes_and_refusals_by_kind() -> None:
    assert launch_guard.tally_line({"launch": {"b": 3, "a": 1}, "refused": {"a": 1}}) == (
        "dsakit: kernel-launch contracts checked 4 launch(es) of 2 kernel(s) (a, b); 1 refused")
    assert launch_guard.tally_line({"replay": {"c": 2}, "wrote": {"c": 5}}) == (
        "dsakit: kernel-launch contracts checked 0 launch(es) and 2 captured launch(es) before CUDA-graph "
        "replays of 1 kernel(s) (c); the outputs of 5 metadata kernel call(s) when they returned; 0 refused")


def test_the_header_and_summary_word_for_word_and_the_wrapped_list_only_with_v(
        tally: dict[str, dict[str, int]]) -> None:
    part = launch_guard.LaunchGuard()
    assert part.header_lines() == [
        "dsakit: kernel-launch contracts on: every launch of the top-k and DSA metadata entry points "
        "(dsakit/topk/kernel_contracts.py) checks its arguments first, CUDA graphs before each replay; the "
        "metadata kernels' outputs when they return"]
    part.wrapped[:] = ["m.b", "m.a"]
    quiet, verbose = _Reporter(0), _Reporter(1)
    part.summary(quiet)
    part.summary(verbose)
    assert quiet.lines == [launch_guard.tally_line({})]
    assert verbose.lines == [launch_guard.tally_line({}), "dsakit: kernel-launch contracts wrapped 2 entry points: m.a, m.b"]
    part.wrapped.clear()
    silent = _Reporter(1)
    part.summary(silent)
    assert silent.lines == [launch_guard.tally_line({})]


def test_a_workers_tally_is_handed_over_and_added_with_its_counts(tally: dict[str, dict[str, int]]) -> None:
    part = launch_guard.LaunchGuard()
    launch_guard._count("launch", "k", 2)
    handed = part.worker_output()
    assert handed == {"launch": {"k": 2}}
    handed["launch"]["k"] = 99  # a copy: the worker's own tally is not the one sent
    assert tally == {"launch": {"k": 2}}
    part.merge({"launch": {"k": 3, "j": 1}, "refused": {"k": 2}})
    assert tally == {"launch": {"k": 5, "j": 1}, "refused": {"k": 2}}


# ---------------------------------------------------------------- install, wrap, undo


class _Watch:
    def __init__(self) -> None:
        self.callbacks: dict[str, Any] = {}

    def watch(self, name: str, callback: Any) -> None:
        self.callbacks[name] = callback


def test_install_watches_every_entry_module_and_torch_and_close_undoes_the_wrapping(
        monkeypatch: pytest.MonkeyPatch, tally: dict[str, dict[str, int]], found: list[Violation]) -> None:
    launch_guard._count("launch", "stale")  # a previous run in this process
    part, watch = launch_guard.LaunchGuard(config="cfg"), _Watch()
    assert part.config == "cfg" and part.wrapped == []
    part.install(watch)  # type: ignore[arg-type]
    assert tally == {}
    assert set(watch.callbacks) == {*entries_by_module(), "torch"}
    module_name, entries = next(iter(entries_by_module().items()))
    module = types.ModuleType(module_name)
    originals = {function: _new_kernel() for _, function in entries}
    for function, original in originals.items():
        setattr(module, function, original)
    monkeypatch.setitem(sys.modules, module_name, module)

    class CUDAGraph:
        def capture_begin(self) -> None: ...
        def capture_end(self) -> None: ...
        def replay(self) -> None: ...

    plain = dict(vars(CUDAGraph))
    try:
        watch.callbacks[module_name](module)
        assert part.wrapped == [f"{module_name}.{function}" for _, function in entries]
        assert all(getattr(module, function) is not original for function, original in originals.items())
        watch.callbacks["torch"](types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=CUDAGraph)))
        assert vars(CUDAGraph)["replay"] is not plain["replay"]
    finally:
        part.close()
    assert all(getattr(module, function) is original for function, original in originals.items())
    assert vars(CUDAGraph)["replay"] is plain["replay"]


@pytest.mark.parametrize("missing", ["capture_begin", "capture_end", "replay"])
def test_a_graph_class_without_one_of_its_three_methods_is_left_alone(missing: str) -> None:
    methods = {name: (lambda self: None) for name in ("capture_begin", "capture_end", "replay") if name != missing}
    graph_class = type("CUDAGraph", (), methods)
    patches = Patches()
    launch_guard._guard_graphs(patches, types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=graph_class)))
    try:
        assert {name: vars(graph_class).get(name) for name in methods} == methods
    finally:
        patches.restore()
    launch_guard._guard_graphs(patches, types.SimpleNamespace())  # no torch.cuda at all: nothing to do


def test_a_graph_that_is_not_a_class_is_left_alone() -> None:
    methods = {name: (lambda self: None) for name in ("capture_begin", "capture_end", "replay")}
    graph = types.SimpleNamespace(**methods)  # an instance, not torch.cuda.CUDAGraph the class
    patches = Patches()
    launch_guard._guard_graphs(patches, types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=graph)))
    try:
        assert vars(graph) == methods
    finally:
        patches.restore()


def test_a_module_attribute_that_is_not_callable_is_not_wrapped() -> None:
    module = types.ModuleType("fake_kernels_constant")
    setattr(module, "topk", 3)
    patches, wrapped = Patches(), []
    launch_guard.guard_module(patches, module, [(ENTRY, "topk"), (ENTRY, "absent")], wrapped)
    assert wrapped == [] and module.topk == 3


# ---------------------------------------------------------------- the wrapper


def test_the_wrapper_keeps_the_entry_points_name_qualname_and_doc() -> None:
    wrapped = launch_guard.guarded(ENTRY, _kernel)
    assert (wrapped.__name__, wrapped.__qualname__, wrapped.__doc__) == (
        "_kernel", "_kernel", "A stand-in entry point.")
    nested = launch_guard.guarded(ENTRY, _new_kernel())
    assert (nested.__name__, nested.__qualname__) == ("kernel", "_new_kernel.<locals>.kernel")

    class Callable_:
        def __call__(self, scores: Any) -> str:
            return "called"

    anonymous = launch_guard.guarded(ENTRY, Callable_())
    assert (anonymous.__name__, anonymous.__qualname__, anonymous.__doc__) == ("launch", "launch", None)


def test_an_entry_point_without_a_signature_is_called_unchecked(
        tally: dict[str, dict[str, int]], found: list[Violation]) -> None:
    class Opaque:
        __signature__ = "not a signature"  # inspect.signature raises TypeError

        def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
            return args, tuple(sorted(kwargs))

    found.extend(BAD)  # would refuse, were it checked
    assert launch_guard.guarded(ENTRY, Opaque())(1, b=2) == ((1,), ("b",))
    assert tally == {}


def test_a_refused_launch_names_the_callers_line_and_every_broken_rule(
        tally: dict[str, dict[str, int]], found: list[Violation]) -> None:
    found.extend([*BAD, Violation("scores", "must be float32", value="torch.int32")])
    kernel = launch_guard.guarded(ENTRY, _kernel)
    with pytest.raises(KernelContractViolation) as raised:
        kernel("s", seq_lens="l")
    line = sys._getframe().f_lineno - 1
    message = str(raised.value)
    assert raised.value.site.endswith(f"test_launch_guard_part.py:{line} in "
                                      "test_a_refused_launch_names_the_callers_line_and_every_broken_rule")
    assert (f"would launch with arguments its kernel does not accept; called at {raised.value.site}:\n"
            "  seq_lens[1] = -4: must be >= 0\n  scores (torch.int32): must be float32\n(nothing was launched;") in message
    assert tally == {"launch": {ENTRY.kernel: 1}, "refused": {ENTRY.kernel: 1}}


def test_a_broken_postcondition_counts_the_write_and_the_refusal(
        tally: dict[str, dict[str, int]], found: list[Violation]) -> None:
    launch_guard.check_written(ENTRY, {}, "here.py:1")
    assert tally == {"wrote": {ENTRY.kernel: 1}}
    found.extend(BAD)
    with pytest.raises(KernelContractViolation, match=r"wrote outputs its consumers cannot read; called at here.py:1"):
        launch_guard.check_written(ENTRY, {}, "here.py:1")
    assert tally == {"wrote": {ENTRY.kernel: 2}, "refused": {ENTRY.kernel: 1}}


# ---------------------------------------------------------------- CUDA graphs


def test_a_capture_end_with_nothing_capturing_is_harmless(graph_class: type) -> None:
    launch_guard._GRAPHS.stack().clear()
    graph_class().capture_end()
    assert launch_guard._GRAPHS.capturing() is None


def test_each_replay_counts_its_captured_launches_and_a_refusal(
        graph_class: type, tally: dict[str, dict[str, int]], found: list[Violation]) -> None:
    kernel = launch_guard.guarded(ENTRY, _kernel)
    graph = graph_class()
    graph.capture_begin()
    kernel("s")
    graph.capture_end()
    graph.replay()
    graph.replay()
    assert tally == {"launch": {ENTRY.kernel: 1}, "replay": {ENTRY.kernel: 2}}
    found.extend(BAD)
    with pytest.raises(KernelContractViolation, match="when this CUDA graph replays"):
        graph.replay()
    assert tally == {"launch": {ENTRY.kernel: 1}, "replay": {ENTRY.kernel: 3}, "refused": {ENTRY.kernel: 1}}
