"""bench/releases_table.py: the release x device x outcome table from --dsakit-report files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "releases_table.py"


def _report(path: Path, release: str, tests: dict[str, str], *, simulated: bool = False) -> Path:
    device = {"key": "cpu" if simulated else "real", "description": "CPU (no CUDA or ROCm GPU)",
              "simulated": simulated}
    path.write_text(json.dumps({"sglang": release, "device": device,
                                "tests": {t: {"outcome": o} for t, o in tests.items()}}), encoding="utf-8")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=60)


def test_rows_per_release_and_device_with_outcome_counts(tmp_path: Path) -> None:
    new = _report(tmp_path / "a.json", "0.5.23", {
        "c/t.py::test_a": "passed", "c/t.py::test_b": "failed", "c/t.py::test_c[x]": "skipped",
        "c/t.py::test_d[role=target-device=sm103-extend]": "passed",
        "c/t.py::test_d[role=draft-device=sm103]": "error",
        "c/t.py::test_e[device=gfx950]": "xfailed",
    })
    old = _report(tmp_path / "b.json", "0.5.17", {"c/t.py::test_a": "skipped"})

    done = _run(str(new), str(old), "--per-simulated-device")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "| SGLang | device | passed | failed | error | skipped | xfailed | xpassed | total |"
    assert lines[2:] == [
        "| 0.5.17 | CPU (no CUDA or ROCm GPU) (real) | 0 | 0 | 0 | 1 | 0 | 0 | 1 |",
        "| 0.5.23 | CPU (no CUDA or ROCm GPU) (real) | 1 | 1 | 0 | 1 | 0 | 0 | 3 |",
        "| 0.5.23 | gfx950 (simulated) | 0 | 0 | 0 | 0 | 1 | 0 | 1 |",
        "| 0.5.23 | sm103 (simulated) | 1 | 0 | 1 | 0 | 0 | 0 | 2 |",
    ]


def test_a_missing_or_foreign_file_is_exit_2_naming_it(tmp_path: Path) -> None:
    done = _run(str(tmp_path / "absent.json"))
    assert done.returncode == 2 and "absent.json: no such file" in done.stderr
    other = tmp_path / "other.json"
    other.write_text('{"tests": 3}', encoding="utf-8")
    done = _run(str(other))
    assert done.returncode == 2 and "other.json: not a --dsakit-report file" in done.stderr
    assert "Traceback" not in done.stderr


def test_simulated_devices_share_one_row_by_default(tmp_path: Path) -> None:
    report = _report(tmp_path / "a.json", "0.5.21", {
        "c/t.py::test_a": "passed", "c/t.py::test_d[role=target-device=sm103-extend]": "passed",
        "c/t.py::test_d[role=draft-device=gfx950]": "skipped"})
    done = _run(str(report))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[2:] == [
        "| 0.5.21 | CPU (no CUDA or ROCm GPU) (real) | 1 | 0 | 0 | 0 | 0 | 0 | 1 |",
        "| 0.5.21 | 2 simulated (gfx950, sm103) | 1 | 0 | 0 | 1 | 0 | 0 | 2 |",
    ]
