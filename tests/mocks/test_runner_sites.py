"""The strict mock words where the real ModelRunner sets an attribute from the declared table
(contracts/runner_sites.json), never from a scan of SGLang source: the table is a fresh scan of every
supported release (other releases' wheels downloaded into the pytest cache; offline those cases skip
with [sglang-wheel-unavailable]), and a tree whose files differ from its release's is said to."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dsakit
from dsakit.stack import sglang_release
from dsakit.contracts import runner_sites
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import MODEL_RUNNER_FILE, SUPPORTED_RELEASES, SGLangRelease, release_from_tree

ROOT = Path(__file__).resolve().parents[2]
Tree = Callable[[str], Path]
_CHECK = "(`dsakit contract check` reads it)"


def _release(version: str, installed: SGLangRelease, sglang_release_tree: Tree) -> SGLangRelease:
    if installed.version == version:
        return installed
    release = release_from_tree(sglang_release_tree(version))
    assert release.version == version
    return release


def _read(runner: Any, attribute: str) -> str:
    with pytest.raises(dsakit.ContractViolation) as raised:
        for part in attribute.split("."):
            runner = getattr(runner, part)
    return str(raised.value)


def _copy_of(installed: SGLangRelease, root: Path, version: str | None = None) -> SGLangRelease:
    """A tree holding the installed release's model_runner.py and a version file (nothing else)."""
    package = root / "sglang"
    (package / MODEL_RUNNER_FILE).parent.mkdir(parents=True)
    shutil.copy(installed.file(MODEL_RUNNER_FILE), package / MODEL_RUNNER_FILE)
    (package / "version.py").write_text(f'__version__ = "{version or installed.version}"\n', encoding="utf-8")
    return release_from_tree(root)


@pytest.fixture
def imported(monkeypatch: pytest.MonkeyPatch) -> Callable[[SGLangRelease], None]:
    """Make `release` the SGLang the mock finds imported here."""
    return lambda release: monkeypatch.setattr(sglang_release, "installed_release", lambda: release)


# ---------------------------------------------------------------- the table is a fresh scan


def test_the_table_has_every_supported_release() -> None:
    assert runner_sites.releases() == SUPPORTED_RELEASES


@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_the_table_is_a_fresh_scan_of_each_release(version: str, installed_sglang: SGLangRelease,
                                                   sglang_release_tree: Tree) -> None:
    from dsakit.sglang_facts.runner_site_scan import release_row

    release = _release(version, installed_sglang, sglang_release_tree)
    row = runner_sites.load_table()["releases"][version]
    fresh = release_row(release)
    stale = [key for key in fresh if row[key] != fresh[key]]
    assert not stale, (f"contracts/runner_sites.json is stale for SGLang {version} ({', '.join(stale)}): "
                       "run `python scripts/runner_sites.py --write`")
    assert row["runner_files"] and row["runner"] and row["server_args"]


def test_the_table_text_is_what_the_generator_writes() -> None:
    from dsakit.sglang_facts.runner_site_scan import render

    assert runner_sites.TABLE_FILE.read_text(encoding="utf-8") == render(runner_sites.load_table())


def test_the_script_refuses_a_bad_tree_argument() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "runner_sites.py"), "--check", "--tree", "0.5.21"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert "--tree '0.5.21': expected VERSION=DIR" in done.stderr


# ---------------------------------------------------------------- the mock's wording


def test_an_attribute_the_runner_sets_is_worded_with_its_site_and_method(installed_sglang: SGLangRelease) -> None:
    from dsakit.sglang_facts.runner_source import runner_assignments

    site = runner_assignments(installed_sglang)["mem_fraction_static"]
    message = _read(dsakit.MockModelRunner("target"), "mem_fraction_static")
    assert f"the real ModelRunner: {site} (ModelRunner sets it in ModelRunner.__init__). " in message
    assert f'set_by = "{site}"  # or "backend"' in message
    forward = runner_sites.runner_site("forward")  # a method: the class defines it
    assert forward == runner_sites.RunnerSite(
        f"{runner_assignments(installed_sglang)['forward']} (ModelRunner defines it: ModelRunner.forward)",
        str(runner_assignments(installed_sglang)["forward"]))


