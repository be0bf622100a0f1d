"""Benchmark: what dsakit's plugin, fixtures and gate marks cost on top of plain pytest (CPU).

Generates a matrix of `--cells` no-op tests (default 1,000) three ways, in a scratch directory with
its own pytest.ini (the checkout's addopts and conftest stay out of it):

  plain    `-p no:dsakit`; the same parametrization spelled with plain `parametrize`
           (role=target/draft x cells), no fixtures, no marks
  plain+fixture  the same, each test taking a hand-written SimpleNamespace runner fixture (what a
           suite writes without dsakit: the cost of having a fixture at all)
  plugin   the plain file with the dsakit plugin loaded (the plugin's fixed cost alone)
  dsakit   `model_runner` (role-parametrized by the plugin), `target_runner`, `draft_runner`
           and `dsakit.gate(...)` marks on every param (gates open on a CPU box, so every body runs)

Each is timed as a subprocess (wall clock, best and median of `--repeats`): `--collect-only` and a
full run, separately. The full runs also load `bench/phase_timing.py`, which records pytest's own
per-phase durations; setup + teardown per test is the fixture cost. Prints a markdown table and
writes JSON with `--json`. Targets: dsakit full run <= 1.05x plain, < 0.3 ms per test of
setup + teardown.

A second table is the unused overhead per session: a one-test suite that uses nothing of dsakit,
with the plugin loaded and with `-p no:dsakit`, interleaved `--session-repeats` times (best and
median difference in seconds; target <= 0.02 s). `--profile` runs the dsakit variant once under cProfile and prints the top
functions by cumulative and by own time. A last line times the runner itself (timeit, in a
subprocess): building a MockModelRunner, and building one plus reading through it.

`--instructions` replaces the timing with one run per variant under valgrind's callgrind and
compares instructions executed: a count the neighbours on a shared box do not move. The hash seed
does move it (~0.1%): `--seeds N` runs every variant under PYTHONHASHSEED 0..N-1 and shows the
median and range. With `--cells 4` the same matrix at 4 tests gives the part paid once per session
(bench/README.md splits the 1,000-test run with it).

    python bench/bench_kit_overhead.py [--cells 1000] [--repeats 7] [--json out.json] [--profile]
    python bench/bench_kit_overhead.py --instructions [--seeds 3] [--tree NAME=PYTHON ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
KIT_CODE = r"(dsakit|mocks|contracts)/([a-z_]+/)*[a-z_]+\.py"  # pstats restriction: the kit's own
# functions, its wings (gates/, node/, simulation/, ...) included

# Gates that are open on a CPU box with SGLang 0.5.23 installed: every body runs, so the fixture
# work is measured, while apply_gates still resolves the device and evaluates each mark.
OPEN_GATES = ("sglang:dsa-backend", "sglang:topk-role-split")

PLAIN = '''
import pytest

CELLS = list(range({per}))
ROLES = ["target", "draft"]


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("role", ROLES, ids=[f"role={{r}}" for r in ROLES])
def test_model_runner(role, cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_target(cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_draft(cell):
    pass
'''

# plain pytest with the hand-written stand-in a suite writes without dsakit: the cost of having a
# fixture at all, which no kit can avoid
PLAIN_FIXTURE = '''
import types

import pytest

CELLS = list(range({per}))
ROLES = ["target", "draft"]


def _runner(role):
    return types.SimpleNamespace(is_draft_worker=role == "draft", max_running_requests=256,
                                 model_config=types.SimpleNamespace(context_len=163840))


@pytest.fixture
def model_runner(role):
    return _runner(role)


@pytest.fixture
def target_runner():
    return _runner("target")


@pytest.fixture
def draft_runner():
    return _runner("draft")


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("role", ROLES, ids=[f"role={{r}}" for r in ROLES])
def test_model_runner(model_runner, cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_target(target_runner, cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_draft(draft_runner, cell):
    pass
'''

# pytest's own cost of what the dsakit variant declares, without dsakit: the hand-written fixtures
# and a plain mark with the same arguments on every param (the `gate_like` marker, registered in
# the matrix's pytest.ini as dsakit registers `dsakit_requires`)
PLAIN_FIXTURE_MARKS = PLAIN_FIXTURE.replace(
    "CELLS = list(range({per}))",
    "CELLS = [pytest.param(i, marks=pytest.mark.gate_like({gates})) for i in range({per})]")

DSAKIT = '''
import pytest

import dsakit

CELLS = [pytest.param(i, marks=dsakit.gate({gates})) for i in range({per})]


@pytest.mark.parametrize("cell", CELLS)
def test_model_runner(model_runner, cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_target(target_runner, cell):
    pass


@pytest.mark.parametrize("cell", CELLS)
def test_draft(draft_runner, cell):
    pass
'''

VARIANTS = {
    # name: (test module text, extra pytest args)
    "plain": ("plain", ["-p", "no:dsakit"]),
    "plain+fixture": ("plain_fixture", ["-p", "no:dsakit"]),
    "plain+fixture+marks": ("plain_fixture_marks", ["-p", "no:dsakit"]),
    "plugin": ("plain", []),
    "dsakit": ("dsakit", []),
}


def write_matrix(root: Path, cells: int) -> dict[str, Path]:
    """The two test modules (4 tests per `per` cells: 2 roles + target + draft) and a pytest.ini."""
    if cells % 4:
        raise SystemExit(f"--cells must be a multiple of 4 (2 roles + target + draft), got {cells}")
    per = cells // 4
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    gate_like(*codes): a plain mark (bench)\n")
    files = {}
    gates = ", ".join(map(repr, OPEN_GATES))
    for name, text in (("plain", PLAIN.format(per=per)),
                       ("plain_fixture", PLAIN_FIXTURE.format(per=per)),
                       ("plain_fixture_marks", PLAIN_FIXTURE_MARKS.format(per=per, gates=gates)),
                       ("dsakit", DSAKIT.format(per=per, gates=", ".join(map(repr, OPEN_GATES))))):
        d = root / f"matrix_{name}"  # not "dsakit/": cwd is on sys.path
        d.mkdir()
        files[name] = d / f"test_matrix_{name}.py"
        files[name].write_text(textwrap.dedent(text))
    return files


# Bytecode caching as a normal install has it, kept out of the checkout: PYTHONDONTWRITEBYTECODE
# (set on some dev boxes) would make every run re-compile and re-assert-rewrite every module of
# the dsakit distribution, which pytest marks for rewriting because the plugin is an entry point.
PYCACHE: dict[str, str] = {}


def _env(phases: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    if PYCACHE.get("mode") == "on":
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = PYCACHE["prefix"]
    elif PYCACHE.get("mode") == "off":
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH_DIR), env.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTEST_XDIST_AUTO_NUM_WORKERS", None)
    if phases is not None:
        env["DSAKIT_BENCH_PHASES"] = str(phases)
    return env


def pytest_cmd(root: Path, test_file: Path, extra: list[str], *, collect: bool) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-c", str(root / "pytest.ini"), "--rootdir", str(root),
           "-q", "-p", "no:cacheprovider", *extra]
    if collect:
        cmd.append("--collect-only")
    else:
        cmd += ["-p", "phase_timing"]
    return cmd + [str(test_file)]


def time_once(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s, CPU s = user + sys of the child): CPU time is less disturbed by a busy box."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def phase_stats(path: Path) -> dict[str, float]:
    tests = json.loads(path.read_text())["tests"]
    st = [t.get("setup", 0.0) + t.get("teardown", 0.0) for t in tests.values()]
    st_cpu = [t.get("setup_cpu", 0.0) + t.get("teardown_cpu", 0.0) for t in tests.values()]
    call = [t.get("call", 0.0) for t in tests.values()]
    passed = sum(t.get("outcome") == "passed" for t in tests.values())
    return {
        "tests": len(tests),
        "passed": passed,
        "setup_teardown_mean_ms": 1e3 * statistics.fmean(st),
        "setup_teardown_median_ms": 1e3 * statistics.median(st),
        "setup_teardown_max_ms": 1e3 * max(st),
        "setup_teardown_cpu_mean_ms": 1e3 * statistics.fmean(st_cpu),
        "setup_teardown_cpu_median_ms": 1e3 * statistics.median(st_cpu),
        "call_mean_ms": 1e3 * statistics.fmean(call),
    }


def measure(cells: int, repeats: int) -> dict[str, Any]:
    results: dict[str, Any] = {"cells": cells, "repeats": repeats,
                               "bytecode_cache": PYCACHE.get("mode", "inherit"), "variants": {}}
    with tempfile.TemporaryDirectory(prefix="dsakit-bench-") as tmp:
        root = Path(tmp)
        PYCACHE["prefix"] = str(root / "pycache")
        files = write_matrix(root, cells)
        walls: dict[str, dict[str, list[float]]] = {v: {"collect": [], "run": []} for v in VARIANTS}
        cpus: dict[str, dict[str, list[float]]] = {v: {"collect": [], "run": []} for v in VARIANTS}
        phases: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
        # warm the OS page cache and __pycache__ once per variant, then interleave the variants
        # (round-robin) so drift on a shared box hits them alike
        for name, (module, extra) in VARIANTS.items():
            time_once(pytest_cmd(root, files[module], extra, collect=False), _env(None), root)
        for _ in range(repeats):
            for name, (module, extra) in VARIANTS.items():
                for collect in (True, False):
                    kind = "collect" if collect else "run"
                    ph = root / f"phases-{name}.json"
                    wall, cpu = time_once(pytest_cmd(root, files[module], extra, collect=collect),
                                          _env(None if collect else ph), root)
                    walls[name][kind].append(wall)
                    cpus[name][kind].append(cpu)
                    if not collect:
                        phases[name].append(phase_stats(ph))
        results["runner_us"] = runner_micro()  # inside: its bytecode cache is this run's
        for name in VARIANTS:
            entry: dict[str, Any] = {}
            for kind in ("collect", "run"):
                xs, cs = walls[name][kind], cpus[name][kind]
                entry[kind] = {"best_s": min(xs), "median_s": statistics.median(xs),
                               "cpu_best_s": min(cs), "all_s": xs, "cpu_all_s": cs}
            ph_runs = phases[name]
            # per-test phase numbers: best of the runs for each (least disturbed), as for walls
            entry["phases"] = {key: min(p[key] for p in ph_runs) for key in ph_runs[0]}
            results["variants"][name] = entry
    plain = results["variants"]["plain"]
    for name, entry in results["variants"].items():
        for kind in ("collect", "run"):
            e, p = entry[kind], plain[kind]
            e["ratio_best"] = e["best_s"] / p["best_s"]
            e["ratio_median"] = e["median_s"] / p["median_s"]
            e["ratio_cpu_best"] = e["cpu_best_s"] / p["cpu_best_s"]
        entry["extra_per_test_ms_vs_plain"] = 1e3 * (entry["run"]["best_s"] - plain["run"]["best_s"]) / cells
        entry["fixture_ms_vs_plain"] = (entry["phases"]["setup_teardown_mean_ms"]
                                        - plain["phases"]["setup_teardown_mean_ms"])
        entry["fixture_cpu_ms_vs_plain"] = (entry["phases"]["setup_teardown_cpu_mean_ms"]
                                            - plain["phases"]["setup_teardown_cpu_mean_ms"])
    return results


UNUSED_SUITE = "def test_nothing_of_dsakit():\n    pass\n"


def session_overhead(repeats: int) -> dict[str, Any]:
    """A session that uses no dsakit feature: plugin loaded vs `-p no:dsakit`, side by side
    (alternating order, so drift on a shared box hits both alike)."""
    with tempfile.TemporaryDirectory(prefix="dsakit-bench-session-") as tmp:
        root = Path(tmp)
        PYCACHE["prefix"] = str(root / "pycache")
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "unused").mkdir()
        test = root / "unused" / "test_unused.py"
        test.write_text(UNUSED_SUITE)
        cmd = {"plain": [*pytest_cmd(root, test, ["-p", "no:dsakit"], collect=True)[:-2], str(test)],
               "plugin": [*pytest_cmd(root, test, [], collect=True)[:-2], str(test)]}
        walls: dict[str, list[float]] = {"plain": [], "plugin": []}
        cpus: dict[str, list[float]] = {"plain": [], "plugin": []}
        for name in cmd:  # warm
            time_once(cmd[name], _env(None), root)
        for k in range(repeats):
            for name in (("plain", "plugin") if k % 2 == 0 else ("plugin", "plain")):
                wall, cpu = time_once(cmd[name], _env(None), root)
                walls[name].append(wall)
                cpus[name].append(cpu)
    return {
        "repeats": repeats,
        "plain_best_s": min(walls["plain"]), "plugin_best_s": min(walls["plugin"]),
        "extra_best_s": min(walls["plugin"]) - min(walls["plain"]),
        "extra_median_s": statistics.median(walls["plugin"]) - statistics.median(walls["plain"]),
        "extra_cpu_best_s": min(cpus["plugin"]) - min(cpus["plain"]),
        "all_s": walls, "cpu_all_s": cpus,
    }


def session_markdown(result: dict[str, Any]) -> str:
    return "\n".join([
        f"unused session (one test, no dsakit feature), best / median of {result['repeats']}:",
        "",
        "| | plain `-p no:dsakit` | plugin loaded, unused | extra wall best / median | extra CPU best |",
        "|---|---|---|---|---|",
        f"| session | {result['plain_best_s']:.3f} s | {result['plugin_best_s']:.3f} s "
        f"| {result['extra_best_s']:+.3f} / {result['extra_median_s']:+.3f} s | {result['extra_cpu_best_s']:+.3f} s |",
        "",
        f"target: extra <= 0.020 s per session (best: {result['extra_best_s']:+.3f} s)",
    ])


# What the runner fixture body costs by itself (timeit in a fresh interpreter, best of 5): the tree
# is built lazily, so a test that only passes the runner through pays for the first line only.
RUNNER_MICRO = r"""
import json, timeit
from dsakit.mocks.model_runner import MockModelRunner as R
stmts = {
    "construct": "R('target')",
    "construct + 1 read": "R('target').max_running_requests",
    "construct + 3-level read": "R('target').model_config.hf_config.index_topk",
    "construct with overrides": "R('target', max_running_requests=8, model_config__context_len=4096)",
}
n = 20000
print(json.dumps({k: 1e6 * min(timeit.repeat(v, globals=globals(), number=n, repeat=5)) / n
                  for k, v in stmts.items()}))
