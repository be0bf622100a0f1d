#!/usr/bin/env bash
# Inert unless used, on a real node: an unrelated suite (tests/plugin/test_inert.py's UNRELATED: env dumps,
# a plain skip, a skipif) runs with dsakit loaded and without, plain and under `-n auto`, and the
# script prints what differs: the environment each test saw (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS,
# every other variable), the xdist worker count, the output (timings removed) and the programs
# started (strace -f -e trace=execve where strace exists, else PATH shims that log nvidia-smi,
# rocminfo and rocm-smi and run the real tool).
#
#   GPU node (no entry point installed): source .device/setup.sh; bash scripts/device/inert_on_the_node.sh
#   CPU checkout:                        PATH=.venv/bin:$PATH bash scripts/device/inert_on_the_node.sh
#
# "with" = `python -m pytest -p dsakit.plugin`, "without" = `python -m pytest -p no:dsakit` (blocks an
# installed entry point; where none is installed, the same as leaving -p out). Run from the project
# root. Exit 0: identical; 1: a difference (listed); 2: the check itself could not run.
# INERT_WITH_ARGS="--dsakit-split-threads" adds arguments to the "with" runs only (the script's own
# control: it must then report a difference).
set -u
cd "$(dirname "$0")/../.." || exit 2
exec python - "$@" <<'PY'
import collections, difflib, json, os, re, shlex, shutil, socket, subprocess, sys, tempfile
from pathlib import Path

sys.path.insert(0, "tests/plugin")
try:
    from test_inert import PER_RUN_ENV, UNRELATED, normalized_lines
except Exception as error:  # noqa: BLE001
    print(f"inert check: cannot import tests/plugin/test_inert.py ({error}); run from the project root with dsakit "
          "and pytest importable", file=sys.stderr)
    sys.exit(2)

WITH = ["-p", "dsakit.plugin", *shlex.split(os.environ.get("INERT_WITH_ARGS", ""))]
WITHOUT = ["-p", "no:dsakit"]
TOOLS = ("nvidia-smi", "rocminfo", "rocm-smi")
STRACE = shutil.which("strace")
work = Path(tempfile.mkdtemp(prefix="dsakit-inert-"))


