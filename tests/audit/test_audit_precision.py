"""Precision and recall of `dsakit audit` on a corpus of SGLang's real mock shapes (issue 26).

Each case is a small suite written in the shape of an upstream SGLang test or kit file (rewritten
here, not copied): the indexer's plain class with `type(...)()` sub-objects on CUDA and on XPU CI, the
CPU flashmla `type()` runner, a MagicMock and a SimpleNamespace built to make a construction raise,
the DSpark stub behind a skipping harness, the attention kit's registry calls (DSv4, GDN, dense), a
spec'd MagicMock handed to `DSATopKBackend.resolve`, a subclass of another file's mock. The expected
verdict of each mock (listed or not, each entry it lacks that fails, notes) is judged by hand for
SGLang 0.5.23; precision and recall over those decisions are printed; the goal is 100% / 100%.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dsakit.audit.command import audit, select_devices
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import installed_release

JUDGED_FOR = "0.5.23"


@dataclass(frozen=True)
class Verdict:
    """What the audit should say of one mock: listed (a DSA / DSv4 runner) or not, what fails, notes."""

    listed: bool = True
    fails: frozenset[str] = frozenset()
    expected_raise: bool = False
    silent_skip: bool = False
    devices: tuple[str, ...] | None = None  # the devices it is judged on, when the suite narrows them


NOT_LISTED = Verdict(listed=False)


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, str]
    expected: dict[str, Verdict] = field(default_factory=dict)


_INDEXER_RUNNER = '''
    import torch

    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool
    from sglang.test.ci.ci_register import {register}
    from sglang.test.test_utils import CustomTestCase

    {register}(est_time=30, suite="kernels")

    SETTINGS = {{"device": "{device}", "page_size": 64, "context_len": 2048, "max_bs": 8}}


    class MockModelRunner:
        def __init__(self, overrides=None):
            settings = {{**SETTINGS, **(overrides or {{}})}}
            self.device = {device_expr}
            self.dtype = torch.bfloat16
            self.kv_cache_dtype = torch.float8_e4m3fn
            self.page_size = settings["page_size"]
            hf = type("Hf", (), {{"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 64}})()
            self.model_config = type("Mc", (), {{
                "context_len": settings["context_len"], "is_multimodal": False,
                "attention_arch": AttentionArch.MLA, "num_attention_heads": 128, "kv_lora_rank": 512,
                "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "hf_config": hf,
            }})()
            self.req_to_token_pool = type("Pool", (), {{
                "size": settings["max_bs"], "req_to_token": torch.zeros(8, 2048, dtype=torch.int32),
            }})()
            self.token_to_kv_pool = DSATokenToKVPool(size=8 * 2048, page_size=64, layer_num=1)
            self.server_args = type("Args", (), {{
                "kv_cache_dtype": "auto", "speculative_eagle_topk": None, "speculative_num_draft_tokens": 0,
                "enable_deterministic_inference": False, "dsa_prefill_backend": "flashmla_sparse",
                "dsa_decode_backend": "fa3", "dsa_topk_backend": "sgl-kernel",
                "disaggregation_mode": "null", "enable_two_batch_overlap": False,
            }})()
            self.hisparse_coordinator = None


    class TestIndexer(CustomTestCase):
        def _init_model_runner(self, overrides=None):
            self.model_runner = MockModelRunner(overrides)
            self.backend = DeepseekSparseAttnBackend(self.model_runner)
'''

CASES: tuple[Case, ...] = (
    Case("indexer class on CUDA CI", {"test_indexer.py": _INDEXER_RUNNER.format(
        register="register_cuda_ci", device="cuda", device_expr='"cuda"')},
        {"MockModelRunner": Verdict(fails=frozenset({"is_draft_worker", "max_running_requests"}),
                                    devices=("sm90", "sm100", "sm103", "sm120"))}),
    Case("indexer class on XPU CI", {"test_indexer_xpu.py": _INDEXER_RUNNER.format(
        register="register_xpu_ci", device="xpu", device_expr='settings["device"]')},
        {"MockModelRunner": Verdict(fails=frozenset({"is_draft_worker"}), devices=("xpu",))}),
    Case("CPU flashmla type() runner", {"test_flashmla_cpu.py": '''
        import torch

        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend
        from sglang.test.ci.ci_register import register_cpu_ci

        register_cpu_ci(est_time=10, suite="cpu")


        def _build_backend(pool):
            hf = type("Hf", (), {"architectures": ["DeepseekV3ForCausalLM"], "index_topk": 64})()
            config = type("Mc", (), {"context_len": 256, "num_attention_heads": 4, "kv_lora_rank": 512,
                                     "qk_rope_head_dim": 64, "qk_nope_head_dim": 512, "hf_config": hf})()
            args = type("Args", (), {"enable_deterministic_inference": False,
                                     "dsa_prefill_backend": "flashmla_cpu", "dsa_decode_backend": "flashmla_cpu",
                                     "dsa_topk_backend": "sgl-kernel", "speculative_eagle_topk": None,
                                     "enable_two_batch_overlap": False})()
            requests = type("Req", (), {"size": 8, "req_to_token": torch.zeros(8, 256)})()
            runner = type("MockModelRunner", (), {
                "device": "cpu", "page_size": 1, "server_args": args, "model_config": config,
                "token_to_kv_pool": pool, "req_to_token_pool": requests, "hisparse_coordinator": None,
                "max_running_requests": 8, "kv_cache_dtype": torch.bfloat16,
            })()
            return DeepseekSparseAttnBackend(runner)
    '''}, {'type("MockModelRunner", ...)()': Verdict(fails=frozenset({"is_draft_worker"}), devices=("cpu",))}),
    Case("MagicMock made to raise", {"test_gates.py": '''
        import unittest
        from unittest.mock import MagicMock

        from sglang.test.ci.ci_register import register_cuda_ci

        register_cuda_ci(est_time=15, suite="base")


        def _runner():
            mr = MagicMock()
            mr.page_size = 1
            mr.server_args.dsa_topk_backend = "sgl-kernel"
            return mr


        class TestGates(unittest.TestCase):
            def test_rejects(self):
                from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

                with self.assertRaisesRegex(ValueError, "gfx950-only"):
                    DeepseekSparseAttnBackend(_runner())
    '''}, {"MagicMock()": Verdict(expected_raise=True, devices=("sm90", "sm100", "sm103", "sm120"))}),
    Case("SimpleNamespace made to raise", {"test_nvfp4.py": '''
        import unittest
        from types import SimpleNamespace
        from unittest.mock import patch

        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        class TestHost(unittest.TestCase):
            def test_missing_op(self):
                runner = SimpleNamespace(device="cpu", page_size=256, hisparse_coordinator=None)
                with patch("os.getcwd"), self.assertRaisesRegex(RuntimeError, "does not provide"):
                    DeepseekV4AttnBackend(runner)
    '''}, {"SimpleNamespace": Verdict(expected_raise=True)}),
    Case("DSpark stub behind a skipping harness", {"_dspark_harness.py": '''
        from sglang.srt.layers.attention.deepseek_v4_backend import DeepseekV4AttnBackend


        class HarnessUnavailable(RuntimeError):
            """Raised when the graph cannot be built; the GPU tests treat this as a clean skip."""


        class _StubModelRunner:
            def __init__(self, *, device, page_size, req_to_token_pool, token_to_kv_pool):
                from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

                self.device = device
                self.page_size = page_size
                self.req_to_token_pool = req_to_token_pool
                self.token_to_kv_pool = token_to_kv_pool
                self.is_draft_worker = True
                self.spec_algorithm = SpeculativeAlgorithm.DSPARK


        class Harness:
            def _build(self):
                try:
                    self._build_inner()
                except Exception as exc:
                    raise HarnessUnavailable(str(exc)) from exc

            def _build_inner(self, pool=None, requests=None):
                runner = _StubModelRunner(device="cuda", page_size=1, req_to_token_pool=requests,
                                          token_to_kv_pool=pool)
                self.backend = DeepseekV4AttnBackend(model_runner=runner)
    '''}, {"_StubModelRunner": Verdict(fails=frozenset({"hisparse_coordinator", "model_config", "server_args"}),
                                       silent_skip=True)}),
    Case("kit DSv4 runner through the registry", {"kit/dsv4_attention.py": '''
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
        from sglang.srt.model_executor.model_runner import ModelRunner


        class MockDSV4ModelRunner(ModelRunner):
            def __init__(self, case, model_config, device):
                self.model_config = model_config
                self.device = device
                self.hisparse_coordinator = None


        def build(testcase, case, model_config, device="cuda"):
            runner = MockDSV4ModelRunner(case, model_config, device)
            try:
                return ATTENTION_BACKENDS[case.backend](runner)
            except (AssertionError, ImportError) as exc:
                testcase.skipTest(str(exc))
    '''}, {"MockDSV4ModelRunner": Verdict()}),
    Case("kit GDN and dense runners", {"kit/gdn_attention.py": '''
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.model_executor.model_runner import ModelRunner


        class MockGDNModelRunner(ModelRunner):
            def __init__(self, case):
                self.device = "cuda"


        def build(case):
            return ATTENTION_BACKENDS[case.backend](MockGDNModelRunner(case))
    ''', "kit/dense_attention.py": '''
        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS


        class MockModelRunner:
            device = "cuda"


        def build():
            return ATTENTION_BACKENDS["triton"](MockModelRunner())
    '''}, {"MockGDNModelRunner": NOT_LISTED, "MockModelRunner": NOT_LISTED}),
    Case("spec'd MagicMock to DSATopKBackend.resolve", {"test_topk.py": '''
        from unittest.mock import MagicMock

        from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
        from sglang.srt.model_executor.model_runner import ModelRunner


        def test_resolve():
            runner = MagicMock(spec=ModelRunner)
            runner.max_running_requests = 64
            DSATopKBackend.resolve(runner)
    '''}, {"MagicMock(spec=ModelRunner)": Verdict(fails=frozenset({"is_draft_worker"}))}),
    Case("subclass of another file's mock", {"base/runners.py": '''
        class BaseModelRunner:
            def __init__(self):
                self.device = "cpu"
                self.page_size = 64
    ''', "suite/test_sub.py": '''
        from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

        from base.runners import BaseModelRunner


        class DraftModelRunner(BaseModelRunner):
            def __init__(self):
                super().__init__()
                self.is_draft_worker = True


        def test_draft():
            DeepseekSparseAttnBackend(DraftModelRunner())
    '''}, {  # DeepseekSparseAttnBackend of 0.5.23 reads no model_runner.server_args (it asks get_exec())
        "DraftModelRunner": Verdict(fails=frozenset({"hisparse_coordinator", "kv_cache_dtype", "max_running_requests",
                                                     "model_config", "req_to_token_pool", "token_to_kv_pool"})),
        "BaseModelRunner": NOT_LISTED}),  # never handed to a backend itself, and its file imports no DSA name
)


def _decisions(case: Case, data: dict[str, Any]) -> set[tuple[str, str, str]]:
    """What the audit decided, as (case, mock, decision) items: listed, each failing entry, notes."""
    items: set[tuple[str, str, str]] = set()
    for mock in data["mocks"]:
        label = mock["label"]
        items.add((case.name, label, "listed"))
        items.update((case.name, label, f"fails:{m['path']}") for m in mock["missing"] if m["failing"])
        if mock.get("expected_to_raise"):
            items.add((case.name, label, "note:expected-raise"))
        if mock.get("errors_become_skips"):
            items.add((case.name, label, "note:silent-skip"))
        expected = case.expected.get(label)
        if expected is not None and expected.devices is not None:
            items.add((case.name, label, f"devices:{','.join(mock.get('devices', []))}"))
    return items


def _expected(case: Case) -> set[tuple[str, str, str]]:
    items: set[tuple[str, str, str]] = set()
    for label, verdict in case.expected.items():
        if not verdict.listed:
            continue
        items.add((case.name, label, "listed"))
        items.update((case.name, label, f"fails:{path}") for path in verdict.fails)
        if verdict.expected_raise:
            items.add((case.name, label, "note:expected-raise"))
        if verdict.silent_skip:
            items.add((case.name, label, "note:silent-skip"))
        if verdict.devices is not None:
            items.add((case.name, label, f"devices:{','.join(verdict.devices)}"))
    return items


def measure(root: Path) -> tuple[float, float, list[str]]:
    """(precision, recall, the wrong decisions) of the audit over CASES, each written below `root`."""
    import os

    release = installed_release()
    found: set[tuple[str, str, str]] = set()
    wanted: set[tuple[str, str, str]] = set()
    here = Path.cwd()
    try:
        for number, case in enumerate(CASES):
            folder = root / f"case{number}"
            for name, text in case.files.items():
                path = folder / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
            os.chdir(folder)
            data = audit(["."], select_devices(None), release).as_dict()
            found |= _decisions(case, data)
            wanted |= _expected(case)
    finally:
        os.chdir(here)
    right = found & wanted
    precision = len(right) / len(found) if found else 1.0
    recall = len(right) / len(wanted) if wanted else 1.0
    wrong = [f"false positive: {c}: {m}: {d}" for c, m, d in sorted(found - wanted)]
    wrong += [f"false negative: {c}: {m}: {d}" for c, m, d in sorted(wanted - found)]
    return precision, recall, wrong


def test_precision_and_recall_on_upstream_shapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        release = installed_release()
    except UsageError as error:
        pytest.skip(f"[sglang-not-installed] needs the installed SGLang source: {error}")
    if release.version != JUDGED_FOR:
        pytest.skip(f"[sglang-version] the corpus verdicts are judged for SGLang {JUDGED_FOR}, "
                    f"not {release.version}")
    precision, recall, wrong = measure(tmp_path)
    with capsys.disabled():
        print(f"\ndsakit audit precision {precision:.1%}, recall {recall:.1%} over {len(CASES)} upstream shapes")
    assert (precision, recall) == (1.0, 1.0), "\n".join(wrong)