"""


def runner_micro() -> dict[str, float]:
    """Microseconds per MockModelRunner operation (see RUNNER_MICRO)."""
    proc = subprocess.run([sys.executable, "-c", RUNNER_MICRO], env=_env(None), stdout=subprocess.PIPE,
                          text=True, check=True)
    return json.loads(proc.stdout)


def markdown(results: dict[str, Any]) -> str:
    lines = [
        f"{results['cells']} no-op tests; one pytest subprocess per measurement, best / median of "
        f"{results['repeats']} (wall); x plain = best / plain's best for wall and for CPU (user+sys); "
        f"setup+teardown per test = mean over the tests, best run; bytecode cache "
        f"{results['bytecode_cache']}",
        "",
        "| variant | collect best / median | x plain wall, CPU | full run best / median | x plain wall, CPU "
        "| setup+teardown / test wall, CPU | CPU vs plain |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in results["variants"].items():
        c, r, ph = e["collect"], e["run"], e["phases"]
        lines.append(
            f"| {name} | {c['best_s']:.3f} / {c['median_s']:.3f} s "
            f"| {c['ratio_best']:.2f}x, {c['ratio_cpu_best']:.2f}x "
            f"| {r['best_s']:.3f} / {r['median_s']:.3f} s | {r['ratio_best']:.2f}x, {r['ratio_cpu_best']:.2f}x "
            f"| {ph['setup_teardown_mean_ms']:.3f}, {ph['setup_teardown_cpu_mean_ms']:.3f} ms "
            f"| {e['fixture_cpu_ms_vs_plain']:+.3f} ms |")
    d = results["variants"]["dsakit"]
    lines += [
        "",
        f"targets: full run dsakit / plain = {d['run']['ratio_best']:.2f}x wall, "
        f"{d['run']['ratio_cpu_best']:.2f}x CPU (target <= 1.05x); setup+teardown = "
        f"{d['phases']['setup_teardown_mean_ms']:.3f} ms wall / "
        f"{d['phases']['setup_teardown_cpu_mean_ms']:.3f} ms CPU per test, "
        f"{d['fixture_cpu_ms_vs_plain']:+.3f} ms CPU vs plain (target < 0.3 ms); "
        f"median / plain's median = {d['run']['ratio_median']:.2f}x wall",
    ]
    if "runner_us" in results:
        lines += ["", "runner alone (timeit, us per operation): " + ", ".join(
            f"{name} {us:.2f}" for name, us in results["runner_us"].items())]
    return "\n".join(lines)


def profile(cells: int, top: int) -> None:
    """The dsakit variant once under cProfile, in a subprocess (pytest.main in a fresh process)."""
    with tempfile.TemporaryDirectory(prefix="dsakit-bench-prof-") as tmp:
        root = Path(tmp)
        PYCACHE["prefix"] = str(root / "pycache")
        files = write_matrix(root, cells)
        if PYCACHE.get("mode") == "on":  # fill the cache first, as measure() does
            time_once(pytest_cmd(root, files["dsakit"], [], collect=False), _env(None), root)
        prof = root / "run.prof"
        cmd = pytest_cmd(root, files["dsakit"], [], collect=False)
        cmd[1:1] = ["-m", "cProfile", "-o", str(prof)]  # python -m cProfile -o F -m pytest ...
        subprocess.run(cmd, env=_env(root / "ph.json"), cwd=root, stdout=subprocess.DEVNULL, check=True)
        import pstats

        for key in ("cumulative", "tottime"):
            print(f"--- top {top} by {key}")
            pstats.Stats(str(prof)).sort_stats(key).print_stats(top)
        # dsakit's own functions (plugin, gates, mocks, contracts), whatever pytest spends around them
        print(f"--- dsakit's own code, top {top} by cumulative")
        pstats.Stats(str(prof)).sort_stats("cumulative").print_stats(KIT_CODE, top)


def _callgrind(cmd: list[str], env: dict[str, str], cwd: Path, what: str) -> int:
    """Instructions executed (Ir) by one run of `cmd` under callgrind (after one run that fills the
    bytecode cache)."""
    import re

    time_once(cmd, env, cwd)
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                          env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind run of {what} failed ({done.returncode}): {done.stderr[-2000:]}")
    return int(found.group(1))


def _is_interpreter(tree: str | None) -> bool:
    return tree is not None and os.path.isfile(tree)


def _tree_cmd(cmd: list[str], tree: str | None) -> list[str]:
    """`cmd` run by the tree's own interpreter where the tree is one (a venv's python)."""
    return [tree, *cmd[1:]] if tree is not None and _is_interpreter(tree) else cmd


def _tree_env(env: dict[str, str], tree: str | None) -> dict[str, str]:
    """`env` with a dsakit tree first on PYTHONPATH (after the bench folder): its `dsakit` is the
    one the plugin entry point imports (None, or an interpreter: as inherited)."""
    if tree is None or _is_interpreter(tree):
        return env
    rest = [part for part in env["PYTHONPATH"].split(os.pathsep) if part and part != str(BENCH_DIR)]
    return {**env, "PYTHONPATH": os.pathsep.join([str(BENCH_DIR), tree, *rest])}


def instructions_over_seeds(cells: int, trees: dict[str, str | None], seeds: int) -> dict[str, Any]:
    """`instructions` once per hash seed (PYTHONHASHSEED 0 .. seeds-1): the string hashes, and with
    them set and dict orders, move a run's count by ~0.1% (measured: 4,352-4,360 M for the same
    variant over four seeds), which is as large as the differences this bench looks for. Each
    variant's median over the seeds, and its lowest and highest count."""
    runs = []
    before = os.environ.get("PYTHONHASHSEED")
    try:
        for seed in range(seeds):
            os.environ["PYTHONHASHSEED"] = str(seed)  # the children inherit it (_env)
            runs.append(instructions(cells, trees))
    finally:
        if before is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = before
    return {"median": {key: int(statistics.median(run[key] for run in runs)) for key in runs[0]},
            "low": {key: min(run[key] for run in runs) for key in runs[0]},
            "high": {key: max(run[key] for run in runs) for key in runs[0]},
            "seeds": seeds, "runs": runs}