def test_an_attribute_the_runner_never_sets_says_so_naming_the_release(installed_sglang: SGLangRelease) -> None:
    message = _read(dsakit.MockModelRunner("target"), "no_such_thing")
    assert f"the real ModelRunner: never sets it (SGLang {installed_sglang.version}). " in message


def test_a_dotted_attribute_is_worded_by_its_parent_or_its_serverargs_field(installed_sglang: SGLangRelease) -> None:
    from dsakit.sglang_facts.runner_source import runner_assignments, server_args_fields

    sets = runner_assignments(installed_sglang)
    field = server_args_fields(installed_sglang)["dsa_decode_backend"]
    declared = runner_sites.runner_site("server_args.dsa_decode_backend")
    assert declared == runner_sites.RunnerSite(
        f"{field} (ServerArgs field dsa_decode_backend; ModelRunner sets server_args at {sets['server_args']})",
        str(field))
    assert runner_sites.runner_site("server_args.bogus_arg.x") == runner_sites.RunnerSite(
        f"not a ServerArgs field: SGLang {installed_sglang.version} declares no server_args.bogus_arg "
        f"(ModelRunner sets server_args itself at {sets['server_args']})")
    assert runner_sites.runner_site("model_config.context_len") == runner_sites.RunnerSite(
        f"ModelRunner sets model_config at {sets['model_config']} (in ModelRunner.__init__); where "
        "model_config.context_len is set is not in dsakit's table")
    assert runner_sites.runner_site("no_such.child").phrase == (
        f"never sets no_such (SGLang {installed_sglang.version})")


def test_an_unchanged_copy_of_the_release_is_worded_as_the_release(
        installed_sglang: SGLangRelease, tmp_path: Path, imported: Callable[[SGLangRelease], None]) -> None:
    imported(_copy_of(installed_sglang, tmp_path))
    runner = dsakit.MockModelRunner("target")
    assert "(ModelRunner sets it in ModelRunner.__init__). " in _read(runner, "mem_fraction_static")
    assert f"never sets it (SGLang {installed_sglang.version}). " in _read(runner, "no_such_thing")


def test_a_tree_whose_model_runner_differs_says_the_site_is_the_releases(
        installed_sglang: SGLangRelease, tmp_path: Path, imported: Callable[[SGLangRelease], None]) -> None:
    from dsakit.sglang_facts.runner_source import runner_assignments

    site = runner_assignments(installed_sglang)["mem_fraction_static"]
    tree = _copy_of(installed_sglang, tmp_path)
    with open(tree.file(MODEL_RUNNER_FILE), "a", encoding="utf-8") as edited:
        edited.write("\n# a PR's edit\n")
    imported(tree)
    runner = dsakit.MockModelRunner("target")
    version = installed_sglang.version
    assert (f"the real ModelRunner: {site} (ModelRunner sets it in ModelRunner.__init__) in SGLang {version} "
            f"as released; this tree's model_runner.py differs {_CHECK}. ") in _read(runner, "mem_fraction_static")
    never = _read(runner, "no_such_thing")
    assert (f"the real ModelRunner: never sets it in SGLang {version} as released; this tree's "
            f"model_runner.py differs {_CHECK}. ") in never
    assert f"never sets it (SGLang {version})" not in never  # a PR tree may set it: not a claim about it


def test_a_server_args_field_of_a_tree_without_the_releases_serverargs_files_says_so(
        installed_sglang: SGLangRelease, tmp_path: Path) -> None:
    answer = runner_sites.runner_site("server_args.dsa_decode_backend", _copy_of(installed_sglang, tmp_path))
    assert answer.phrase.startswith("sglang/srt/") and "(ServerArgs field dsa_decode_backend; " in answer.phrase
    assert f"in SGLang {installed_sglang.version} as released; this tree's " in answer.phrase
    assert "server_args.py" in answer.phrase and "model_runner.py" not in answer.phrase.split("; this tree's")[1]
    assert answer.set_by == answer.phrase.split(" (", 1)[0]


def test_a_release_the_table_lacks_names_the_releases_it_has(
        installed_sglang: SGLangRelease, tmp_path: Path, imported: Callable[[SGLangRelease], None]) -> None:
    imported(_copy_of(installed_sglang, tmp_path, version="0.5.99"))
    message = _read(dsakit.MockModelRunner("target"), "mem_fraction_static")
    assert (f"the real ModelRunner: unknown: dsakit's table of ModelRunner sites has SGLang "
            f"{', '.join(SUPPORTED_RELEASES)}, not 0.5.99 (`dsakit contract check` reads this tree). ") in message
    assert 'set_by = "<file:line where the real ModelRunner sets it>"' in message


