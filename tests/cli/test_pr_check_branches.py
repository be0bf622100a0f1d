"""`dsakit pr-check` and SGLang's device-gated branches (issue 42 item 3), on real trees: the base is the
installed SGLang, the PR the same tree with two lines of `dsa_backend.py` changed (a shadow tree of
links): one in the TRT-LLM workspace arm the B300 takes when the backend is built, one in the SM 10.x
ragged-prefill arm no test of the selection reaches. Each run imports SGLang: subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_pr_check import DSA, _installed_package, _shadow_tree
from tests.simulation.test_device_branches import SUITE
from tests.simulation.test_whole_run import HAS_SGLANG, HAS_TORCH

pytestmark = pytest.mark.skipif(not (HAS_SGLANG and HAS_TORCH),
                                reason="[module:sglang] the PR gate runs SGLang's backends")
WORKSPACE = "envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.get() * self.dcp_size,"
RAGGED = "seq_lens = metadata.cache_seqlens_int32\n"


def test_a_changed_branch_no_run_covered_is_named_with_why(pytester: pytest.Pytester, tmp_path: Path) -> None:
    package = _installed_package()
    original = (package / DSA).read_text(encoding="utf-8")
    if original.count(WORKSPACE) != 1 or original.count(RAGGED) != 1:
        pytest.skip("[sglang-source] the TRT-LLM workspace or the ragged prefill arm moved in this release")
    changed = original.replace(WORKSPACE, WORKSPACE.replace(",", " * 1,")).replace(
        RAGGED, RAGGED.replace("= metadata", "= (metadata").replace("32\n", "32)\n"))
    pr = _shadow_tree(package, tmp_path / "pr", DSA, changed)
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_branches=SUITE)
    done = subprocess.run(
        [sys.executable, "-m", "dsakit", "pr-check", "--base", str(package.parent), "--pr", str(pr), "--devices",
         "sm103", "--json", "check.json", "--markdown", "check.md", "--", "test_branches.py"],
        capture_output=True, text=True, timeout=900, cwd=pytester.path)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((pytester.path / "check.json").read_text())
    coverage = data["device_branches"]["sm103 (simulated)"]
    assert coverage["pr"]["ran"] >= 1 and coverage["pr"] == coverage["base"]  # the same lines ran on both trees
    changes = {c["guard"]: c for c in data["branch_changes"]}
    workspace = changes["_is_cuda and (self.device_sm_major >= 10 or self.dsa_decode_impl == 'trtllm')"]
    assert workspace["change"] == "arm changed" and workspace["covered"]
    ragged = changes["_is_cuda and self.device_sm_major >= 10"]
    assert ragged["change"] == "arm changed" and not ragged["covered"]
    reason = ragged["devices"]["sm103 (simulated)"]["reason"]
    assert reason["code"] in ("configuration-never-built", "guard-not-reached"), reason
    md = (pytester.path / "check.md").read_text()
    assert "**the PR changes 1 device branch(es) that no run covered**: `sglang/srt/layers/attention/dsa_backend.py:" in md
    assert f"NO RUN COVERED IT: sm103 (simulated) [{reason['code']}]" in md
    assert "1 changed device branch(es) no run covered -> exit 0" in done.stderr
