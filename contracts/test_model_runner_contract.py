"""Contract suite: the strict MockModelRunner against the real SGLang installed here.

CPU: every declared default builds and has its declared type for both roles; the real
`DSATopKBackend.resolve` reads the mock per role. GPU: see test_dsa_backend_construction.py.
"""

from __future__ import annotations

import pytest

import dsakit
from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
from dsakit.contracts.schema import NAMESPACE, Factory, type_matches
from dsakit.mocks import read_log


def _read(runner: object, path: str) -> object:
    value = runner
    for part in path.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("entry", list(MODEL_RUNNER_CONTRACT), ids=lambda e: e.path)
def test_every_default_builds_with_its_declared_type(model_runner: dsakit.MockModelRunner, entry) -> None:
    if entry.feature:  # an entry of some SGLang releases only (kv_index_translator, ps)
        dsakit.require(f"sglang:{entry.feature}")
    value = _read(model_runner, entry.path)
    if entry.type != NAMESPACE:
        assert type_matches(entry.type, value, entry.optional), (entry.path, value)


def test_role_fixes_is_draft_worker(target_runner, draft_runner) -> None:
    assert target_runner.is_draft_worker is False
    assert draft_runner.is_draft_worker is True


@pytest.mark.parametrize("role", ["target", "draft"])
def test_real_topk_resolve_reads_the_role_flag(role: str) -> None:
    """SGLang's own DSATopKBackend.resolve picks the role's flag from the mock's is_draft_worker."""
    dsakit.require("sglang:topk-role-split")
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend

    from dsakit.sglang_facts.scope import SGLangScope

    before = len(read_log.contract_reads())
    with SGLangScope(server_args={"dsa_topk_backend": "flashinfer", "speculative_dsa_topk_backend": "torch"}):
        resolved = DSATopKBackend.resolve(dsakit.MockModelRunner(role))
    assert resolved is (DSATopKBackend.TORCH if role == "draft" else DSATopKBackend.FLASHINFER)
    assert read_log.contract_reads()[before:] == []


def test_an_entry_of_another_release_says_so_when_read() -> None:
    """ps exists on 0.5.17's ModelRunner, kv_index_translator on 0.5.23's: reading the other
    release's entry names the feature instead of failing with a bare ImportError."""
    from dsakit.stack.sglang_release import installed_release

    release = installed_release()
    # entries whose default is built from the release (a Factory); a plain default reads fine anywhere
    absent = [e for e in MODEL_RUNNER_CONTRACT if e.feature and not release.has(e.feature) and e.path != "tp_group"
              and isinstance(e.target, Factory)]
    if not absent:
        pytest.skip(f"SGLang {release.version} has every release-specific contract entry")
    for entry in absent:
        with pytest.raises(dsakit.UsageError, match=f"feature '{entry.feature}'"):
            _read(dsakit.MockModelRunner(), entry.path)
