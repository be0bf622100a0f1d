"""One release table (dsakit.stack.sglang_release): releases compare as releases, and adding one is one
entry that the probe rows, the recipes, scripts/env.sh and .ci/run all read (CONTRIBUTING.md,
"Adding an SGLang release")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.errors import UsageError
from dsakit.stack.sglang_release import (PINNED_RELEASE, SUPPORTED_RELEASES, release_key, release_numbers,
                                   release_order, releases_between, releases_from)
from tests.checkout_stubs import run, set_release_table, stub_checkout

ROOT = Path(__file__).resolve().parents[2]
NEXT = "0.5.24"  # a release the table does not have yet


@pytest.mark.parametrize(("newer", "older"), [
    ("0.6.0", "0.5.23"), ("0.5.10", "0.5.9"), ("1.0.0", "0.99.99"), ("0.5.10.post1", "0.5.10"),
    ("0.5.10", "0.5.10rc2"), ("0.5.10rc2", "0.5.10rc1"), ("0.5.10rc1", "0.5.10b3"), ("0.5.10rc1", "0.5.10.dev4"),
    ("0.5.10.dev4", "0.5.9.post2"),
])
def test_releases_compare_as_releases_not_as_text_or_last_numbers(newer: str, older: str) -> None:
    assert release_key(newer) > release_key(older)
    assert sorted([newer, older], key=release_order) == [older, newer]


def test_equal_releases_and_text_that_is_no_release() -> None:
    assert release_key("0.6") == release_key("0.6.0") == release_key("v0.6.0")
    with pytest.raises(UsageError, match=r"'unknown' is not an SGLang release number \(e.g. 0.5.23"):
        release_key("unknown")
    assert sorted(["not installed", "0.5.9", "unknown", "0.5.17"], key=release_order) == [
        "0.5.9", "0.5.17", "not installed", "unknown"]
    assert release_key("0.5.23+cu128") == release_key("0.5.23")  # a build's local label


def test_release_numbers_are_the_keys_numbers() -> None:
    """The one parser: a skip table's range compares release numbers only (a post or dev release of
    0.5.23 reads 0.5.23's rows); text that is no release has none."""
    assert release_numbers("0.5.23.post1") == release_numbers("0.5.23rc1") == release_numbers("0.5.23") == (0, 5, 23)
    assert release_numbers("0.6.0") == (0, 6) < release_numbers("0.6.1")
    assert release_numbers("unknown") == release_numbers("") == ()


def test_ranges_are_open_ended_or_closed_by_version() -> None:
    table = ("0.5.9", "0.5.17", "0.5.23", "0.6.0")
    assert releases_from("0.5.17", table) == ("0.5.17", "0.5.23", "0.6.0")
    assert releases_between("0.5.9", "0.5.23", table) == ("0.5.9", "0.5.17", "0.5.23")
    assert releases_from("0.5.17") == SUPPORTED_RELEASES[SUPPORTED_RELEASES.index("0.5.17"):]


def test_the_table_is_in_release_order_and_pins_one_of_its_releases() -> None:
    assert list(SUPPORTED_RELEASES) == sorted(set(SUPPORTED_RELEASES), key=release_key)
    assert PINNED_RELEASE in SUPPORTED_RELEASES


_PROBE_ROWS = """
import json, sys
from dsakit.stack import sglang_release
sglang_release.SUPPORTED_RELEASES += tuple(sys.argv[1:])   # the one entry, before anything reads it
from dsakit.simulation import probes as device_probes
print(json.dumps([[p.name, list(p.modules), list(p.releases)] for p in device_probes.PROBES]))
"""


