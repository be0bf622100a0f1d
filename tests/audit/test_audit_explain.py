"""`dsakit.audit.explain.explain_read`: the audit's wording of one read, for a failing run's
AttributeError (the lead's device simulation calls it). Lines come from the installed SGLang source
(found by AST here); nothing imports torch or SGLang.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.audit.explain import explain_read
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import DSA_BACKEND_FILE, DSA_TOPK_BACKEND_FILE, SGLangRelease, installed_release


def _installed() -> SGLangRelease:
    try:
        return installed_release()
    except UsageError as error:
        pytest.skip(f"[sglang-not-installed] needs the installed SGLang source: {error}")


def _line(path: Path, attribute: str) -> int:
    lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Attribute) and node.attr == attribute
                   and isinstance(node.value, ast.Name) and node.value.id == "model_runner")
    assert lines, f"no model_runner.{attribute} in {path}"
    return lines[0]


def test_guarded_read_is_worded_as_the_audit_words_it() -> None:
    release = _installed()
    path = release.file(DSA_BACKEND_FILE)
    line = _line(path, "max_running_requests")
    found = explain_read(path, line, "max_running_requests")
    assert found is not None
    assert found.site == f"sglang/{DSA_BACKEND_FILE}:{line}"
    assert found.fires_on == ("sm100", "sm103", "sm120")
    assert "_is_cuda" in found.guard and "self.device_sm_major >= 10" in found.guard
    assert str(found) == (f"dsa_backend.py:{line} (DeepseekSparseAttnBackend.__init__) when {found.guard} -> "
                          f"fails on sm100, sm103, sm120; only with self.dsa_decode_impl == 'trtllm' on sm90")
    on_b300 = explain_read(str(path), line, "max_running_requests", devices=["b300", "sm90"])
    assert on_b300 is not None and on_b300.fires_on == ("sm103",)
    assert on_b300.only_with == (("self.dsa_decode_impl == 'trtllm'", ("sm90",)),)
    h200 = explain_read(path, line, "max_running_requests", devices=["sm90"])
    assert h200 is not None and h200.fires_on == () and "only with self.dsa_decode_impl == 'trtllm' on sm90" in h200.text


def test_a_missing_namespace_is_explained_by_the_read_through_it() -> None:
    """A runner without model_config fails at `model_runner.model_config.context_len` with an
    AttributeError naming model_config: the explanation is that read's."""
    release = _installed()
    path = release.file(DSA_BACKEND_FILE)
    lines = sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                   and node.value.attr == "model_config" and isinstance(node.value.value, ast.Name)
                   and node.value.value.id == "model_runner")
    assert lines, f"no model_runner.model_config.<x> in {path}"
    found = explain_read(path, lines[0], "model_config")
    assert found is not None and found.attribute.startswith("model_config."), found
    assert found.site == f"sglang/{DSA_BACKEND_FILE}:{lines[0]}"
    assert explain_read(path, lines[0], "model_conf") is None  # a prefix of a name is not its namespace


def test_unconditional_read_and_what_is_not_a_read() -> None:
    release = _installed()
    if not release.has("topk-role-split"):
        pytest.skip(f"[sglang:topk-role-split] SGLang {release.version} has no DSATopKBackend.resolve")
    path = release.file(DSA_TOPK_BACKEND_FILE)
    line = _line(path, "is_draft_worker")
    found = explain_read(path, line, "is_draft_worker")
    assert found is not None and found.guard == ""
    assert found.text.endswith("unconditionally -> fails on every device")
    assert explain_read(path, line + 1000, "is_draft_worker") is None  # no read on that line
    assert explain_read(path, line, "no_such_attribute") is None
    assert explain_read(path.parent / "no_such_file.py", line, "is_draft_worker") is None


def test_a_file_outside_an_sglang_tree_is_none(tmp_path: Path) -> None:
    own = tmp_path / "backend.py"
    own.write_text("class B:\n    def __init__(self, model_runner):\n        self.x = model_runner.page_size\n",
                   encoding="utf-8")
    assert explain_read(own, 3, "page_size") is None


def test_repeated_calls_are_cached_per_file_version(tmp_path: Path) -> None:
    release = _installed()
    tree = tmp_path / "sglang"
    for relative in ("srt/model_executor/model_runner.py", DSA_BACKEND_FILE):
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(release.file(relative), tree / relative)
    copy = tree / DSA_BACKEND_FILE
    line = _line(copy, "max_running_requests")
    first = explain_read(copy, line, "max_running_requests")
    assert first is not None and explain_read(copy, line, "max_running_requests") == first
    text = copy.read_text(encoding="utf-8").splitlines(keepends=True)
    copy.write_text("".join(["# shifted\n", *text]), encoding="utf-8")  # a new version: read again
    assert explain_read(copy, line, "max_running_requests") is None
    moved = explain_read(copy, line + 1, "max_running_requests")
    assert moved is not None and moved.site.endswith(f":{line + 1}")


def test_explaining_imports_neither_torch_nor_sglang() -> None:
    release = _installed()
    path = release.file(DSA_BACKEND_FILE)
    code = ("import sys\nfrom dsakit.audit.explain import explain_read\n"
            f"assert explain_read({str(path)!r}, {_line(path, 'max_running_requests')}, 'max_running_requests')\n"
            "print(sorted(m for m in ('torch', 'sglang') if m in sys.modules))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
