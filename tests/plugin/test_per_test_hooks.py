"""What every test and every session pays for the plugin (bench/bench_kit_overhead.py measures it):
a run that uses nothing of dsakit gets no hook call per test phase and loads a handful of modules,
none through the assertion-rewriting hook but the plugin's own; a run that uses dsakit reads its
skips from the terminal reporter's reports at the end (the skip recorder's hook only where every
outcome is recorded, or no terminal reporter keeps them), and fault isolation's setup hook waits for
a poisoned context. The report wrapper starts
once torch or a device simulation is imported (in the phase that imports it) or a conftest answers
`pytest_dsakit_device_fault`.
"""

from __future__ import annotations

import json
import sys

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())
PER_TEST = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown",
            "pytest_runtest_makereport", "pytest_runtest_logreport")

# printed by the test itself: the dsakit hook implementations each per-test hook calls, the
# dsakit modules loaded, and which of them the assertion-rewriting hook loaded
FACTS = f"PER_TEST = {PER_TEST!r}\n" + '''
import json, sys

def facts(config):
    pm = config.pluginmanager
    hooks = {}
    for hook in PER_TEST:
        names = (pm.get_name(impl.plugin) or "" for impl in getattr(pm.hook, hook).get_hookimpls())
        hooks[hook] = sorted(name for name in names if name.startswith("dsakit"))
    modules = sorted(m for m in sys.modules if m == "dsakit" or m.startswith("dsakit."))
    rewritten = sorted(m for m in modules
                       if type(getattr(sys.modules[m], "__loader__", None)).__name__ == "AssertionRewritingHook")
    print("DSAKIT-FACTS " + json.dumps({"hooks": hooks, "modules": modules, "rewritten": rewritten}))
'''


def _facts(result: pytest.RunResult) -> dict[str, dict[str, list[str]] | list[str]]:
    lines = [line.split("DSAKIT-FACTS ", 1)[1] for line in result.outlines if "DSAKIT-FACTS " in line]
    assert len(lines) == 1, result.outlines
    facts: dict[str, dict[str, list[str]] | list[str]] = json.loads(lines[0])
    return facts