@pytest.mark.parametrize("added", [NEXT, "0.6.0"])
def test_a_release_added_to_the_table_takes_every_probe_row_that_holds_for_the_newest(added: str) -> None:
    """Rows are open-ended: a row that holds for the newest release holds for one added after it,
    with no edit of the probe table (20 rows ended at 0.5.23 before; 0.6.0 sorted below 0.5.x)."""
    newest = SUPPORTED_RELEASES[-1]
    done = subprocess.run([sys.executable, "-c", _PROBE_ROWS, added], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    differ = [(name, modules) for name, modules, releases in rows if (newest in releases) != (added in releases)]
    assert not differ, f"probe rows holding for {newest} but not for {added} (or the other way): {differ}"
    assert any(added in releases for _, _, releases in rows)


def test_ci_runs_the_main_job_on_every_release_of_the_table(tmp_path: Path) -> None:
    """.ci/run with 0.5.24 added to the table: the test job, the main job on the pinned release,
    then on every other one (0.5.24 included), and the release table over all their reports."""
    copy = stub_checkout(tmp_path, stub_env_sh=True)
    set_release_table(copy, SUPPORTED_RELEASES + (NEXT,), PINNED_RELEASE)
    done, calls = run(copy, ".ci/run")
    assert done.returncode == 0, done.stdout + done.stderr
    others = [r for r in SUPPORTED_RELEASES + (NEXT,) if r != PINNED_RELEASE]
    assert [args for name, args in calls if name == "env.sh"] == [
        ["test"], ["main"], *(["main", "--sglang", r] for r in others)]
    (table,) = [args for name, args in calls if name == "python" and args[:1] == ["bench/releases_table.py"]]
    assert table[1:] == ["dsakit-report.json", *(f"dsakit-report-{r}.json" for r in others)]


def test_env_sh_installs_the_recipe_of_the_tables_pinned_release(tmp_path: Path) -> None:
    """scripts/env.sh main with the pin moved to 0.5.24 (its recipe renamed): it installs
    requirements/cpu-sglang-0.5.24.txt, says so, and runs the main job."""
    copy = stub_checkout(tmp_path)
    set_release_table(copy, SUPPORTED_RELEASES + (NEXT,), NEXT)
    (copy / "requirements" / f"cpu-sglang-{PINNED_RELEASE}.txt").rename(copy / "requirements" / f"cpu-sglang-{NEXT}.txt")
    done, calls = run(copy, "scripts/env.sh", "main")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SGLang {NEXT} --no-deps" in done.stdout
    installs = [args for name, args in calls if name == "python" and args[:3] == ["-m", "pip", "install"]]
    assert ["--no-deps", "-r", f"requirements/cpu-sglang-{NEXT}.txt"] == installs[1][-3:]
    assert ("dsakit", ["capabilities"]) in calls
    assert calls[-1] == ("python", ["-m", "pytest", "contracts", "-n", "2", "--dsakit-report", "dsakit-report.json",
                                    "--dsakit-must-run", "sglang:import-chain"])


def test_the_recipes_are_the_pinned_releases() -> None:
    """requirements/ and the shipped dsakit/recipes/ hold one SGLang recipe, the pinned release's,
    which pins exactly that release; `dsakit env` says which releases are supported."""
    from dsakit.recipes import STEPS, commands

    for folder in (ROOT / "requirements", ROOT / "dsakit" / "recipes"):
        assert sorted(p.name for p in folder.glob("cpu-sglang-*.txt")) == [f"cpu-sglang-{PINNED_RELEASE}.txt"]
        pins = [line.split("#", 1)[0].strip() for line in (folder / f"cpu-sglang-{PINNED_RELEASE}.txt").read_text(
            encoding="utf-8").splitlines()]
        assert f"sglang=={PINNED_RELEASE}" in pins
    assert any(step.file == f"cpu-sglang-{PINNED_RELEASE}.txt" for step in STEPS)
    assert any(line.endswith(f"cpu-sglang-{PINNED_RELEASE}.txt") for line in commands())
    done = subprocess.run([sys.executable, "-m", "dsakit", "env"], capture_output=True, text=True, check=True)
    assert f"# SGLang releases dsakit supports: {', '.join(SUPPORTED_RELEASES)} " in done.stdout