def instructions(cells: int, trees: dict[str, str | None]) -> dict[str, int]:
    """Each variant's full run once under valgrind's callgrind: instructions executed (Ir). Unlike
    wall or CPU time this count does not move with the neighbours' load on a shared box (~50x
    slower than a plain run: minutes per variant). The variants that load dsakit run once per tree
    (`--tree NAME=PATH`: side by side in one run), and so does the unused one-test session."""
    import shutil

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (callgrind) on PATH")
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="dsakit-bench-ir-") as tmp:
        root = Path(tmp)
        PYCACHE["prefix"] = str(root / "pycache")
        files = write_matrix(root, cells)
        for name, (module, extra) in VARIANTS.items():
            for label, tree in (trees.items() if "no:dsakit" not in extra else [("", None)]):
                cmd = pytest_cmd(root, files[module], extra, collect=False)
                key = f"{name} ({label})" if label else name
                counts[key] = _callgrind(_tree_cmd(cmd, tree), _tree_env(_env(root / "ph.json"), tree), root, key)
        (root / "unused").mkdir()
        test = root / "unused" / "test_unused.py"
        test.write_text(UNUSED_SUITE)
        sessions = [("session: -p no:dsakit", None, ["-p", "no:dsakit"])]
        sessions += [(f"session: plugin ({label})" if label else "session: plugin", tree, [])
                     for label, tree in trees.items()]
        for key, tree, extra in sessions:
            cmd = [*pytest_cmd(root, test, extra, collect=True)[:-2], str(test)]
            counts[key] = _callgrind(_tree_cmd(cmd, tree), _tree_env(_env(None), tree), root, key)
    return counts