def test_without_sglang_the_phrase_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> SGLangRelease:
        raise UsageError("SGLang is not installed in this environment")

    monkeypatch.setattr(sglang_release, "installed_release", missing)
    assert runner_sites.runner_site("mem_fraction_static").phrase == (
        f"unknown (SGLang is not installed here; dsakit's table of ModelRunner sites has SGLang "
        f"{', '.join(SUPPORTED_RELEASES)})")


_NO_PARSE = """
import ast, dsakit
from dsakit.stack.sglang_release import installed_release
installed_release()  # the release (its version file) is found before the read
def refuse(*args, **kwargs):
    raise AssertionError("the mock parsed SGLang source to word a violation")
ast.parse = refuse
for name in ("mem_fraction_static", "no_such_thing"):
    try:
        getattr(dsakit.MockModelRunner("target"), name)
    except dsakit.ContractViolation as error:
        print("MESSAGE", str(error).split(". If your backend", 1)[0])
"""


def test_a_violation_is_worded_without_parsing_any_source() -> None:
    """In a fresh process (no scan cached): ast.parse refuses, and the mock still words the site."""
    done = subprocess.run([sys.executable, "-c", _NO_PARSE], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("MESSAGE")]
    assert len(lines) == 2 and "(ModelRunner sets it in ModelRunner.__init__)" in lines[0], done.stdout
    assert "the real ModelRunner: never sets it (SGLang " in lines[1]


# ---------------------------------------------------------------- declared: the package carries the table


def test_the_wheel_and_the_sdist_carry_the_table(built_wheel: Path, built_sdist: Path) -> None:
    import tarfile

    wheel = zipfile.ZipFile(built_wheel)
    assert json.loads(wheel.read("dsakit/contracts/runner_sites.json")) == runner_sites.load_table()
    with tarfile.open(built_sdist) as sdist:
        assert any(name.endswith("/contracts/runner_sites.json") for name in sdist.getnames())


def test_an_unreadable_table_is_a_phrase_not_a_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of the mock stays an AttributeError (getattr defaults keep working) on a broken install."""
    broken = tmp_path / "runner_sites.json"
    broken.write_text('{"format": 0, "releases": {}}', encoding="utf-8")
    read = runner_sites.load_table.__wrapped__  # uncached: the real loader on the broken file
    monkeypatch.setattr(runner_sites, "load_table", lambda: read(broken))
    message = _read(dsakit.MockModelRunner("target"), "mem_fraction_static")
    assert (f"the real ModelRunner: unknown (cannot read dsakit's table of ModelRunner sites: {broken}: format 0, "
            "expected 1: regenerate it with `python scripts/runner_sites.py --write`; reinstall dsakit). ") in message
    assert getattr(dsakit.MockModelRunner("target"), "no_such_thing", "default") == "default"


_READ = """
import dsakit
try:
    dsakit.MockModelRunner("target").prefill_shared_read_stager
except dsakit.ContractViolation as error:
    print("MESSAGE", str(error).split(". If your backend", 1)[0])
"""


def test_the_site_is_the_imported_releases(sglang_release_tree: Tree, installed_sglang: SGLangRelease) -> None:
    """0.5.21 on PYTHONPATH over the venv's SGLang: its ModelRunner sets prefill_shared_read_stager,
    0.5.23's does not; the mock words the release that is imported (nothing of it is imported)."""
    import os

    tree = sglang_release_tree("0.5.21")
    site = next(f"{file}:{sites['prefill_shared_read_stager'][0]}"
                for file, sites in runner_sites.load_table()["releases"]["0.5.21"]["runner"].items()
                if "prefill_shared_read_stager" in sites)
    here = runner_sites.runner_site("prefill_shared_read_stager", installed_sglang).phrase
    assert here == f"never sets it (SGLang {installed_sglang.version})"
    over = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tree)])}
    for env, expected in ((over, f"the real ModelRunner: {site} (ModelRunner sets it in "),
                          (None, f"the real ModelRunner: {here}\n")):
        done = subprocess.run([sys.executable, "-c", _READ], capture_output=True, text=True, timeout=120,
                              env=env, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert expected in done.stdout, done.stdout
