"""`--dsakit-device sm90,sm103,gfx942`: a fleet on one machine, one pytest process per device.

Owns splitting the device list, running the same invocation once per device in parallel (each
with its own `--dsakit-device` and `--dsakit-report`), ending every child on Ctrl-C, and printing
each run's outcome and the merged fleet table (`dsakit report merge`'s layout). Exit code: pytest's,
the worst of the runs (2/3/4 before 1, 1 before 5, 5 only when every run collected nothing);
`--dsakit-must-run` is judged once, over the fleet (a gate skipped on sm90 that ran on sm103 ran).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from dsakit.gates.device_model import REAL, validate_device_name

if TYPE_CHECKING:
    from dsakit.compare.report_merge import Merged

_SUMMARY_MARK = "short test summary info"
_OUTCOME = re.compile(r"^=* ?(\d+ (passed|failed|skipped|errors?|xfailed|xpassed|deselected)|no tests ran)")


def fleet_devices(raw: str | None) -> list[str] | None:
    """The canonical names of a comma-separated device list, or None when `raw` names one device."""
    if not raw or "," not in raw:
        return None
    from dsakit.errors import UsageError

    spelled = [part.strip() for part in raw.split(",") if part.strip()]
    try:
        names = [validate_device_name(part) for part in spelled]
    except UsageError as error:
        raise pytest.UsageError(f"--dsakit-device {raw}: {error}") from None
    first: dict[str, str] = {}
    for spelling, name in zip(spelled, names):
        if name in first:  # `sm103,sm103`, `b300,sm103`: one run would be the other's copy
            raise pytest.UsageError(
                f"--dsakit-device {raw}: {first[name]!r} and {spelling!r} are the same device ({name}) given "
                f"twice; name each device once (one device: --dsakit-device {name}; a fleet: two or more "
                "different devices, e.g. sm90,sm103)")
        first[name] = spelling
    return names if len(names) > 1 else None


@dataclass
class DeviceRun:
    device: str
    report: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    code: int | None = None
    seconds: float = 0.0

    def last_line(self) -> str:
        """pytest's closing outcome line ("1 failed, 1 passed in 2.4s"), else the last line written."""
        lines = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
        outcome = [line for line in lines if _OUTCOME.search(line)]
        return (outcome or lines or ["no output"])[-1].strip("= ")

    def summary(self) -> list[str]:
        lines = self.log.read_text(errors="replace").splitlines()
        start = next((i for i, line in enumerate(lines) if _SUMMARY_MARK in line), None)
        return [] if start is None else [line for line in lines[start + 1:] if not _OUTCOME.search(line)]


def _report_paths(given: str | None, devices: list[str]) -> tuple[Path, bool]:
    """Where the per-device reports go: beside --dsakit-report PATH (kept) or a temp dir (removed).
    PATH is checked as a single run checks it, before any run starts: a path under a file or in a
    folder that cannot be written is a usage error (exit 4), never an OSError traceback."""
    if given:
        from dsakit.errors import UsageError
        from dsakit.output_paths import output_file

        try:
            output_file(given, "--dsakit-report")
        except UsageError as error:
            raise pytest.UsageError(str(error)) from None
        folder = Path(given).expanduser().resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        return folder, True
    return Path(tempfile.mkdtemp(prefix="dsakit-fleet-")), False


def _child_args(config: pytest.Config, device: str, report: Path) -> list[str]:
    args = [a for a in config.invocation_params.args]
    # the last occurrence of a store option wins: the run's own device and report come last
    return [sys.executable, "-m", "pytest", *args, f"--dsakit-device={device}", f"--dsakit-report={report}"]


def _start(config: pytest.Config, run: DeviceRun) -> None:
    env = {**os.environ, "DSAKIT_DEVICE": run.device}
    with run.log.open("wb") as log:
        run.process = subprocess.Popen(_child_args(config, run.device, run.report), stdout=log,
                                       stderr=subprocess.STDOUT, cwd=config.invocation_params.dir, env=env,
                                       start_new_session=True)


def _stop(runs: list[DeviceRun]) -> None:
    for run in runs:
        if run.process is not None and run.process.poll() is None:
            os.killpg(run.process.pid, signal.SIGTERM)
    for run in runs:
        if run.process is not None:
            try:
                run.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(run.process.pid, signal.SIGKILL)
                run.process.wait()


