"""Gaps in the audit's tests found by mutation testing (bench/mutation_run.py --group audit): the
value tree of a mock (dsakit/audit/attr_tree.py), the command's inputs (dsakit/audit/command.py) and
the wording of one read (dsakit/audit/explain.py), tested directly and fast; the end-to-end audits of
suites are in test_audit*.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.command import own_backends, python_files, select_devices
from dsakit.audit.explain import explain_read
from dsakit.audit.guard_eval import verdict
from dsakit.errors import UsageError
from dsakit.gates.device_model import SIMULATED
from dsakit.stack.sglang_release import DSA_BACKEND_FILE, MODEL_RUNNER_FILE, SGLangRelease


def test_constants_keep_literal_values_only_and_take_no_attributes() -> None:
    assert (AttrTree.constant("xpu").leaf, AttrTree.constant("xpu").value) == (True, "xpu")
    assert AttrTree.constant(3).value == 3 and AttrTree.constant(True).value is True
    assert AttrTree.constant([1]).value is None and AttrTree.constant().leaf is True
    assert AttrTree.constant(None).missing("device") == "device"
    assert AttrTree.opaque("a MagicMock").missing("anything.below") is None


def test_setting_an_attribute_records_its_site_and_turns_a_constant_into_an_object() -> None:
    tree = AttrTree.constant(None)
    tree.set("device", AttrTree.constant("cuda"), "conftest.py:3")
    assert (tree.leaf, tree.sites, tree.children["device"].value) == (False, {"device": "conftest.py:3"}, "cuda")
    assert tree.missing("device") is None and tree.missing("page_size.x") == "page_size"
    assert tree.missing("device.index") == "device.index"  # a constant has no attributes


def test_only_a_closed_child_takes_more_attributes() -> None:
    tree = AttrTree()
    tree.set("model_config", AttrTree(), "a.py:1")
    tree.set("pool", AttrTree.opaque("unknown"), "a.py:2")
    assert tree.child_for_update("model_config") is tree.children["model_config"]
    assert tree.child_for_update("pool") is None and tree.child_for_update("absent") is None


def test_merging_a_base_adds_what_the_subclass_lacks_and_its_openness() -> None:
    own, base = AttrTree(), AttrTree(open="a base the audit cannot read")
    own.set("device", AttrTree.constant("cuda"), "sub.py:1")
    base.set("device", AttrTree.constant("cpu"), "base.py:1")
    base.set("page_size", AttrTree.constant(64), "base.py:2")
    base.children["unsited"] = AttrTree()
    own.merge(base)
    assert own.children["device"].value == "cuda" and own.sites["device"] == "sub.py:1"
    assert own.children["page_size"].value == 64 and own.sites["page_size"] == "base.py:2"
    assert own.sites["unsited"] == ""
    assert own.open == "a base the audit cannot read"
    first = AttrTree(open="first reason")
    first.merge(AttrTree(open="second reason"))
    assert first.open == "first reason"


def test_site_of_is_where_the_last_provided_part_is_set() -> None:
    tree = AttrTree()
    config = AttrTree()
    config.children["hf_config"] = AttrTree.opaque("SimpleNamespace")  # no site of its own
    tree.set("model_config", config, "conftest.py:10")
    tree.set("page_size", AttrTree.constant(1), "conftest.py:11")
    assert tree.site_of("model_config.hf_config.index_topk") == "conftest.py:10"  # the nearest known
    config.sites["hf_config"] = "conftest.py:12"
    assert tree.site_of("model_config.hf_config.index_topk") == "conftest.py:12"
    assert tree.site_of("page_size") == "conftest.py:11"
    assert tree.site_of("absent.x") == ""
    assert tree.names() == ["model_config", "model_config.hf_config.*", "page_size"]


def test_select_devices_takes_names_and_aliases_and_refuses_real_and_nothing() -> None:
    assert list(select_devices(None)) == list(SIMULATED) and list(select_devices("")) == list(SIMULATED)
    assert list(select_devices(" sm100, ,b300")) == ["sm100", "sm103"]
    names = ", ".join(SIMULATED)
    with pytest.raises(UsageError) as raised:
        select_devices("sm90,Real")
    assert str(raised.value) == (f"dsakit audit simulates devices; 'real' is not one; valid names: {names} "
                                 "(or an alias such as b300)")
    with pytest.raises(UsageError) as raised:
        select_devices(" , ")
    assert str(raised.value) == f"--device names no device; valid names: {names}"


def test_python_files_walks_folders_skipping_tool_dirs_and_refuses_what_is_not_python(tmp_path: Path) -> None:
    (tmp_path / "suite" / "sub").mkdir(parents=True)
    (tmp_path / "suite" / ".venv" / "lib").mkdir(parents=True)
    (tmp_path / "suite" / "__pycache__").mkdir()
    for name in ("suite/b.py", "suite/sub/a.py", "suite/.venv/lib/x.py", "suite/__pycache__/c.py", "notes.txt"):
        (tmp_path / name).write_text("x = 1\n", encoding="utf-8")
    suite, single = tmp_path / "suite", tmp_path / "suite" / "b.py"
    assert python_files([str(suite), str(single)]) == [suite / "b.py", suite / "sub" / "a.py"]  # once each
    for bad, message in ((tmp_path / "nope", f"{tmp_path / 'nope'} does not exist: pass test files or folders of a suite"),
                         (tmp_path / "notes.txt", f"{tmp_path / 'notes.txt'} is not a Python file: pass .py files "
                                                  "or folders holding them")):
        with pytest.raises(UsageError) as raised:
            python_files([str(bad)])
        assert str(raised.value) == message
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError) as raised:
        python_files([str(tmp_path / "empty")])
    assert str(raised.value) == f"no Python files under {tmp_path / 'empty'}: pass a suite's test files or folders"


def test_own_backends_are_the_classes_of_the_backend_files(tmp_path: Path) -> None:
    assert own_backends(None) == ([], ())
    (tmp_path / "backend.py").write_text("class MyBackend:\n    pass\n\ndef helper():\n    pass\n", encoding="utf-8")
    files, backends = own_backends(str(tmp_path))
    assert files == [(tmp_path / "backend.py").resolve()]
    assert [(b.name, b.own) for b in backends] == [("MyBackend", True)]
    with pytest.raises(UsageError) as raised:
        own_backends(str(tmp_path / "nope"))
    assert str(raised.value) == (f"--backend-src {tmp_path / 'nope'} does not exist: pass your backend's "
                                 ".py file or folder")
    (tmp_path / "broken.py").write_text("def (:\n", encoding="utf-8")
    with pytest.raises(UsageError, match=r"^--backend-src: .*broken\.py "):
        own_backends(str(tmp_path))


def test_site_of_stops_at_the_first_part_the_mock_lacks() -> None:
    tree = AttrTree()
    tree.set("page_size", AttrTree.constant(1), "conftest.py:11")
    assert tree.site_of("absent.page_size") == ""  # not the site of a later part found at the top


def _line_reading(path: Path, dotted: str) -> int:
    lines = [n for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if f"model_runner.{dotted}" in text]
    assert lines, f"no model_runner.{dotted} in {path}"
    return lines[0]


def test_explain_matches_a_dotted_tail_or_a_namespace_read_through_and_nothing_else(installed_sglang: SGLangRelease) -> None:
    path = installed_sglang.file(DSA_BACKEND_FILE)
    line = _line_reading(path, "model_config.hf_config.architectures")
    for attribute in ("model_config.hf_config.architectures", "hf_config.architectures", "architectures",
                      ".architectures."):
        found = explain_read(path, line, attribute)
        assert found is not None and found.attribute == "model_config.hf_config.architectures", attribute
    for attribute in ("hf_config", "model_config", "model_config.hf_config"):  # a namespace it reads through
        found = explain_read(path, line, attribute)
        assert found is not None and found.attribute == "model_config.hf_config.architectures", attribute
    for attribute in ("Xarchitectures", "config.architectures", "model_conf", "hf_config.arch"):
        assert explain_read(path, line, attribute) is None, attribute


def test_explain_names_the_devices_a_read_fires_on_none_of(installed_sglang: SGLangRelease) -> None:
    path = installed_sglang.file(DSA_BACKEND_FILE)
    line = _line_reading(path, "max_running_requests")
    found = explain_read(path, line, "max_running_requests", devices=["gfx942", "cpu"])
    assert found is not None and (found.fires_on, found.only_with) == ((), ())
    assert found.text.endswith(" -> fires on none of gfx942, cpu")


def test_explain_needs_a_package_named_sglang(installed_sglang: SGLangRelease, tmp_path: Path) -> None:
    tree = tmp_path / "vendored"  # a copy of SGLang's files under another package name
    for relative in (MODEL_RUNNER_FILE, DSA_BACKEND_FILE):
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(installed_sglang.file(relative), tree / relative)
    copy = tree / DSA_BACKEND_FILE
    assert explain_read(copy, _line_reading(copy, "max_running_requests"), "max_running_requests") is None


def test_a_read_needing_two_configuration_flags_names_both() -> None:
    sm90 = SIMULATED["sm90"]
    assert verdict("_is_cuda and self.a and self.b", "sm90", sm90).condition == "self.a and self.b"
    assert verdict("self.a and self.b is None and self.c", "sm90", sm90).condition == "self.a and self.c"
    assert verdict("self.a and self.b is None", "sm90", sm90).condition == "self.a"


def test_a_subscript_of_configuration_is_left_to_configuration() -> None:
    found = verdict("_is_cuda and flags[0]", "sm90", SIMULATED["sm90"])
    assert (found.fires, found.condition) == (False, "flags[0]")
    assert verdict("_is_cuda and flags[0]", "gfx942", SIMULATED["gfx942"]).condition == ""


def test_explain_picks_the_least_guarded_of_the_reads_a_name_matches(
        installed_sglang: SGLangRelease, tmp_path: Path) -> None:
    tree = tmp_path / "sglang"
    (tree / MODEL_RUNNER_FILE).parent.mkdir(parents=True)
    shutil.copy(installed_sglang.file(MODEL_RUNNER_FILE), tree / MODEL_RUNNER_FILE)
    backend = tree / "srt/layers/attention/own_backend.py"
    backend.parent.mkdir(parents=True)
    backend.write_text("class OwnBackend:\n    def __init__(self, model_runner, c, d):\n"
                       "        self.x = (model_runner.a.x if d else 0) if c else model_runner.b.x\n", encoding="utf-8")
    found = explain_read(backend, 3, "x")
    assert found is not None and (found.attribute, found.guard) == ("b.x", "not c")
