"""`dsakit audit`: a static scan of a suite's mock model runners against what the backends read.

The suites are written into tmp_path in the shapes real suites use (SGLang's test_dsa_indexer
plain class with `type(...)()` sub-objects, SimpleNamespace fixtures, MagicMock(spec=ModelRunner),
a subclass of another suite's mock in another file). Expected sites come from the installed SGLang
source text, never from this file; nothing imports SGLang or torch.
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

from dsakit.audit.attr_tree import AttrTree
from dsakit.audit.command import audit, select_devices
from dsakit.audit.guard_eval import verdict
from dsakit.errors import UsageError
from dsakit.gates.device_model import SIMULATED
from dsakit.stack.sglang_release import DSA_BACKEND_FILE, DSA_TOPK_BACKEND_FILE, SGLangRelease, release_from_tree

EVERY_DEVICE = list(SIMULATED)

INDEXER_STYLE = '''
    import torch


    class MockModelRunner:
        """SGLang test_dsa_indexer style: a plain class, sub-objects built with type(...)()."""

        def __init__(self, page_size=64, context_len=2048):
            self.device = "cuda"
            self.page_size = page_size
            self.kv_cache_dtype = torch.bfloat16
            self.hisparse_coordinator = None
            self.model_config = type(
                "ModelConfig",
                (),
                {
                    "context_len": context_len,
                    "num_attention_heads": 16,
                    "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64,
                    "kv_lora_rank": 512,
                    "hf_config": type("HFConfig", (), {"architectures": ["DeepseekV32ForCausalLM"]})(),
                },
            )()
            self.req_to_token_pool = type("ReqToTokenPool", (), {"size": 16, "req_to_token": None})()
            self.token_to_kv_pool = type(
                "TokenToKVPool", (), {"dsa_kv_cache_store_fp8": False, "kv_cache_dim": 576}
            )()
'''

INDEXER_TEST = '''
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    from other_suite.runners import MockModelRunner


    def test_backend_builds():
        assert DeepseekSparseAttnBackend(MockModelRunner()) is not None
'''

CONFTEST = '''
    from types import SimpleNamespace

    import pytest


    @pytest.fixture
    def ns_runner():
        runner = SimpleNamespace(
            device="cpu",
            page_size=64,
            is_draft_worker=False,
            model_config=SimpleNamespace(context_len=4096, head_dim=512, v_head_dim=512),
            req_to_token_pool=SimpleNamespace(size=8, req_to_token=None),
            token_to_kv_pool=SimpleNamespace(),
            hisparse_coordinator=None,
        )
        runner.spec_algorithm = None
        return runner
'''

STYLES = '''
    from unittest.mock import MagicMock

    from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
    from sglang.srt.model_executor.model_runner import ModelRunner

    from other_suite.runners import MockModelRunner


    class DraftModelRunner(MockModelRunner):
        def __init__(self):
            super().__init__(page_size=1)
            self.is_draft_worker = True


    def test_v4(ns_runner):
        DeepseekV4AttnBackend(ns_runner)


    def test_resolve_spec_mock():
        runner = MagicMock(spec=ModelRunner)
        runner.max_running_requests = 64
        assert DSATopKBackend.resolve(runner)


    def test_draft():
        DeepseekSparseAttnBackend(DraftModelRunner())
'''

# Everything DeepseekSparseAttnBackend reads in 0.5.23, on every branch.
COMPLETE = '''
    from types import SimpleNamespace

    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


    class CompleteRunner:
        is_draft_worker = False

        def __init__(self):
            self.device = "cuda"
            self.page_size = 64
            self.kv_cache_dtype = None
            self.hisparse_coordinator = None
            setattr(self, "max_running_requests", 64)
            self.model_config = type("ModelConfig", (), {
                "context_len": 4096, "num_attention_heads": 16, "qk_nope_head_dim": 128,
                "qk_rope_head_dim": 64, "kv_lora_rank": 512,
                "hf_config": SimpleNamespace(architectures=["DeepseekV32ForCausalLM"]),
            })()
            self.req_to_token_pool = SimpleNamespace(size=64, req_to_token=None)
            self.token_to_kv_pool = SimpleNamespace(dsa_kv_cache_store_fp8=False, kv_cache_dim=576)
            self.server_args = SimpleNamespace(enable_deterministic_inference=False,
                                               dsa_prefill_backend="flashmla_sparse",
                                               dsa_decode_backend="flashmla_sparse",
                                               dsa_topk_backend="sgl-kernel",
                                               speculative_eagle_topk=None,
                                               enable_two_batch_overlap=False,
                                               disaggregation_mode="null")


    def test_complete():
        DeepseekSparseAttnBackend(CompleteRunner())
'''


@pytest.fixture
def suite(tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> Path:
    return write_files({
        "other_suite/__init__.py": "",
        "other_suite/runners.py": INDEXER_STYLE,
        "other_suite/test_indexer.py": INDEXER_TEST,
        "my_suite/conftest.py": CONFTEST,
        "my_suite/test_styles.py": STYLES,
    })


def _audit(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`dsakit audit ARGS` from `cwd`, in this process (static: no torch, no SGLang import), so the
    installed SGLang is scanned once per worker, not once per call."""
    from tests.conftest import _dsakit_in_process

    return _dsakit_in_process(cwd, "audit", *args)