def instructions_markdown(counts: dict[str, int], cells: int, spread: dict[str, Any] | None = None) -> str:
    """The table; with `spread` (instructions_over_seeds), `counts` are the medians and each row shows
    its range over the seeds, and the dsakit rows their ratio to pytest's own cost of the same
    declarations (`plain+fixture+marks`)."""
    plain, session = counts["plain"], counts["session: -p no:dsakit"]
    own = counts["plain+fixture+marks"]
    over = f" over {spread['seeds']} hash seeds (median; low-high)" if spread else ""
    lines = [f"{cells} no-op tests, full run once per variant{over} under callgrind: instructions executed",
             "", "| variant | instructions | x plain | over pytest's own (`plain+fixture+marks`) |",
             "|---|---|---|---|"]
    for name, n in counts.items():
        if name.startswith("session"):
            continue
        shown = f"{n / 1e9:.4f} G"
        if spread:
            shown += f" ({spread['low'][name] / 1e9:.4f}-{spread['high'][name] / 1e9:.4f})"
        ratio = f"{n / own:.4f}x" if name.startswith("dsakit") else ""
        if ratio and spread:
            ratio += f" ({spread['low'][name] / spread['high']['plain+fixture+marks']:.4f}-" \
                     f"{spread['high'][name] / spread['low']['plain+fixture+marks']:.4f})"
        lines.append(f"| {name} | {shown} | {n / plain:.3f}x | {ratio} |")
    lines += ["", "unused session (one test, nothing of dsakit), the same way:", "",
              "| session | instructions | vs `-p no:dsakit` |", "|---|---|---|"]
    lines += [f"| {name.removeprefix('session: ')} | {n / 1e6:.1f} M | {(n - session) / 1e6:+.1f} M |"
              for name, n in counts.items() if name.startswith("session")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    ap.add_argument("--profile", action="store_true", help="also profile the dsakit variant once")
    ap.add_argument("--only-profile", action="store_true", help="profile the dsakit variant once, nothing else")
    ap.add_argument("--instructions", action="store_true",
                    help="instead of timing: each variant once under valgrind callgrind, instructions "
                    "executed (steady on a shared box; minutes per variant)")
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=PATH",
                    help="with --instructions: measure the variants that load dsakit once per dsakit tree "
                    "(a checkout or an export of one, first on PYTHONPATH; or a checkout's own interpreter, "
                    "its venv's bin/python), side by side in one run; default: the dsakit this interpreter "
                    "imports. An interpreter with an editable install maps dsakit.mocks / dsakit.contracts "
                    "(and any module a tree lacks) to its own checkout: give each checkout's interpreter")
    ap.add_argument("--seeds", type=int, default=1, metavar="N",
                    help="with --instructions: each variant once per PYTHONHASHSEED 0..N-1, the median "
                    "and range (a seed moves a count by ~0.1%%)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--session-repeats", type=int, default=15,
                    help="repeats of the unused-session pair (0: skip it)")
    ap.add_argument("--only-session", action="store_true", help="measure the unused session only")
    ap.add_argument("--bytecode-cache", choices=("on", "off", "inherit"), default="on",
                    help="on (default): a private PYTHONPYCACHEPREFIX, warmed first, as an installed "
                    "package has; off: PYTHONDONTWRITEBYTECODE=1 (every run compiles); inherit: as is")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds {args.seeds}: expected a count of hash seeds >= 1")
    PYCACHE["mode"] = args.bytecode_cache
    if args.only_profile:
        profile(args.cells, args.top)
        return 0
    if args.instructions:
        trees: dict[str, str | None] = {}
        for spec in args.tree:
            name, sep, path = spec.partition("=")
            if not sep or not name or not ((Path(path) / "dsakit" / "__init__.py").is_file()
                                           or (Path(path).is_file() and os.access(path, os.X_OK))):
                ap.error(f"--tree {spec!r}: expected NAME=PATH, PATH a tree holding dsakit/__init__.py "
                         "or a Python interpreter (a checkout's .venv/bin/python)")
            trees[name] = str(Path(path).absolute()) if Path(path).is_file() else str(Path(path).resolve())
        if args.seeds > 1:
            spread = instructions_over_seeds(args.cells, trees or {"": None}, args.seeds)
            print(instructions_markdown(spread["median"], args.cells, spread))
            if args.json:
                args.json.write_text(json.dumps({"instructions": spread["median"], "over_seeds": spread}, indent=2))
            return 0
        counts = instructions(args.cells, trees or {"": None})
        print(instructions_markdown(counts, args.cells))
        if args.json:
            args.json.write_text(json.dumps({"instructions": counts}, indent=2))
        return 0
    session = session_overhead(args.session_repeats) if args.session_repeats else None
    if session is not None:
        print(session_markdown(session))
        print()
    if args.only_session:
        if args.json:
            args.json.write_text(json.dumps({"session": session}, indent=2))
        return 0
    results = measure(args.cells, args.repeats)
    results["session"] = session
    print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if args.profile:
        profile(args.cells, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