def _line(text: str) -> None:
    """The fleet prints before pytest's terminal reporter exists (it never configures a session)."""
    print(text, flush=True)


def worst_code(codes: list[int]) -> int:
    """pytest's exit code for the fleet: a usage error / interruption / internal error first."""
    for code in (4, 3, 2, 1):
        if code in codes:
            return code
    return 5 if codes and all(c == 5 for c in codes) else 0


def run_fleet(config: pytest.Config, devices: list[str], report: str | None) -> int:
    """The fleet of `devices` (`report`: the run's --dsakit-report, the per-device reports go beside it)."""
    from dsakit.node.process_group import interruptible

    with interruptible():  # SIGTERM (a CI cancel) ends the device runs and removes the folder, as Ctrl-C does
        return _run_fleet(config, devices, report)


def _run_fleet(config: pytest.Config, devices: list[str], given: str | None) -> int:
    folder, keep = _report_paths(given, devices)
    stem = Path(given).stem if given else "report"
    runs = [DeviceRun(d, folder / f"{stem}-{d}.json", folder / f"{stem}-{d}.log") for d in devices]
    write = _line
    write(f"dsakit fleet: {len(runs)} runs in parallel, one per device: {', '.join(devices)}")
    started = time.monotonic()
    try:
        for run in runs:
            _start(config, run)
        for run in runs:
            assert run.process is not None
            run.code = run.process.wait()
            run.seconds = time.monotonic() - started
        return _print_fleet(config, runs, keep, folder)
    except KeyboardInterrupt:
        _stop(runs)
        write("dsakit fleet: interrupted; every device run was ended")
        return int(pytest.ExitCode.INTERRUPTED)
    finally:
        _stop(runs)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)


def _print_fleet(config: pytest.Config, runs: list[DeviceRun], keep: bool, folder: Path) -> int:
    from dsakit.errors import UsageError
    from dsakit.compare.report_merge import format_text, merge

    write = _line
    for run in runs:
        name = "real device" if run.device == REAL else f"simulated {run.device}"
        write(f"dsakit fleet: {run.device} ({name}): {run.last_line()} (exit {run.code})")
        for line in run.summary():
            write(f"    {line}")
    codes = [r.code if r.code is not None else 2 for r in runs]
    reports = [str(r.report) for r in runs if r.report.is_file()]
    missing = [r.device for r in runs if not r.report.is_file()]
    if missing:
        write(f"dsakit fleet: no report from {', '.join(missing)} (the run stopped before its end; its log: "
              + (", ".join(str(r.log) for r in runs if r.device in missing) if keep else "rerun with --dsakit-report PATH to keep it") + ")")
    if reports:
        try:
            merged = merge(reports)
        except UsageError as error:
            write(f"dsakit fleet: the reports could not be merged: {error}")
        else:
            write("")
            for line in format_text(merged):
                write(line)
            codes = _must_run_over_the_fleet(runs, codes, merged, write)
    if keep:
        write(f"dsakit fleet: reports and logs in {folder}")
    return worst_code(codes)


def _must_run_over_the_fleet(runs: list[DeviceRun], codes: list[int], merged: Merged,
                             write: Callable[[str], None]) -> list[int]:
    """The runs' exit codes with --dsakit-must-run judged over the merged table: a run that failed
    only its must-run gates (its tests passed; every run declares the gates) exits 0 here, and the
    fleet fails once where a gate ran on no device."""
    from dsakit.compare.report_merge import merge

    judged = list(codes)
    for index, run in enumerate(runs):
        if codes[index] != 1 or not run.report.is_file():
            continue
        try:
            data = json.loads(run.report.read_text(encoding="utf-8"))
            failed_gates = data["must_run"]["failed"]
            own_failures = merge([str(run.report)]).failures()
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a report it cannot read keeps the run's own code
        if failed_gates and not own_failures:
            judged[index] = 0
    if merged.must_run:
        missed = merged.must_run_failures()
        for code in merged.must_run:
            if code in missed:
                write(f"dsakit fleet: --dsakit-must-run {code}: {missed[code]} -> fails the fleet")
            else:
                write(f"dsakit fleet: --dsakit-must-run {code}: ran on {', '.join(merged.gate_ran_on(code))}")
        if missed:
            judged.append(1)
    return judged