def _json(cwd: Path, *args: str) -> dict[str, Any]:
    result = _audit(cwd, *args, "--json")
    assert result.returncode in (0, 1), result.stdout + result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    assert data["exit_code"] == result.returncode
    return data


def _mock(data: dict[str, Any], label: str) -> dict[str, Any]:
    found = [m for m in data["mocks"] if m["label"] == label]
    assert len(found) == 1, [m["label"] for m in data["mocks"]]
    return found[0]


def _missing(mock: dict[str, Any], path: str) -> dict[str, Any]:
    found = [m for m in mock["missing"] if m["path"] == path]
    assert found, f"{mock['label']} lacks {[m['path'] for m in mock['missing']]}, not {path}"
    return found[0]


def _read_line(path: Path, attribute: str) -> int:
    """The one line of `path` reading `model_runner.<attribute>` (found by AST, independently of dsakit)."""
    lines = {node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Attribute) and node.attr == attribute
             and isinstance(node.value, ast.Name) and node.value.id == "model_runner"}
    assert len(lines) == 1, f"model_runner.{attribute} read at lines {sorted(lines)} of {path}"
    return lines.pop()


# ---------------------------------------------------------------- the B300 trap


def test_indexer_style_mock_lacks_max_running_requests_on_sm10x(suite: Path, installed_sglang: SGLangRelease) -> None:
    release = installed_sglang
    line = _read_line(release.file(DSA_BACKEND_FILE), "max_running_requests")

    data = _json(suite, ".", "--device", "sm90,sm100,sm103")

    assert data["exit_code"] == 1
    mock = _mock(data, "MockModelRunner")
    assert mock["site"] == "other_suite/runners.py:4"
    assert mock["used_with"] == ["DeepseekSparseAttnBackend"]
    assert mock["calls"][0]["site"] == "other_suite/test_indexer.py:7"
    entry = _missing(mock, "max_running_requests")
    (read,) = entry["reads"]
    assert read["site"] == f"sglang/{DSA_BACKEND_FILE}:{line}"
    assert "self.device_sm_major >= 10" in read["guard"] and "_is_cuda" in read["guard"]
    assert read["fails_on"] == ["sm100", "sm103"]
    assert read["only_with"] == [{"condition": "self.dsa_decode_impl == 'trtllm'", "devices": ["sm90"]}]


def test_text_line_names_site_guard_and_devices(suite: Path, installed_sglang: SGLangRelease) -> None:
    release = installed_sglang
    line = _read_line(release.file(DSA_BACKEND_FILE), "max_running_requests")

    result = _audit(suite, "other_suite")

    assert result.returncode == 1, result.stdout + result.stderr
    lacks = [l.strip() for l in result.stdout.splitlines() if l.strip().startswith("lacks max_running_requests")]
    # SGLang's guard is `device_sm_major >= 10`, so SM 12.x takes the read too; AMD and CPU never do
    assert lacks == [
        f"lacks max_running_requests: dsa_backend.py:{line} (DeepseekSparseAttnBackend.__init__) when not "
        "uses_flashinfer_sparse_mla and _is_cuda and (self.device_sm_major >= 10 or self.dsa_decode_impl == "
        "'trtllm') -> fails on sm100, sm103, sm120; only with self.dsa_decode_impl == 'trtllm' on sm90"
    ]
    assert result.stdout.strip().splitlines()[-1].endswith("\u2192 FAILED")


