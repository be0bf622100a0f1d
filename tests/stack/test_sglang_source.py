"""The SGLang source index (`dsakit.stack.sglang_source`): the one place SGLang source is parsed, each file
once per tree and process, again only when its mtime or size changes."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import dsakit
from dsakit.stack import sglang_source
from dsakit.audit.registry import registry
from dsakit.stack.sglang_release import MODEL_RUNNER_FILE, PROBE_SCAN_FILES, installed_release, release_from_tree
from dsakit.topk import flags
from dsakit.simulation import probes as device_probes
from dsakit.sglang_facts.runner_source import runner_assignments, server_args_fields
from dsakit.sglang_facts.backend_reads import scan_runner_reads


sglang = pytest.mark.usefixtures("installed_sglang")  # skips [sglang-not-installed] where there is none


def test_a_file_is_parsed_once_until_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text("A = 1\n", encoding="utf-8")
    before = sglang_source.stats()["parsed"]
    first = sglang_source.tree(path)
    assert sglang_source.tree(path) is first and sglang_source.text(path) == "A = 1\n"
    assert sglang_source.stats()["parsed"] == before + 1
    path.write_text("A = 1\nB = 2\n", encoding="utf-8")  # another size: a new stamp, even in one mtime tick
    second = sglang_source.tree(path)
    assert second is not first and [n.targets[0].id for n in second.body] == ["A", "B"]  # type: ignore[attr-defined]


def test_a_text_probe_costs_no_parse(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    pass\n", encoding="utf-8")
    before = sglang_source.stats()["parsed"]
    assert "def f" in sglang_source.text(path)
    assert sglang_source.stats()["parsed"] == before


@pytest.mark.parametrize("content, expected", [
    (b"x = (\n", "{where}:1: does not parse: "),
    (b"<<<<<<< HEAD\nx = 1\n", "(an unresolved merge conflict?)"),
    (b"x = 1\ny = '\xff'\n", "{where}:2: not utf-8 (byte 0xff"),
])
def test_a_file_that_does_not_parse_says_where_and_what_would_be_right(
    tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "broken.py"
    path.write_bytes(content)
    found = sglang_source.source(path)
    assert found.tree is None and expected in found.problem
    with pytest.raises(dsakit.UsageError, match=r"sglang/broken\.py:\d: .*--sglang-src a clean SGLang tree"):
        found.require("sglang/broken.py")


@sglang
def test_every_scanner_parses_sglang_only_through_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe scan, the runner-read and ServerArgs scans, the audit's registry and the top-k
    flags read one tree: no scanner parses an SGLang file itself, and none parses one twice."""
    release = installed_release()
    package = str(release.package_dir)
    callers: list[tuple[str, str]] = []
    real_parse = ast.parse

    def parse(source: Any, filename: Any = "<unknown>", *args: Any, **kwargs: Any) -> Any:
        if str(filename).startswith(package):
            callers.append((sys._getframe(1).f_globals.get("__name__", "?"), str(filename)))
        return real_parse(source, filename, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", parse)
    sglang_source.clear()
    device_probes._scan_cached.cache_clear()
    for cached in (runner_assignments, server_args_fields, registry, flags._topk_flags_cached):
        cached.cache_clear()  # type: ignore[attr-defined]
    device_probes.scan_probes(release)
    scan_runner_reads(release)
    runner_assignments(release)
    server_args_fields(release)
    registry(release)
    flags.topk_flags(release)
    assert callers, "nothing was parsed: the scanners did not run"
    assert {module for module, _ in callers} == {"dsakit.stack.sglang_source"}
    files = [name for _, name in callers]
    assert len(files) == len(set(files)), "a file was parsed twice in one process"


@sglang
def test_the_probe_scan_sees_a_file_that_changed(tmp_path: Path) -> None:
    installed = installed_release()
    tree = tmp_path / "sglang"
    for entry in (MODEL_RUNNER_FILE, "version.py", *PROBE_SCAN_FILES):
        source = installed.file(entry)
        if source.is_dir():
            shutil.copytree(source, tree / entry, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
        elif source.is_file():
            (tree / entry).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / entry)
    release = release_from_tree(tmp_path)
    assert device_probes.missing_probes(release) == []
    backend = tree / "srt/layers/attention/dsa_backend.py"
    backend.write_text(backend.read_text(encoding="utf-8") + "\n_is_new_probe = is_cuda()\n", encoding="utf-8")
    assert [(p.name, p.kind) for p in device_probes.missing_probes(release)] == [("_is_new_probe", "constant")]