def test_an_unused_session_pays_no_hook_call_per_test_and_loads_little(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(facts_helper=FACTS, test_unrelated=(
        "import pytest\nfrom facts_helper import facts\n\n"
        "def test_a(request):\n    facts(request.config)\n\n"
        "def test_b():\n    pytest.skip('[looks-coded] but no dsakit')\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-s")
    result.assert_outcomes(passed=1, skipped=1)
    facts = _facts(result)
    assert facts["hooks"] == {hook: [] for hook in PER_TEST}
    loaded = set(facts["modules"])
    # the gate table, the device model, GPU pinning, fault isolation, output paths and the contract
    # load on first use (pinning and the xdist hand-overs: when asked for / distributing); the device
    # table (the options' help) loads, with the import-free base of its records (dsakit.reasons)
    for module in ("dsakit.gates.table", "dsakit.gates.device_model", "dsakit.node.gpu_pinning",
                   "dsakit.node.fault_isolation", "dsakit.output_paths",
                   "dsakit.mocks.read_log", "dsakit.contracts.model_runner_contract"):
        assert module not in loaded, sorted(loaded)
    assert set(facts["rewritten"]) <= {"dsakit", "dsakit.plugin"}
    assert "dsakit skip inventory" not in result.stdout.str()


def test_a_session_using_dsakit_adds_no_hook_call_per_test_phase(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(facts_helper=FACTS, test_used=(
        "from facts_helper import facts\n\n"
        "def test_a(request, target_runner):\n    facts(request.config)\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-s")
    result.assert_outcomes(passed=1)
    hooks = _facts(result)["hooks"]
    assert isinstance(hooks, dict)
    # fault isolation edits reports inside the one wrapper, which waits for torch; its setup hook
    # waits for a poisoned context
    assert hooks == {"pytest_runtest_setup": [], "pytest_runtest_call": [], "pytest_runtest_teardown": [],
                     "pytest_runtest_makereport": [], "pytest_runtest_logreport": []}


GATED = ("import dsakit\nfrom facts_helper import facts\n\n"
         "def test_a(request):\n    facts(request.config)\n\n"
         "@dsakit.gate('rocm')\ndef test_rocm():\n    pass\n")


@pytest.mark.parametrize(("args", "recorder"), [
    ((), []),
    (("--dsakit-report", "r.json"), ["dsakit-skip-recorder"]),  # every outcome, report by report
    (("-p", "no:terminal"), ["dsakit-skip-recorder"]),  # no terminal reporter keeps the reports
], ids=["skips-read-at-the-end", "report", "no-terminal"])
def test_the_skip_recorders_hook_runs_only_where_no_kept_report_serves(
        pytester: pytest.Pytester, args: tuple[str, ...], recorder: list[str]) -> None:
    """Each way the skip inventory gets its reports counts the gated skip: the must-run verdict fails
    the run on it (exit 1), with and without the terminal reporter."""
    pytester.makepyfile(facts_helper=FACTS, test_gated=GATED)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:xdist", "-s",
                                           "--dsakit-must-run=rocm", *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    hooks = _facts(result)["hooks"]
    assert isinstance(hooks, dict) and hooks["pytest_runtest_logreport"] == recorder
    if "no:terminal" not in args:
        result.stdout.fnmatch_lines(["*1 passed, 1 skipped, 1 --dsakit-must-run gate(s) failed*"])
    if "--dsakit-report" in args:
        written = json.loads((pytester.path / "r.json").read_text())
        assert written["skips"]["total"] == 1


LATE_TORCH = """
import sys

def test_1_imports_torch_and_faults(target_runner, monkeypatch):
    assert "torch" not in sys.modules  # nothing imported torch before this call phase
    import torch
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)  # what a real kernel fault leaves
    def synchronize():
        raise RuntimeError("CUDA error: device-side assert triggered")
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)

def test_2_after():
    pass
"""


def test_the_phase_that_first_imports_torch_is_checked_for_a_device_fault(pytester: pytest.Pytester) -> None:
    """The report wrapper (fault isolation's check) starts when torch is first looked for, before
    the phase that imports it ends: a fault there is blamed on that test's call phase."""
    pytest.importorskip("torch")
    pytester.makepyfile(test_late=LATE_TORCH)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*test_1_imports_torch_and_faults left a sticky device error (found after its "
                                 "call phase)*", "*kernel error: RuntimeError: CUDA error: device-side assert*"])


def test_a_conftest_answering_the_fault_hook_starts_the_report_wrapper(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("def pytest_dsakit_device_fault(item):\n    return None\n")
    pytester.makepyfile(facts_helper=FACTS, test_probe=(
        "from facts_helper import facts\n\ndef test_a(request, target_runner):\n    facts(request.config)\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-s")
    result.assert_outcomes(passed=1)
    hooks = _facts(result)["hooks"]
    assert isinstance(hooks, dict) and hooks["pytest_runtest_makereport"] == ["dsakit-report-edits"]


def test_the_report_wrappers_import_watch_leaves_sys_meta_path_as_it_was(pytester: pytest.Pytester) -> None:
    from dsakit.stack.import_hooks import ImportWatch

    pytester.makepyfile(test_nothing="def test_a():\n    pass\n")
    script = pytester.makepyfile(check=(
        "import sys\nimport pytest\nimport dsakit  # a checkout's own finder, for dsakit.mocks, is there before\n"
        "before = list(sys.meta_path)\n"
        f"code = pytest.main([*{PLUGIN!r}, '-p', 'no:cacheprovider', '-q', 'test_nothing.py'])\n"
        "print('SAME', int(code), before == list(sys.meta_path))\n"))
    done = pytester.run(sys.executable, str(script))
    assert "SAME 0 True" in done.stdout.str()
    watch = ImportWatch()
    started: list[str] = []
    try:
        watch.looked_for(("not_a_module_anywhere",), lambda: started.append("looked for"))
        assert watch.find_spec("not_a_module_anywhere") is None and started == ["looked for"]  # finds nothing
        assert watch.find_spec("not_a_module_anywhere") is None and started == ["looked for"]  # once
    finally:
        watch.close()
    assert all(finder is not watch for finder in sys.meta_path)
    from dsakit.gates.report_edits import FAULT_ISOLATION
    from dsakit.node.fault_isolation import PLUGIN_NAME

    assert PLUGIN_NAME == FAULT_ISOLATION  # the name the wrapper's start ignores


def test_a_dsakit_option_starts_the_per_test_hooks_at_configure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(facts_helper=FACTS, test_unrelated=(
        "from facts_helper import facts\n\ndef test_a(request):\n    facts(request.config)\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-s", "--dsakit-must-run=cuda")
    result.assert_outcomes(passed=1)
    hooks = _facts(result)["hooks"]
    assert isinstance(hooks, dict) and hooks["pytest_runtest_logreport"] == []  # skips: read at the end
    assert "dsakit.node.fault_isolation" in _facts(result)["modules"]


def test_require_in_a_session_that_collected_nothing_of_dsakit_inventories_every_skip(
        pytester: pytest.Pytester) -> None:
    """The skip inventory starts at the first `require()`; the skips before it still count (the
    terminal reporter's), as they did when the recorder ran from configure."""
    pytester.makepyfile(test_late=(
        "import pytest\nimport dsakit\n\n"
        "def test_1_plain_coded():\n    pytest.skip('[my-code] before any dsakit use')\n\n"
        "def test_2_plain():\n    pytest.skip('plain')\n\n"
        "def test_3_requires():\n    dsakit.require('rocm')\n\n"
        "def test_4_after():\n    pytest.skip('[my-code] after')\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:xdist", "--dsakit-device=cpu")
    result.assert_outcomes(skipped=4)
    result.stdout.fnmatch_lines(["*dsakit skip inventory*", "*", "   2 skipped  [[]my-code[]] before any dsakit use",
                                 "   1 skipped  [[]rocm[]]*", "   1 skipped  [[]uncoded[]] plain"])
    plain = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:xdist")  # no option at all
    plain.assert_outcomes(skipped=4)
    plain.stdout.fnmatch_lines(["*dsakit skip inventory*", "*", "   2 skipped  [[]my-code[]] before any dsakit use",
                                "   1 skipped  [[]rocm[]]*", "   1 skipped  [[]uncoded[]] plain"])


def test_assertion_helpers_are_rewritten_the_rest_loads_plainly(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_loaders=(
        "import sys\nimport dsakit.topk.checks, dsakit.topk.snapshot, dsakit.gates.table, dsakit.mocks.model_runner\n\n"
        "def loader(name):\n    return type(sys.modules[name].__loader__).__name__\n\n"
        "def test_loaders():\n"
        "    assert loader('dsakit.topk.checks') == loader('dsakit.topk.snapshot') == 'AssertionRewritingHook'\n"
        "    assert loader('dsakit.gates.table') != 'AssertionRewritingHook'\n"
        "    assert loader('dsakit.gates.marks') != 'AssertionRewritingHook'\n"))
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly")
    result.assert_outcomes(passed=1)


def test_gate_marks_are_built_once_per_code_tuple() -> None:
    import dsakit
    from dsakit.errors import UsageError

    mark = dsakit.gate("sglang:dsa-backend", "sglang:topk-role-split")
    assert dsakit.gate("sglang:dsa-backend", "sglang:topk-role-split") is mark
    assert mark.args == ("sglang:dsa-backend", "sglang:topk-role-split")
    assert dsakit.gate("cuda") is not mark and dsakit.gate("cuda").args == ("cuda",)
    for _ in range(2):  # a refusal is not cached away
        with pytest.raises(UsageError, match="no-such-gate"):
            dsakit.gate("no-such-gate")
    with pytest.raises(UsageError, match="strings"):
        dsakit.gate(["cuda"])  # type: ignore[arg-type]  # unhashable: refused by name, not a TypeError
