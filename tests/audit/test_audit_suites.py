"""`dsakit audit` on the shapes of SGLang's real suites: the attention registry per device, only DSA /
DSv4 runners judged, the suite's own device, expected raises, release mismatch, the silent-skip
harness, `--backend-src` with the contract extension, files that do not parse.

The suites are written into tmp_path; expected read sites come from the installed SGLang source
(found by AST here), never from dsakit. Nothing imports SGLang or torch.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsakit.audit.command import audit, select_devices
from dsakit.gates.device_model import SIMULATED
from dsakit.stack.sglang_release import (
    DEEPSEEK_V4_BACKEND_FILE,
    DSA_BACKEND_FILE,
    HIP_RADIX_FILE,
    SGLangRelease,
    installed_release,
)

NVIDIA = [k for k, d in SIMULATED.items() if d.vendor == "nvidia"]
AMD = [k for k, d in SIMULATED.items() if d.vendor == "amd"]


def _run(root: Path, monkeypatch: pytest.MonkeyPatch, *paths: str, devices: str | None = None) -> dict[str, Any]:
    monkeypatch.chdir(root)  # the callers ask for `installed_sglang`, which skips where there is none
    data: dict[str, Any] = audit(list(paths) or ["."], select_devices(devices), installed_release()).as_dict()
    return data


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dsakit audit ARGS` from `cwd`, in this process (static: no torch, no SGLang import), so the
    installed SGLang is scanned once per worker, not once per call."""
    from tests.conftest import _dsakit_in_process

    return _dsakit_in_process(cwd, "audit", *args)


def _mock(data: dict[str, Any], label: str) -> dict[str, Any]:
    found = [m for m in data["mocks"] if m["label"] == label]
    assert len(found) == 1, [m["label"] for m in data["mocks"]]
    return found[0]