def shims() -> Path:
    """nvidia-smi / rocminfo / rocm-smi first on PATH: log the call, then run the real tool (if any)."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        real = shutil.which(tool)
        run = f'exec "{real}" "$@"' if real else "exit 127"
        (bin_dir / tool).write_text(f'#!/bin/sh\necho {tool} >> "$INERT_SHIM_LOG"\n{run}\n')
        (bin_dir / tool).chmod(0o755)
    return bin_dir


def base_env(bin_dir: Path) -> dict[str, str]:
    # the node's environment as it is (CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS included), minus what
    # would make either run use dsakit or change pytest's arguments
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DSAKIT_") and k not in ("PYTEST_ADDOPTS", "PYTEST_XDIST_AUTO_NUM_WORKERS")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def session(suite: Path, env: dict[str, str], tag: str, args: list[str]) -> dict[str, object]:
    seen, scratch = work / f"seen-{tag}", work / f"tmp-{tag}"
    seen.mkdir()
    scratch.mkdir()
    log, trace = work / f"shim-{tag}.log", work / f"trace-{tag}.log"
    log.touch()
    cmd = [sys.executable, "-m", "pytest", "-rs", "-p", "no:randomly", "-p", "no:cacheprovider", *args,
           "test_unrelated.py"]
    if STRACE:
        cmd = [STRACE, "-f", "-qq", "-e", "trace=execve", "-o", str(trace), *cmd]
    run_env = dict(env, INERT_OUT=str(seen), TMPDIR=str(scratch), INERT_SHIM_LOG=str(log))
    done = subprocess.run(cmd, cwd=suite, env=run_env, capture_output=True, text=True, timeout=900)
    envs = {}
    for path in sorted(seen.glob("*.json")):
        envs[path.stem.split("-", 1)[1]] = {k: v for k, v in json.loads(path.read_text()).items()
                                            if k not in PER_RUN_ENV and k != "INERT_SHIM_LOG"}
    programs: collections.Counter[str] = collections.Counter()
    if STRACE and trace.exists():
        for line in trace.read_text(errors="replace").splitlines():
            found = re.search(r'execve\("([^"]+)"', line)
            if found:
                name = os.path.basename(found.group(1))
                programs[name + (" (not found)" if "ENOENT" in line else "")] += 1
    programs.update(f"{tool} (shim)" for tool in log.read_text().split())
    workers = sorted({env.get("PYTEST_XDIST_WORKER_COUNT", "-") for env in envs.values()})
    return {"rc": done.returncode, "out": normalized_lines(done.stdout.splitlines()),
            "err": normalized_lines(done.stderr.splitlines()), "envs": envs, "workers": workers,
            "programs": programs, "left": sorted(p.name for p in scratch.iterdir())}


def var(envs: dict[str, dict[str, str]], name: str) -> str:
    values = sorted({env.get(name, "unset") for env in envs.values()})
    return ",".join(values) if values else "no test ran"


def compare(a: dict, b: dict, xdist: bool) -> list[str]:
    """What differs between the run with dsakit (a) and without (b), one line each."""
    diffs = []
    if a["rc"] != b["rc"]:
        diffs.append(f"exit code {a['rc']} vs {b['rc']}")
    if set(a["envs"]) != set(b["envs"]):
        diffs.append(f"tests that dumped an environment: {sorted(a['envs'])} vs {sorted(b['envs'])}")
    for test in sorted(set(a["envs"]) & set(b["envs"])):
        ea, eb = a["envs"][test], b["envs"][test]
        for key in sorted(set(ea) | set(eb)):
            if ea.get(key) != eb.get(key):
                diffs.append(f"env of test {test}: {key}={ea.get(key, '<unset>')!r} vs {eb.get(key, '<unset>')!r}")
    if a["workers"] != b["workers"]:
        diffs.append(f"worker count {a['workers']} vs {b['workers']}")
    for stream in ("out", "err"):
        la, lb = (sorted(a[stream]), sorted(b[stream])) if xdist else (a[stream], b[stream])  # xdist: any order
        if la != lb:
            delta = [d for d in difflib.unified_diff(lb, la, "without", "with", n=0, lineterm="")
                     if d[:1] in "+-" and not d.startswith(("+++", "---"))]
            diffs.append(f"std{stream}: {len(delta)} line(s) differ: " + " | ".join(delta[:4]))
    if a["programs"] != b["programs"]:
        extra = a["programs"] - b["programs"]
        missing = b["programs"] - a["programs"]
        diffs.append(f"programs started: with dsakit also {dict(extra)}, without also {dict(missing)}")
    if a["left"] != b["left"]:
        diffs.append(f"left in TMPDIR: {a['left']} vs {b['left']}")
    return diffs


def summary(runs: dict, xdist: bool) -> str:
    a, b = runs["with"], runs["without"]
    progs = sorted((name, n) for name, n in b["programs"].items() if not name.endswith("(not found)"))
    shown = ", ".join(f"{name} x{n}" for name, n in progs[:6]) + (" ..." if len(progs) > 6 else "")
    return (f"{'-n auto' if xdist else 'one process':12s} exit {a['rc']}/{b['rc']}  tests {len(a['envs'])}/{len(b['envs'])}  "
            f"workers {'/'.join(a['workers'])} vs {'/'.join(b['workers'])}  "
            f"CUDA_VISIBLE_DEVICES {var(a['envs'], 'CUDA_VISIBLE_DEVICES')} vs {var(b['envs'], 'CUDA_VISIBLE_DEVICES')}  "
            f"OMP_NUM_THREADS {var(a['envs'], 'OMP_NUM_THREADS')} vs {var(b['envs'], 'OMP_NUM_THREADS')}  "
            f"output {len(a['out'])}/{len(b['out'])} lines  programs run: {shown or 'none'}")


def main() -> int:
    env = base_env(shims())
    suite = work / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\n")  # the project's own config and conftest stay out
    (suite / "test_unrelated.py").write_text(UNRELATED)
    # the two commands differ in exactly one thing: dsakit is loaded (its options exist) or not
    helps = {name: subprocess.run([sys.executable, "-m", "pytest", *args, "--help"], cwd=suite, env=env,
                                  capture_output=True, text=True, timeout=300).stdout
             for name, args in (("with", WITH), ("without", WITHOUT))}
    if "--dsakit-workers-per-gpu" not in helps["with"] or "--dsakit-workers-per-gpu" in helps["without"]:
        print("inert check: `-p dsakit.plugin` did not load dsakit, or `-p no:dsakit` did not keep it out "
              "(is the checkout on PYTHONPATH?)", file=sys.stderr)
        return 2
    has_xdist = "--numprocesses" in helps["without"]
    gpus = subprocess.run("nvidia-smi -L 2>/dev/null | grep -c ^GPU", shell=True, capture_output=True,
                          text=True, env=dict(env, INERT_SHIM_LOG=os.devnull)).stdout.strip() or "0"
    print(f"dsakit inert check on {socket.gethostname()}: {gpus} NVIDIA GPU(s), {os.cpu_count()} CPUs, "
          f"subprocesses by {'strace -f execve' if STRACE else 'PATH shims (' + ', '.join(TOOLS) + ')'}; "
          f"with = {' '.join(WITH)}, without = {' '.join(WITHOUT)}")
    failed = False
    for xdist in ((False, True) if has_xdist else (False,)):
        extra = ["-n", "auto"] if xdist else []
        runs = {name: session(suite, env, f"{name}{'-x' if xdist else ''}", [*args, *extra])
                for name, args in (("with", WITH), ("without", WITHOUT))}
        print(summary(runs, xdist))
        for line in compare(runs["with"], runs["without"], xdist)[:12]:
            failed = True
            print(f"  DIFFERS: {line}")
        if runs["without"]["rc"] != 0:
            failed = True
            print(f"  the suite itself failed (exit {runs['without']['rc']}): {runs['without']['out'][-3:]}")
    if not has_xdist:
        print("  pytest-xdist is not installed: the -n auto comparison was not run")
    print("result: " + ("DIFFERENT" if failed else "identical (environment, worker count, output, programs started)"))
    return 1 if failed else 0


try:
    sys.exit(main())
finally:
    shutil.rmtree(work, ignore_errors=True)
PY
