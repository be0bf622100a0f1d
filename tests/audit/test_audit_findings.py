"""Gaps in the audit's tests found by mutation testing: `dsakit/audit/findings.py`, the verdict of one
read on the judged devices (a device dsakit does not simulate counts only reads without a device
guard), a missing entry's devices and a mock's failing rule, called directly; whole mocks are judged
end to end in test_audit_suites.py and test_audit_command_in_process.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.command import audit, select_devices
from dsakit.audit.findings import MissingEntry, MockFinding, ReadFinding, read_verdict, short_site
from dsakit.audit.mock_finder import MockValue
from dsakit.audit.suite_device import stand_in
from dsakit.gates.device_model import SIMULATED
from dsakit.stack.sglang_release import SGLangRelease
from dsakit.sglang_facts.runner_source import SourceSite
from dsakit.sglang_facts.backend_reads import RunnerRead

DEVICES = {"sm90": SIMULATED["sm90"], "sm100": SIMULATED["sm100"], "gfx942": SIMULATED["gfx942"],
           "xpu": stand_in("xpu")}


def _read(*guards: str, soft: bool = False) -> RunnerRead:
    return RunnerRead("page_size", SourceSite("sglang/srt/layers/attention/dsa_backend.py", 7), "B.__init__",
                      soft=soft, guards=guards)


def test_an_unguarded_read_fails_everywhere_a_stand_in_included() -> None:
    found = read_verdict(_read(), ("B",), DEVICES)
    assert found == ReadFinding(_read(), ("B",), ("sm90", "sm100", "gfx942", "xpu"), ())


def test_a_device_guard_is_not_judged_on_a_stand_in() -> None:
    found = read_verdict(_read("_is_cuda"), ("B",), DEVICES)
    assert found is not None and (found.fails_on, found.only_with) == (("sm90", "sm100"), ())
    assert read_verdict(_read("_is_cuda"), ("B",), {"xpu": stand_in("xpu")}) is None


def test_configuration_is_collected_per_condition_in_device_order() -> None:
    found = read_verdict(_read("self.flag and self.device_sm_major >= 10"), ("B",), DEVICES)
    assert found is not None and found.fails_on == ()
    assert found.only_with == (("self.flag", ("sm100",)),)
    mixed = read_verdict(_read("self.flag or _is_hip"), ("B",), DEVICES)
    assert mixed is not None and mixed.fails_on == ("gfx942",)
    assert mixed.only_with == (("self.flag", ("sm90", "sm100")),)
    assert read_verdict(_read("_is_hip"), ("B",), {"sm90": SIMULATED["sm90"]}) is None


def test_a_missing_entry_fails_on_its_hard_reads_devices_once_each() -> None:
    hard = ReadFinding(_read(), ("B",), ("sm90", "sm100"), ())
    again = ReadFinding(_read("x"), ("B",), ("sm100", "gfx942"), ())
    soft = ReadFinding(_read(soft=True), ("B",), ("xpu",), ())
    entry = MissingEntry("page_size", "page_size", (hard, again, soft))
    assert entry.fails_on == ("sm90", "sm100", "gfx942") and entry.failing
    only_soft = MissingEntry("page_size", None, (soft,))
    assert only_soft.fails_on == () and not only_soft.failing
    assert only_soft.as_dict()["failing"] is False


def test_a_mock_fails_on_a_failing_entry_unless_it_is_expected_to_raise() -> None:
    value = MockValue("class", "R", "t.py:1", AttrTree())
    failing = MissingEntry("page_size", "page_size", (ReadFinding(_read(), ("B",), ("sm90",), ()),))
    notes = MissingEntry("page_size", "page_size", (ReadFinding(_read(soft=True), ("B",), ("sm90",), ()),))
    assert MockFinding(value, [], ("B",), missing=[failing]).failing
    assert not MockFinding(value, [], ("B",), missing=[failing], expected=("pytest.raises at t.py:3",)).failing
    assert not MockFinding(value, [], ("B",), missing=[notes]).failing
    assert not MockFinding(value, [], ("B",)).failing
    judged = MockFinding(value, [], ("B",), devices={"sm90": "", "xpu": "device", "npu": "x", "hpu": "y"})
    assert judged.not_simulated == ["xpu", "npu", "hpu"] and judged.use_known and not MockFinding(
        value, [], (), assumed=True).use_known


def test_short_site_drops_the_attention_prefix_only() -> None:
    assert short_site("sglang/srt/layers/attention/dsa_backend.py:7") == "dsa_backend.py:7"
    assert short_site("sglang/srt/mem_cache/pool.py:7") == "sglang/srt/mem_cache/pool.py:7"
    assert short_site("x/sglang/srt/layers/attention/a.py:1") == "x/sglang/srt/layers/attention/a.py:1"
    assert Path(short_site("sglang/srt/layers/attention/dsa/x.py:1")).parts[0] == "dsa"


def test_a_mock_also_used_outside_pytest_raises_is_judged_by_that_use(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_sglang: SGLangRelease) -> None:
    (tmp_path / "test_mixed.py").write_text(textwrap.dedent('''
        import pytest
        from types import SimpleNamespace
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        RUNNER = SimpleNamespace(device="cuda")


        def test_raises():
            with pytest.raises(AttributeError):
                DeepseekSparseAttnBackend(RUNNER)


        def test_builds():
            DeepseekSparseAttnBackend(RUNNER)
    '''), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (mock,) = audit(["."], select_devices("sm90"), installed_sglang).mocks
    assert len(mock.calls) == 2 and mock.expected == () and mock.failing
    alone = tmp_path / "test_mixed.py"
    alone.write_text(alone.read_text(encoding="utf-8").split("\n\ndef test_builds")[0] + "\n", encoding="utf-8")
    (mock,) = audit(["."], select_devices("sm90"), installed_sglang).mocks
    assert mock.expected == ("pytest.raises at test_mixed.py:10",) and not mock.failing


def test_uses_on_different_devices_list_devices_in_selection_order_and_name_the_narrowing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_sglang: SGLangRelease) -> None:
    (tmp_path / "test_two_uses.py").write_text(textwrap.dedent('''
        import unittest
        from types import SimpleNamespace
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        RUNNER = SimpleNamespace(device="cuda")


        @unittest.skipUnless(is_xpu(), "xpu only")
        def test_on_xpu():
            DeepseekSparseAttnBackend(RUNNER)


        def test_plain():
            DeepseekSparseAttnBackend(RUNNER)
    '''), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (mock,) = audit(["."], select_devices("sm90,cpu"), installed_sglang).mocks
    assert list(mock.devices) == ["sm90", "xpu"]  # the xpu use came first; sm90 is listed first
    assert mock.narrowed_by == ("device='cuda' (the mock's)", "skipUnless(is_xpu()) at test_two_uses.py:9")
    unguarded = [r for e in mock.missing for r in e.reads if not r.read.guards]
    assert unguarded and all(r.fails_on == ("sm90", "xpu") for r in unguarded)
    assert mock.missing and all(e.contract_entry == e.path for e in mock.missing)  # top-level entries
    (again,) = audit(["."], select_devices("sm90"), installed_sglang).mocks
    assert list(again.devices) == ["sm90", "xpu"] and again.narrowed_by == (
        "device='cuda' (the mock's)", "skipUnless(is_xpu()) at test_two_uses.py:9")
    (tmp_path / "test_two_uses.py").write_text(textwrap.dedent('''
        from types import SimpleNamespace
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


        def test_plain():
            DeepseekSparseAttnBackend(SimpleNamespace(device="cuda"))
    '''), encoding="utf-8")
    (plain,) = audit(["."], select_devices("sm90"), installed_sglang).mocks
    assert plain.narrowed_by == ()  # narrowed to what was selected anyway: nothing to say


def test_a_soft_read_below_what_the_mock_provides_names_its_contract_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, installed_sglang: SGLangRelease) -> None:
    (tmp_path / "test_v4.py").write_text(textwrap.dedent('''
        from types import SimpleNamespace
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        def test_v4():
            DeepseekV4AttnBackend(SimpleNamespace(model_config=SimpleNamespace(hf_text_config=SimpleNamespace())))
    '''), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (mock,) = audit(["."], select_devices("sm90"), installed_sglang).mocks
    if not mock.soft:
        pytest.skip(f"[sglang:no-soft-hf-text-config-read] SGLang {installed_sglang.version}'s DeepseekV4AttnBackend "
                    "reads nothing below model_config.hf_text_config with a default")
    assert all(e.contract_entry == "model_config.hf_text_config" and e.path.startswith("model_config.hf_text_config.")
               for e in mock.soft)
