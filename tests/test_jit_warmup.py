"""`dsakit warm`: which JIT targets a selection needs, skips with reasons on CPU, one build at a
time per target (file lock), stamps written atomically."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dsakit import jit_warmup
from dsakit.device_model import simulated_device
from dsakit.errors import UsageError

SUITE = """
import pytest
import dsakit

@pytest.mark.dsakit_jit("flashinfer-topk")
def test_named():
    pass

@dsakit.gate("cuda", "module:sgl_kernel", "sglang:topk-v2-fold", "jit:tvm-ffi-nvcc")
@pytest.mark.parametrize("i", range(2))
def test_derived(i):
    pass

def test_plain():
    pass
"""


def _warm(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsakit", "warm", *args], cwd=pytester.path,
                          capture_output=True, text=True, check=False,
                          env={**__import__("os").environ, "DSAKIT_CACHE_DIR": str(pytester.path / "cache")})


def test_cpu_box_skips_each_needed_target_with_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_jit=SUITE)
    done = _warm(pytester, "test_jit.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 tests selected; JIT targets needed: flashinfer-topk (1 tests), sglang-topk-v2 (2 tests)" in done.stdout
    assert "flashinfer-topk    skipped  [cuda] needs an NVIDIA GPU" in done.stdout
    assert "sglang-topk-v2     skipped  [cuda]" in done.stdout


def test_json_and_explicit_target(pytester: pytest.Pytester) -> None:
    done = _warm(pytester, "--target", "sglang-topk-v2", "--json")
    data = json.loads(done.stdout)
    assert [t["target"] for t in data["targets"]] == ["sglang-topk-v2"]
    assert data["targets"][0]["status"] == "skipped" and data["collected"] is None
    bad = _warm(pytester, "--target", "nope")
    assert bad.returncode == 2 and "unknown dsakit JIT target 'nope'" in bad.stderr


def test_unknown_marker_target_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import pytest
        @pytest.mark.dsakit_jit("flashinfer-topk", "typo")
        def test_x(): pass
    """)
    done = _warm(pytester)
    assert done.returncode == 2 and "unknown dsakit JIT target 'typo'" in done.stderr


def test_concurrent_warms_build_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAKIT_CACHE_DIR", str(tmp_path))
    spans: list[tuple[float, float]] = []

    def build() -> int:
        start = time.perf_counter()
        time.sleep(0.3)
        spans.append((start, time.perf_counter()))
        return 1

    target = jit_warmup.JitTarget("fake", "a fake build", (), (), build)
    device = simulated_device("sm90")
    results: list[jit_warmup.WarmResult] = []
    threads = [threading.Thread(target=lambda: results.append(jit_warmup.warm_target(target, device)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.status for r in results] == ["built", "built"]
    (a0, a1), (b0, b1) = sorted(spans)
    assert a1 <= b0, "the second build started before the first finished"
    assert max(r.waited_s for r in results) >= 0.2
    stamp = json.loads((tmp_path / "jit" / "fake.json").read_text())
    assert stamp["target"] == "fake" and stamp["launches"] == 1


def test_failed_build_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSAKIT_CACHE_DIR", str(tmp_path))

    def build() -> int:
        raise RuntimeError("nvcc exploded")

    result = jit_warmup.warm_target(jit_warmup.JitTarget("bad", "", (), (), build), simulated_device("sm90"))
    assert result.status == "failed" and "RuntimeError: nvcc exploded" in result.error


def test_validate_targets() -> None:
    assert jit_warmup.validate_targets(["sglang-topk-v2", "sglang-topk-v2"]) == ("sglang-topk-v2",)
    with pytest.raises(UsageError):
        jit_warmup.validate_targets(["x"])