def _read_sites(mock: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(path, site, fails_on) of every failing read of every missing entry."""
    return [(m["path"], r["site"], r["fails_on"]) for m in mock["missing"] for r in m["reads"] if r["fails_on"]]


def _lines_reading(path: Path, attribute: str) -> set[int]:
    return {node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Attribute) and node.attr == attribute
            and isinstance(node.value, ast.Name) and node.value.id == "model_runner"}


# ---------------------------------------------------------------- the registry, per device


KIT_DSV4 = '''
    from types import SimpleNamespace

    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool


    class MockDSV4ModelRunner:
        def __init__(self, case):
            self.device = "cuda"
            self.page_size = 256
            self.hisparse_coordinator = None


    def build(case):
        runner = MockDSV4ModelRunner(case)
        return ATTENTION_BACKENDS[case.backend](runner)
'''


def test_registry_key_from_imports_routes_dsv4_per_device(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        installed_sglang: SGLangRelease, write_files: Callable[[dict[str, str]], Path]) -> None:
    """The kit's `ATTENTION_BACKENDS[case.backend](runner)`: DeepseekV4AttnBackend on CUDA,
    DeepseekV4HipRadixBackend on AMD; never DeepseekSparseAttnBackend (dsa_backend.py)."""
    release = installed_sglang
    write_files({"dsv4_attention.py": KIT_DSV4})
    data = _run(tmp_path, monkeypatch, devices="sm90,sm100,gfx942")
    mock = _mock(data, "MockDSV4ModelRunner")
    assert mock["used_with"] == ["DeepseekV4HipRadixBackend", "DeepseekV4AttnBackend"]
    assert "taken as 'dsv4' from the file's imports" in mock["calls"][0]["backend"]
    sites = _read_sites(mock)
    assert sites, mock
    v4 = f"sglang/{DEEPSEEK_V4_BACKEND_FILE}:"
    hip = f"sglang/{HIP_RADIX_FILE}:"
    assert not [s for s in sites if s[1].startswith(f"sglang/{DSA_BACKEND_FILE}:")]
    assert {d for _, site, on in sites if site.startswith(hip) for d in on} == {"gfx942"}
    assert {d for _, site, on in sites if site.startswith(v4) for d in on} == {"sm90", "sm100"}
    # both backends read the runner: each read is judged only where its backend is the registry's choice
    assert _lines_reading(release.file(HIP_RADIX_FILE), "model_config")
    assert any(site.startswith(hip) for _, site, _ in sites) and any(site.startswith(v4) for _, site, _ in sites)


def test_literal_registry_key_and_non_dsa_keys(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        installed_sglang: SGLangRelease, write_files: Callable[[dict[str, str]], Path]) -> None:
    release = installed_sglang
    line = min(_lines_reading(release.file(DSA_BACKEND_FILE), "max_running_requests"))
    write_files({"test_reg.py": '''
        from types import SimpleNamespace

        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

        KEY = "dsa"


        def test_dsa():
            runner = SimpleNamespace(device="cuda", page_size=64, is_draft_worker=False)
            ATTENTION_BACKENDS[KEY](runner)


        class TritonModelRunner:
            device = "cuda"


        def test_triton():
            ATTENTION_BACKENDS["triton"](TritonModelRunner())
    '''})
    data = _run(tmp_path, monkeypatch, devices="sm100")
    ns = _mock(data, "SimpleNamespace")
    assert ns["used_with"] == ["DeepseekSparseAttnBackend"]
    assert ("max_running_requests", f"sglang/{DSA_BACKEND_FILE}:{line}", ["sm100"]) in _read_sites(ns)
    assert [m["label"] for m in data["mocks"]] == ["SimpleNamespace"]  # the triton runner is not listed
    assert data["not_for_dsa"] == [{"label": "TritonModelRunner", "site": "test_reg.py:13"}]
    assert "1 runners not for DSA / DSv4" in data["summary"]


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_multistep_factory_is_traced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_ms.py": '''
        from types import SimpleNamespace

        from sglang.srt.layers.attention.deepseek_v4_trtllm_backend import create_deepseek_v4_multistep_backend


        def test_draft():
            runner = SimpleNamespace(device="cuda")
            create_deepseek_v4_multistep_backend(runner, topk=1, speculative_num_steps=2)
    '''})
    data = _run(tmp_path, monkeypatch, devices="sm90")
    ns = _mock(data, "SimpleNamespace")
    assert ns["used_with"] == ["DeepseekV4MultiStepBackend"]
    assert _read_sites(ns)


# ---------------------------------------------------------------- only DSA / DSv4 runners


GDN_KIT = '''
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.model_executor.model_runner import ModelRunner


    class MockGDNModelRunner(ModelRunner):
        def __init__(self, case):
            self.device = "cuda"


    def build(case):
        runner = MockGDNModelRunner(case)
        return ATTENTION_BACKENDS[case.backend](runner)
'''


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_non_dsa_runner_is_counted_not_listed_and_verdicts_do_not_depend_on_other_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"kit/gdn_attention.py": GDN_KIT, "kit/dsv4_attention.py": KIT_DSV4,
                 "alone/dsv4_attention.py": KIT_DSV4})
    both = _run(tmp_path, monkeypatch, "kit")
    assert [m["label"] for m in both["mocks"]] == ["MockDSV4ModelRunner"]
    assert [m["label"] for m in both["not_for_dsa"]] == ["MockGDNModelRunner"]
    assert "1 runners not for DSA / DSv4" in both["summary"]
    alone = _run(tmp_path, monkeypatch, "alone")

    def verdict(data: dict[str, Any]) -> Any:
        (mock,) = data["mocks"]
        return [(m["path"], m["fails_on"]) for m in mock["missing"]]

    assert verdict(both) == verdict(alone) and verdict(alone)
    assert _run(tmp_path, monkeypatch, "kit/gdn_attention.py")["mocks"] == []


# ---------------------------------------------------------------- the suite's own device


XPU_SUITE = '''
    import unittest

    import torch

    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
    from sglang.test.ci.ci_register import {register}

    {register}(est_time=20, suite="stage-b")


    class MockModelRunner:
        def __init__(self):
            self.device = "{device}"
            self.page_size = 128


    class TestIndexer(unittest.TestCase):
        def setUp(self):
            self.runner = MockModelRunner()
            self.backend = DeepseekSparseAttnBackend(self.runner)
'''


def test_xpu_suite_is_judged_on_xpu_without_device_guards(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        installed_sglang: SGLangRelease, write_files: Callable[[dict[str, str]], Path]) -> None:
    release = installed_sglang
    line = min(_lines_reading(release.file(DSA_BACKEND_FILE), "max_running_requests"))
    write_files({"test_xpu.py": XPU_SUITE.format(register="register_xpu_ci", device="xpu")})
    data = _run(tmp_path, monkeypatch)
    mock = _mock(data, "MockModelRunner")
    assert mock["devices"] == ["xpu"] and mock["not_simulated_devices"] == ["xpu"]
    assert mock["narrowed_by"] == ["register_xpu_ci at test_xpu.py:8", "device='xpu' (the mock's)"]
    failing = {path: on for path, _, on in _read_sites(mock)}
    assert failing["is_draft_worker"] == ["xpu"]  # read unconditionally: fails on XPU too
    # guarded by `_is_cuda and device_sm_major >= 10`: not judged on a device dsakit does not simulate
    assert all(f":{line}" not in site for _, site, _ in _read_sites(mock))
    assert not any(d in NVIDIA + AMD for _, _, on in _read_sites(mock) for d in on)
    text = _cli(tmp_path, ".").stdout
    assert "  xpu: not a simulated device; reads checked without device guards" in text


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_amd_registration_and_skip_guards_narrow_the_devices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({
        "amd/test_amd.py": XPU_SUITE.format(register="register_amd_ci", device="cuda"),
        "guard/test_guard.py": '''
            import unittest

            import torch

            from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
            from sglang.srt.utils import is_hip


            class MockModelRunner:
                device = "cpu"


            @unittest.skipUnless(is_hip(), "HIP only")
            class TestHip(unittest.TestCase):
                def test_build(self):
                    DeepseekSparseAttnBackend(MockModelRunner())


            @unittest.skipIf(not torch.cuda.is_available(), "needs a GPU")
            class TestGpu(unittest.TestCase):
                def test_build(self):
                    runner = type("R", (), {"device": "cpu"})()
                    DeepseekSparseAttnBackend(runner)
        ''',
    })
    amd = _mock(_run(tmp_path, monkeypatch, "amd"), "MockModelRunner")
    assert amd["devices"] == AMD
    assert {d for _, _, on in _read_sites(amd) for d in on} <= set(AMD)
    guarded = _run(tmp_path, monkeypatch, "guard")
    assert _mock(guarded, "MockModelRunner")["devices"] == AMD
    assert _mock(guarded, 'type("R", ...)()')["devices"] == NVIDIA + AMD  # cpu: skipped without a GPU


# ---------------------------------------------------------------- expected raises, silent skips


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_construction_expected_to_raise_is_a_note(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_raise.py": '''
        import unittest
        from types import SimpleNamespace
        from unittest.mock import patch

        import pytest

        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        class TestGate(unittest.TestCase):
            def test_missing_op(self):
                runner = SimpleNamespace(device="cpu", page_size=256)
                with (patch("os.getcwd"), self.assertRaisesRegex(RuntimeError, "does not provide")):
                    DeepseekV4AttnBackend(runner)


        def test_pytest_raises():
            other = SimpleNamespace(device="cpu")
            with pytest.raises(ValueError):
                DeepseekV4AttnBackend(other)
    '''})
    data = _run(tmp_path, monkeypatch)
    assert data["exit_code"] == 0, data["summary"]
    for mock in data["mocks"]:
        assert mock["expected_to_raise"] and mock["missing"] and not mock["failing"]
    where = sorted(m["expected_to_raise"][0] for m in data["mocks"])
    assert where == ["pytest.raises at test_raise.py:19", "self.assertRaisesRegex at test_raise.py:13"]
    text = _cli(tmp_path, ".").stdout
    assert "expected to raise (self.assertRaisesRegex at test_raise.py:13): reads after the raise are not checked" \
        in text
    assert "  note (expected to raise): lacks " in text and "\n  lacks " not in text


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_silent_skip_harness_is_called_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"harness.py": '''
        import unittest

        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        class HarnessUnavailable(RuntimeError):
            """The production graph cannot be built; the GPU tests treat this as a clean skip."""


        class _StubModelRunner:
            def __init__(self):
                self.device = "cuda"
                self.is_draft_worker = True


        class Harness:
            def _build(self):
                try:
                    self._build_inner()
                except Exception as exc:
                    raise HarnessUnavailable(str(exc)) from exc

            def _build_inner(self):
                self.backend = DeepseekV4AttnBackend(model_runner=_StubModelRunner())


        class TestDirect(unittest.TestCase):
            def test_build(self):
                runner = type("Direct", (), {"device": "cuda"})()
                try:
                    DeepseekV4AttnBackend(runner)
                except (ImportError, AttributeError) as exc:
                    self.skipTest(str(exc))
    '''})
    data = _run(tmp_path, monkeypatch, devices="sm90")
    stub = _mock(data, "_StubModelRunner")
    assert stub["errors_become_skips"] == ["except Exception at harness.py:20 (around self._build_inner())"]
    assert stub["failing"]  # the gaps are real; the harness only hides them
    direct = _mock(data, 'type("Direct", ...)()')
    assert direct["errors_become_skips"] == ["except (ImportError, AttributeError) at harness.py:32"]
    text = _cli(tmp_path, ".", "--device", "sm90").stdout
    assert ("silent-skip harness: except Exception at harness.py:20 (around self._build_inner()) turns "
            "construction errors into skips") in text


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_a_handler_that_does_not_catch_attribute_errors_is_no_silent_skip(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"kit.py": '''
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        def build(testcase):
            runner = type("R", (), {"device": "cuda"})()
            try:
                backend = DeepseekV4AttnBackend(runner)
            except (AssertionError, ImportError, ModuleNotFoundError) as exc:
                testcase.skipTest(str(exc))
    '''})
    assert _mock(_run(tmp_path, monkeypatch), 'type("R", ...)()')["errors_become_skips"] == []


# ---------------------------------------------------------------- release mismatch


def test_imports_the_tree_lacks_are_one_warning_per_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        installed_sglang: SGLangRelease, write_files: Callable[[dict[str, str]], Path]) -> None:
    release = installed_sglang
    write_files({"test_new.py": '''
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend, NoSuchHelperAnywhere
        from sglang.srt.layers.attention.not_a_module_here import thing
        from sglang.srt.layers.attention import dsa_backend, deepseek_v4_backend


        class FakeModelRunner:
            device = "cuda"


        def test_it():
            DeepseekSparseAttnBackend(FakeModelRunner())
    ''', "test_ok.py": "from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend\n"})
    data = _run(tmp_path, monkeypatch)
    assert data["release_mismatch"] == [
        f"test_new.py imports 2 names SGLang {release.version} lacks: "
        "sglang.srt.layers.attention.dsa_backend.NoSuchHelperAnywhere, "
        "sglang.srt.layers.attention.not_a_module_here (no such module); judged anyway "
        "(the suite may be for another release: --sglang-src DIR)"
    ]
    assert _mock(data, "FakeModelRunner")["failing"]  # judged anyway


# ---------------------------------------------------------------- files that do not parse (issue 28 item 5)


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_binary_non_utf8_and_broken_files_are_named_and_latin1_cookie_is_parsed(tmp_path: Path) -> None:
    (tmp_path / "test_binary.py").write_bytes(b"\x7fELF\x00\x01\x02")
    (tmp_path / "test_cp1252.py").write_bytes(b"x = '\xe9t\xe9'\n")
    (tmp_path / "test_broken.py").write_text("def broken(:\n", encoding="utf-8")
    only_bad = _cli(tmp_path, ".")
    assert only_bad.returncode == 2, only_bad.stdout + only_bad.stderr
    assert only_bad.stdout == ""
    for expected in ("nothing audited", "test_binary.py is binary (it holds NUL bytes)",
                     "test_cp1252.py is not UTF-8 and declares no other encoding",
                     "add a coding cookie such as '# -*- coding: latin-1 -*-'",
                     "test_broken.py has a syntax error at line 1"):
        assert expected in only_bad.stderr, only_bad.stderr

    (tmp_path / "test_latin1.py").write_bytes(
        b"# -*- coding: latin-1 -*-\n"
        b"from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend\n\n"
        b"class CafeModelRunner:\n    name = 'caf\xe9'\n\n"
        b"def test_it():\n    DeepseekSparseAttnBackend(CafeModelRunner())\n")
    mixed = _cli(tmp_path, ".", "--json")
    assert mixed.returncode == 1, mixed.stdout + mixed.stderr
    data = json.loads(mixed.stdout)
    assert data["files"] == ["test_latin1.py"]
    assert [m["label"] for m in data["mocks"]] == ["CafeModelRunner"]
    assert len(data["not_audited"]) == 3 and data["summary"].endswith("\u2192 FAILED")


# ---------------------------------------------------------------- --backend-src and the contract extension (issue 25 item 6)


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_backend_src_reads_the_users_backend_and_contract_extension(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({
        "pyproject.toml": '''
            [tool.dsakit.contract."my_sparse_budget"]
            type = "int"
            target = 8
            set_by = "my_backend/runner_patch.py:3"
        ''',
        "my_backend/sparse.py": '''
            class MySparseBackend:
                def __init__(self, model_runner):
                    self.budget = model_runner.my_sparse_budget
                    self.page_size = model_runner.page_size
        ''',
        "tests/test_mine.py": '''
            from my_backend.sparse import MySparseBackend


            class HandWrittenRunner:
                def __init__(self):
                    self.page_size = 64


            def test_budget():
                MySparseBackend(HandWrittenRunner())
        ''',
    })
    without = _cli(tmp_path, "tests", "--json")
    assert without.returncode == 0, without.stdout + without.stderr
    assert json.loads(without.stdout)["mocks"] == []  # not handed to a backend the audit knows

    result = _cli(tmp_path, "tests", "--backend-src", "my_backend", "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    data = json.loads(result.stdout)
    mock = _mock(data, "HandWrittenRunner")
    assert mock["used_with"] == ["MySparseBackend"]
    (entry,) = mock["missing"]
    assert (entry["path"], entry["contract_entry"]) == ("my_sparse_budget", "my_sparse_budget")
    assert entry["reads"][0]["site"].endswith("my_backend/sparse.py:3")
    text = _cli(tmp_path, "tests", "--backend-src", "my_backend").stdout
    assert "lacks my_sparse_budget: " in text and "[not in dsakit's contract]" not in text
    (tmp_path / "pyproject.toml").unlink()
    assert "lacks my_sparse_budget [not in dsakit's contract]: " in _cli(
        tmp_path, "tests", "--backend-src", "my_backend").stdout
    missing = _cli(tmp_path, "tests", "--backend-src", "nowhere")
    assert missing.returncode == 2 and "--backend-src nowhere does not exist" in missing.stderr


def test_registry_table_per_device(installed_sglang: SGLangRelease) -> None:
    """SGLang's registry read statically: "dsa" / "nsa" build DeepseekSparseAttnBackend everywhere;
    "dsv4" builds DeepseekV4AttnBackend on CUDA (and a GPU-less host), the HIP radix backend on AMD."""
    from dsakit.audit.registry import chosen_on, registry

    table = registry(installed_sglang)
    for key in ("dsa", "nsa"):
        assert {d: [c.qualname for c in chosen_on(table[key], d, m)] for d, m in SIMULATED.items()} == {
            d: ["DeepseekSparseAttnBackend"] for d in SIMULATED}
    dsv4 = {d: [c.qualname for c in chosen_on(table["dsv4"], d, m)] for d, m in SIMULATED.items()}
    assert dsv4 == {d: ["DeepseekV4HipRadixBackend"] if d in AMD else ["DeepseekV4AttnBackend"] for d in SIMULATED}
    assert [c.qualname for c in table["triton"]] == ["TritonAttnBackend"]