def test_is_draft_worker_is_read_unconditionally_by_topk_resolve(suite: Path, installed_sglang: SGLangRelease) -> None:
    release = installed_sglang
    if not release.has("topk-role-split"):
        pytest.skip(f"[sglang:topk-role-split] SGLang {release.version} has no DSATopKBackend.resolve")
    line = _read_line(release.file(DSA_TOPK_BACKEND_FILE), "is_draft_worker")

    data = _json(suite, ".")

    # the indexer-style mock says device="cuda": it runs on GPUs only (ROCm's torch says "cuda" too)
    gpus = [k for k, d in SIMULATED.items() if d.is_gpu]
    for label, devices in (("MockModelRunner", gpus), ("MagicMock(spec=ModelRunner)", EVERY_DEVICE)):
        entry = _missing(_mock(data, label), "is_draft_worker")
        resolve = [r for r in entry["reads"] if r["function"] == "DSATopKBackend.resolve"]
        assert [r["site"] for r in resolve] == [f"sglang/{DSA_TOPK_BACKEND_FILE}:{line}"]
        assert resolve[0]["guard"] == "" and resolve[0]["fails_on"] == devices, label


# ---------------------------------------------------------------- mock styles


def test_subclass_of_another_suites_mock_inherits_and_adds(suite: Path) -> None:
    data = _json(suite, ".")
    draft = _mock(data, "DraftModelRunner")
    assert draft["used_with"] == ["DeepseekSparseAttnBackend"]
    assert [m["path"] for m in draft["missing"]] == ["max_running_requests"]  # is_draft_worker: set by it
    # inherited from other_suite/runners.py; a parameter's value is opaque (".*": anything below)
    assert "model_config.context_len.*" in draft["provides"]
    assert "model_config.hf_config.architectures" in draft["provides"]


def test_spec_mock_allows_class_level_names_only(suite: Path) -> None:
    # MagicMock(spec=ModelRunner) allows dir(ModelRunner): methods, not what __init__ assigns
    data = _json(suite, ".")
    spec = _mock(data, "MagicMock(spec=ModelRunner)")
    assert spec["used_with"] == ["DSATopKBackend.resolve"]
    assert spec["added_after_construction"] == ["max_running_requests"]
    assert "forward" in [p.rstrip(".*") for p in spec["provides"]]
    assert "is_draft_worker" not in [p.rstrip(".*") for p in spec["provides"]]


def test_simplenamespace_fixture_is_traced_to_its_backend(suite: Path) -> None:
    data = _json(suite, ".")
    ns = _mock(data, "SimpleNamespace")
    assert ns["site"] == "my_suite/conftest.py:8"
    assert ns["used_with"] == ["DeepseekV4AttnBackend"]
    assert ns["added_after_construction"] == ["spec_algorithm"]
    lacking = [m["path"] for m in ns["missing"]]
    assert "model_config.hf_text_config" in lacking
    assert "spec_algorithm.is_dspark" in lacking  # spec_algorithm = None has no .is_dspark()
    assert "max_running_requests" not in lacking  # DeepseekV4AttnBackend never reads it


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_complete_mock_exits_0_and_dropping_one_entry_fails(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_complete.py": COMPLETE})
    result = _audit(tmp_path, ".")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lacks nothing its backends read on the devices it runs on" in result.stdout

    text = (tmp_path / "test_complete.py").read_text(encoding="utf-8")
    (tmp_path / "test_complete.py").write_text(
        text.replace('setattr(self, "max_running_requests", 64)', "pass"), encoding="utf-8")
    data = _json(tmp_path, ".")
    assert data["exit_code"] == 1
    assert [m["path"] for m in _mock(data, "CompleteRunner")["missing"]] == ["max_running_requests"]
    # read only on SM >= 10: an H200-only or AMD-only audit passes
    assert _audit(tmp_path, ".", "--device", "sm90,gfx942,cpu").returncode == 0


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_unittest_setup_runner_and_post_construction_writes(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_unit.py": '''
        import unittest
        from unittest.mock import MagicMock
        from sglang.srt.layers.attention import dsa_backend
        from sglang.srt.model_executor.model_runner import ModelRunner


        class TestBackend(unittest.TestCase):
            def setUp(self):
                self.runner = MagicMock(spec=ModelRunner)
                self.runner.is_draft_worker = False
                setattr(self.runner, "max_running_requests", 8)

            def test_build(self):
                dsa_backend.DeepseekSparseAttnBackend(model_runner=self.runner)
    '''})
    data = _json(tmp_path, ".")
    (mock,) = data["mocks"]
    assert mock["name"] == "self.runner" and mock["used_with"] == ["DeepseekSparseAttnBackend"]
    assert sorted(mock["added_after_construction"]) == ["is_draft_worker", "max_running_requests"]
    lacking = [m["path"] for m in mock["missing"]]
    assert "max_running_requests" not in lacking and "is_draft_worker" not in lacking
    assert "page_size" in lacking  # assigned in ModelRunner.__init__, so not on the spec class


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_unspecced_magicmock_and_untraced_use(tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_mm.py": '''
        from unittest.mock import MagicMock
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


        class FakeModelRunner:
            def __init__(self):
                self.device = "cpu"


        def test_anything():
            DeepseekSparseAttnBackend(MagicMock())


        def test_param(some_runner):
            DeepseekSparseAttnBackend(some_runner)


        def test_dsakit_fixture(target_runner):
            DeepseekSparseAttnBackend(target_runner)
    '''})
    result = _audit(tmp_path, ".")
    assert result.returncode == 1, result.stdout + result.stderr  # FakeModelRunner, assumed from the imports
    assert ("FakeModelRunner (class, test_mm.py:5)\n  used with: unknown (no backend call found; assumed "
            "DeepseekSparseAttnBackend from its file's imports)") in result.stdout
    assert "MagicMock() without spec provides every attribute" in result.stdout
    assert "DeepseekSparseAttnBackend(some_runner): the runner argument is not a mock the audit can trace" \
        in result.stdout
    assert "DeepseekSparseAttnBackend(target_runner): dsakit's strict MockModelRunner fixture" in result.stdout
    data = _json(tmp_path, ".")
    assert [c["argument"] for c in data["strict_mock_calls"]] == ["target_runner"]
    assert [c["argument"] for c in data["untraced_calls"]] == ["some_runner"]
    fake = _mock(data, "FakeModelRunner")
    assert fake["used_with"] is None
    assert fake["assumed_backends"] == ["DeepseekSparseAttnBackend"]


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_module_level_type_runner_and_nested_writes(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_shared.py": '''
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        SHARED_RUNNER = type("Runner", (), {"device": "cpu", "model_config": type("MC", (), {})()})()


        def test_shared():
            DeepseekSparseAttnBackend(SHARED_RUNNER)


        def test_local():
            runner = type("Runner", (), {"model_config": type("MC", (), {})()})()
            runner.model_config.context_len = 4096
            DeepseekSparseAttnBackend(runner)
    '''})
    data = _json(tmp_path, ".", "--device", "sm90")
    by_name = {m["name"]: m for m in data["mocks"]}
    shared, local = by_name["SHARED_RUNNER"], by_name["runner"]
    assert (shared["name"], shared["site"], shared["used_with"]) == (
        "SHARED_RUNNER", "test_shared.py:3", ["DeepseekSparseAttnBackend"])
    assert "device" not in [m["path"] for m in shared["missing"]]
    assert "model_config.context_len" in [m["path"] for m in shared["missing"]]
    assert local["added_after_construction"] == ["model_config.context_len"]
    lacking = [m["path"] for m in local["missing"]]
    assert "model_config.context_len" not in lacking and "model_config.num_attention_heads" in lacking
    assert "device" in lacking


# ---------------------------------------------------------------- usage errors and warnings


@pytest.mark.parametrize("args, message", [
    (("missing_dir",), "missing_dir does not exist"),
    (("empty",), "no Python files under empty"),
    (("notes.txt",), "notes.txt is not a Python file"),
    ((".", "--device", "sm101"), "valid names: real (this machine's own device), sm90, sm100, sm103, sm120"),
    ((".", "--device", "real"), "'real' is not one; valid names: sm90, sm100"),
    ((".", "--sglang-src", "nowhere"), "nowhere is not an SGLang source tree"),
])
def test_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    (tmp_path / "test_ok.py").write_text("x = 1\n", encoding="utf-8")
    result = _audit(tmp_path, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and result.stdout == ""


@pytest.mark.usefixtures("installed_sglang")  # skips where no SGLang source is installed
def test_unparsable_file_is_named_and_the_run_is_incomplete(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_broken.py": "def broken(:\n", "test_complete.py": COMPLETE})
    result = _audit(tmp_path, ".")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "warning: test_broken.py has a syntax error at line 1: invalid syntax: not audited" in result.stdout
    assert "(1 not audited)" in result.stdout and result.stdout.rstrip().endswith("\u2192 INCOMPLETE")


# ---------------------------------------------------------------- direct calls


def test_guard_verdicts_follow_the_probe_table() -> None:
    sm100_only = "is_sm100_supported() and torch.cuda.get_device_capability()[1] == 3"
    fired = [k for k, d in SIMULATED.items() if verdict(sm100_only, k, d).fires]
    assert fired == ["sm103"]
    hip = "_is_hip and (self.dsa_prefill_impl == 'aiter' or self.dsa_decode_impl == 'aiter')"
    on_gfx942 = verdict(hip, "gfx942", SIMULATED["gfx942"])
    assert not on_gfx942.fires
    assert on_gfx942.condition == "self.dsa_prefill_impl == 'aiter' or self.dsa_decode_impl == 'aiter'"
    assert verdict(hip, "sm90", SIMULATED["sm90"]) .condition == ""  # never on NVIDIA
    # AMD reports a capability too (MI355: 9.5): an SM comparison is about that number
    assert [k for k, d in SIMULATED.items() if verdict("get_device_sm() >= 95", k, d).fires] == [
        "sm100", "sm103", "sm120", "gfx950"]
    assert verdict("x is None and not flag", "cpu", SIMULATED["cpu"]).fires  # off by default


def test_attr_tree_names_the_shortest_missing_prefix() -> None:
    tree = AttrTree()
    tree.set("model_config", AttrTree(), "a.py:1")
    tree.children["model_config"].set("context_len", AttrTree.constant(), "a.py:2")
    tree.set("spec", AttrTree.opaque("a MagicMock"), "a.py:3")
    assert tree.missing("model_config.hf_config.architectures") == "model_config.hf_config"
    assert tree.missing("model_config.context_len") is None
    assert tree.missing("model_config.context_len.real") == "model_config.context_len.real"
    assert tree.missing("spec.anything.below") is None
    assert tree.missing("device") == "device"


def test_direct_call_matches_the_command(
        suite: Path, monkeypatch: pytest.MonkeyPatch, installed_sglang: SGLangRelease) -> None:
    monkeypatch.chdir(suite)
    result = audit(["."], select_devices("b300"), installed_sglang)
    assert result.devices == ["sm103"]
    failing = {m.mock.label: [e.path for e in m.missing if e.failing] for m in result.failing}
    assert failing["MockModelRunner"] == ["is_draft_worker", "max_running_requests"]
    assert failing["DraftModelRunner"] == ["max_running_requests"]
    with pytest.raises(UsageError, match="valid names"):
        select_devices("sm100,h300")


@pytest.fixture(scope="session")
def sglang_0517(sglang_release_tree: Any) -> Path:
    """An unpacked SGLang 0.5.17 wheel (the GPU node's release), from the shared wheel fixture."""
    return Path(sglang_release_tree("0.5.17"))


def test_0517_tree_reads_max_running_requests_without_is_cuda(suite: Path, sglang_0517: Path) -> None:
    source = str(sglang_0517)
    release = release_from_tree(source)
    line = _read_line(release.file(DSA_BACKEND_FILE), "max_running_requests")
    data = _json(suite, "other_suite", "--sglang-src", source)
    entry = _missing(_mock(data, "MockModelRunner"), "max_running_requests")
    assert entry["reads"][0]["site"] == f"sglang/{DSA_BACKEND_FILE}:{line}"
    # 0.5.17 has no `_is_cuda` in the guard: the same reads on every device reporting SM >= 10
    assert entry["reads"][0]["fails_on"] == ["sm100", "sm103", "sm120"]
    assert "is_draft_worker" not in [m["path"] for m in _mock(data, "MockModelRunner")["missing"]]
    assert ast.parse(entry["reads"][0]["guard"])


def test_attention_kits_of_0517_and_0523(sglang_0517: Path, installed_sglang: SGLangRelease) -> None:
    """SGLang's own kit: its DSA and DSv4 runners lack nothing on their own release, its six or seven
    other runners are counted, not listed; the 0.5.17 kit judged against 0.5.23 says it does not match."""
    installed = installed_sglang
    old = release_from_tree(sglang_0517)
    for release in (old, installed):
        kit = release.file("test/kits/attention_unittest")
        if not kit.is_dir():
            pytest.skip(f"[sglang:attention-unittest-kit] SGLang {release.version} ships no attention kit")
        data = _json(kit, ".", "--sglang-src", str(release.package_dir))
        assert data["exit_code"] == 0, data["summary"]
        assert sorted(m["label"] for m in data["mocks"]) == ["DSAMockModelRunner", "MockDSV4ModelRunner"]
        assert len(data["not_for_dsa"]) >= 6 and all("ModelRunner" in m["label"] for m in data["not_for_dsa"])
        assert data["release_mismatch"] == []
    mixed = _json(old.file("test/kits/attention_unittest"), ".", "--sglang-src", str(installed.package_dir))
    assert mixed["release_mismatch"] and all(f"SGLang {installed.version} lacks" in w for w in mixed["release_mismatch"])
    if installed.has("hip-radix-reads-model"):  # 0.5.23's HIP backend reads model_runner.model
        dsv4 = _mock(mixed, "MockDSV4ModelRunner")
        model = _missing(dsv4, "model")
        amd = [k for k, d in SIMULATED.items() if d.vendor == "amd"]
        assert model["fails_on"] == amd


# ---------------------------------------------------------------- one of two mocks (issue 34 item 5)


@pytest.mark.usefixtures("installed_sglang")
def test_a_helper_returning_one_of_two_mocks_has_both_audited(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    """`return A() if flag else B()`, a helper with two `return`s and a fixture doing the same: each
    mock is audited against the backend the call builds (before: the call was untraced, a note, and
    the audit said OK with exit 0)."""
    write_files({"test_cond.py": '''
        from types import SimpleNamespace

        import pytest
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


        def make(full):
            return SimpleNamespace(page_size=64) if full else SimpleNamespace(device="cpu")


        def build(full):
            if full:
                return SimpleNamespace(kv_cache_dtype=None)
            return SimpleNamespace(hisparse_coordinator=None)


        @pytest.fixture
        def either(request):
            return SimpleNamespace(is_draft_worker=False) if request.param else SimpleNamespace(is_draft_worker=True)


        def test_ternary():
            DeepseekSparseAttnBackend(make(True))


        def test_two_returns():
            runner = build(False)
            runner.extra = 1
            DeepseekSparseAttnBackend(runner)


        def test_fixture(either):
            DeepseekSparseAttnBackend(either)
    '''})
    result = _audit(tmp_path, ".", "--device", "sm90")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "not a mock the audit can trace" not in result.stdout
    data = _json(tmp_path, ".", "--device", "sm90")
    found = {(m["name"], m["site"]): [c["site"] for c in m["calls"]] for m in data["mocks"]}
    assert found == {
        ("when full", "test_cond.py:8"): ["test_cond.py:23"],
        ("when not full", "test_cond.py:8"): ["test_cond.py:23"],
        ("runner", "test_cond.py:13"): ["test_cond.py:29"],
        ("runner", "test_cond.py:14"): ["test_cond.py:29"],
        ("when request.param", "test_cond.py:19"): ["test_cond.py:33"],
        ("when not request.param", "test_cond.py:19"): ["test_cond.py:33"],
    }, found
    lacking = {(m["name"], m["site"]): {e["path"] for e in m["missing"]} for m in data["mocks"]}
    assert "page_size" not in lacking[("when full", "test_cond.py:8")]
    assert "page_size" in lacking[("when not full", "test_cond.py:8")]
    assert {"kv_cache_dtype", "extra"}.isdisjoint(lacking[("runner", "test_cond.py:13")])
    assert "hisparse_coordinator" in lacking[("runner", "test_cond.py:13")]
    assert "hisparse_coordinator" not in lacking[("runner", "test_cond.py:14")]


@pytest.mark.usefixtures("installed_sglang")
def test_a_mock_or_a_value_the_audit_cannot_see_is_audited_and_the_call_noted(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    write_files({"test_or.py": '''
        from types import SimpleNamespace

        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend


        def test_or(some_runner):
            DeepseekSparseAttnBackend(some_runner or SimpleNamespace(device="cpu"))
    '''})
    data = _json(tmp_path, ".", "--device", "sm90")
    assert [m["site"] for m in data["mocks"]] == ["test_or.py:7"]
    assert [c["argument"] for c in data["untraced_calls"]] == ["some_runner or SimpleNamespace(device='cpu')"]


# ---------------------------------------------------------------- metaclasses (issue 34 item 6)


@pytest.mark.usefixtures("installed_sglang")
def test_what_a_metaclass_visibly_sets_is_provided_and_what_it_hides_opens_the_mock(
        tmp_path: Path, write_files: Callable[[dict[str, str]], Path]) -> None:
    """A metaclass's `__new__` (namespace keys, attributes on the made class), `__init__` and
    `__call__` (the instance) provide attributes; a metaclass the audit cannot read says so instead
    of a silent verdict (before: every metaclass was ignored)."""
    write_files({"meta.py": '''
        class Sets(type):
            def __new__(mcs, name, bases, namespace):
                namespace["device"] = "cpu"
                made = super().__new__(mcs, name, bases, namespace)
                made.is_draft_worker = False
                return made

            def __init__(cls, name, bases, namespace):
                super().__init__(name, bases, namespace)
                cls.kv_cache_dtype = None

            def __call__(cls, *args):
                runner = super().__call__(*args)
                runner.hisparse_coordinator = None
                return runner


        class Computed(type):
            def __init__(cls, name, bases, namespace):
                for key in ("is_draft_worker",):
                    setattr(cls, key, False)


        class Helper(type):
            def __new__(mcs, name, bases, namespace):
                made = super().__new__(mcs, name, bases, namespace)
                install(made)
                return made
    ''', "test_meta.py": '''
        from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        from meta import Computed, Helper, Sets
        from elsewhere import Unseen


        class SetsModelRunner(metaclass=Sets):
            pass


        class PlainModelRunner:
            pass


        class ComputedModelRunner(metaclass=Computed):
            pass


        class HelperModelRunner(metaclass=Helper):
            pass


        class UnseenModelRunner(metaclass=Unseen):
            pass


        def test_sets():
            DeepseekSparseAttnBackend(SetsModelRunner())


        def test_plain():
            DSATopKBackend.resolve(PlainModelRunner())


        def test_hidden():
            DSATopKBackend.resolve(ComputedModelRunner())
            DSATopKBackend.resolve(HelperModelRunner())
            DSATopKBackend.resolve(UnseenModelRunner())
    '''})
    data = _json(tmp_path, ".", "--device", "sm90")
    sets = _mock(data, "SetsModelRunner")
    assert {"device", "is_draft_worker", "kv_cache_dtype", "hisparse_coordinator"} <= set(sets["provides"])
    assert {"device", "is_draft_worker", "kv_cache_dtype", "hisparse_coordinator"}.isdisjoint(
        m["path"] for m in sets["missing"])
    assert _missing(_mock(data, "PlainModelRunner"), "is_draft_worker")["failing"]  # the same read, no metaclass
    assert _mock(data, "ComputedModelRunner")["open"] == "setattr with a computed name at meta.py:21"
    assert _mock(data, "HelperModelRunner")["open"] == (
        "metaclass Helper hands the class to install() at meta.py:27, which the audit does not follow")
    assert _mock(data, "UnseenModelRunner")["open"] == (
        "metaclass Unseen (imported from elsewhere) of class UnseenModelRunner is not in the scanned paths, "
        "so what it sets is unknown: add the file that defines it")
    for label in ("ComputedModelRunner", "HelperModelRunner", "UnseenModelRunner"):
        assert _mock(data, label)["missing"] == [], label  # open: nothing it lacks can be shown
    text = _audit(tmp_path, ".", "--device", "sm90").stdout
    assert "provides anything below: metaclass Unseen (imported from elsewhere)" in text
