"""`dsakit warm`: which JIT targets a selection needs, skips with reasons on CPU, one build at a
time per target (file lock), stamps written atomically."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dsakit.warm import targets
from dsakit.gates.device_model import simulated_model
from dsakit.errors import UsageError

SUITE = """
import pytest
import dsakit

@pytest.mark.dsakit_jit("flashinfer-topk")
def test_named():
    pass

@pytest.mark.dsakit_jit("triton-kernels")
@dsakit.gate("cuda", "module:flashinfer")
def test_named_and_derived():
    pass

@dsakit.gate("cuda", "module:sgl_kernel", "sglang:topk-v2-fold", "jit:tvm-ffi-nvcc")
@pytest.mark.parametrize("i", range(2))
def test_derived(i):
    pass

def test_plain():
    pass
"""


def _warm(pytester: pytest.Pytester, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsakit", "warm", *args], cwd=pytester.path,
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "DSAKIT_CACHE_DIR": str(pytester.path / "cache"), **env})


def test_cpu_box_skips_each_needed_target_with_reasons(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_jit=SUITE)
    done = _warm(pytester, "test_jit.py")
    assert done.returncode == 0, done.stdout + done.stderr
    # marker-named and gate-derived targets add up; every selection needs the SGLang bytecode
    assert ("5 tests selected; JIT targets needed: sglang-bytecode (5 tests), flashinfer-topk (2 tests), "
            "triton-kernels (1 tests), sglang-topk-v2 (2 tests)") in done.stdout
    assert "triton-kernels     skipped  [cuda]" in done.stdout
    assert "sglang-bytecode    built" in done.stdout
    assert "flashinfer-topk    skipped  [cuda] needs an NVIDIA GPU" in done.stdout
    assert "sglang-topk-v2     skipped  [cuda]" in done.stdout
    # the second warm finds the bytecode stamp holding (every listed source has a valid .pyc):
    # no child import of the SGLang chain (a fresh node after `--import` is this case)
    again = _warm(pytester, "test_jit.py")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "sglang-bytecode    cached" in again.stdout and "stamp of 20" in again.stdout


def test_json_and_explicit_target(pytester: pytest.Pytester) -> None:
    done = _warm(pytester, "--target", "sglang-topk-v2", "--json")
    data = json.loads(done.stdout)
    assert [t["target"] for t in data["targets"]] == ["sglang-topk-v2"]
    assert data["targets"][0]["status"] == "skipped" and data["collected"] is None
    bad = _warm(pytester, "--target", "nope")
    assert bad.returncode == 2 and "unknown dsakit JIT target 'nope'" in bad.stderr


def test_triton_target_runs_the_marked_tests_once_in_one_process(pytester: pytest.Pytester) -> None:
    ran = pytester.path / "ran.txt"
    pytester.makepyfile(test_marked=f"""
        import os, pytest
        @pytest.mark.dsakit_jit("triton-kernels")
        @pytest.mark.parametrize("i", range(3))
        def test_kernel(i):
            with open({str(ran)!r}, "a") as f:
                f.write(f"{{i}} {{os.getpid()}} {{os.environ.get('PYTEST_XDIST_WORKER')}}\\n")
    """)
    ids = [f"test_marked.py::test_kernel[{i}]" for i in range(3)]
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.chdir(pytester.path)
        assert targets._run_tests_once(ids, simulated_model("sm90")) == 3
    lines = [line.split() for line in ran.read_text().splitlines()]
    assert sorted(line[0] for line in lines) == ["0", "1", "2"]
    assert len({line[1] for line in lines}) == 1 and {line[2] for line in lines} == {"None"}, "one plain process"
    with pytest.raises(RuntimeError, match="exited 4"):  # a usage error (no such file) fails the build
        targets._run_tests_once(["does_not_exist.py"], simulated_model("sm90"))


def test_the_marked_tests_run_on_the_warms_device_not_on_dsakit_device(pytester: pytest.Pytester) -> None:
    # `dsakit warm --device sm90` gates its targets on sm90: the tests it runs once must see sm90
    # too, not $DSAKIT_DEVICE (sm103) and not this machine (a CPU box, where --device alone is given)
    seen = pytester.path / "seen.txt"
    pytester.makepyfile(test_marked=f"""
        import pytest
        @pytest.mark.dsakit_jit("triton-kernels")
        def test_kernel():
            from dsakit.gates.marks import active_session
            with open({str(seen)!r}, "a") as f:
                f.write(active_session().device.key + "\\n")
    """)
    for cache, env in (("one", {"DSAKIT_DEVICE": "sm103"}), ("two", {})):  # a cache each: no stamp holds
        done = _warm(pytester, "--device", "sm90", "test_marked.py", DSAKIT_CACHE_DIR=str(pytester.path / cache), **env)
        assert done.returncode == 0 and "triton-kernels     built" in done.stdout, done.stdout + done.stderr
    assert seen.read_text().split() == ["sm90", "sm90"]


def test_the_topk_launches_are_gated_on_the_warms_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from dsakit.gates import table
    from dsakit.topk import cases, launch

    monkeypatch.setenv("DSAKIT_DEVICE", "sm103")  # what the launches read before: not the warm's device
    asked: list[str] = []
    ran: list[str] = []

    class FakePath:
        device = "cpu"

        def unsupported(self, _case: object) -> None:
            return None

        def run(self, case: str, _device: str, _monkeypatch: pytest.MonkeyPatch) -> None:
            ran.append(case)

    monkeypatch.setattr(launch, "TOPK_PATHS", {"fake": FakePath()})
    monkeypatch.setattr(launch, "path_gates", lambda _path, _case: ("cuda",))
    monkeypatch.setattr(cases, "select_topk_cases", lambda: ["case"])
    monkeypatch.setattr(table, "closed_reasons", lambda _gates, device: asked.append(device.key) or [])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    assert targets._launch_paths(["fake"], simulated_model("sm90")) == 1
    assert asked == ["sm90"] and ran == ["case"]


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

    def build(_tests, _device) -> int:
        start = time.perf_counter()
        time.sleep(0.3)
        spans.append((start, time.perf_counter()))
        return 1

    target = targets.JitTarget("fake", "a fake build", (), (), build)
    device = simulated_model("sm90")
    results: list[targets.WarmResult] = []
    # two selections, so the second build is not answered by the first one's stamp
    threads = [threading.Thread(target=lambda i=i: results.append(targets.warm_target(target, device,
                                                                                       test_ids=[f"t{i}"])))
               for i in range(2)]
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

    def build(_tests, _device) -> int:
        raise RuntimeError("nvcc exploded")

    result = targets.warm_target(targets.JitTarget("bad", "", (), (), build), simulated_model("sm90"))
    assert result.status == "failed" and "RuntimeError: nvcc exploded" in result.error


def test_validate_targets() -> None:
    assert targets.validate_targets(["sglang-topk-v2", "sglang-topk-v2"]) == ("sglang-topk-v2",)
    with pytest.raises(UsageError):
        targets.validate_targets(["x"])


# ---------------------------------------------------------------- stamps: a build that still holds is not run again


CACHE_VARS = ("SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR",
              "TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR",
              "TILELANG_CACHE_DIR", "CUDA_CACHE_PATH")


@pytest.fixture
def stamp_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every cache root under tmp_path (HOME, TMPDIR), Triton's moved by its variable."""
    for name in CACHE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setenv("DSAKIT_CACHE_DIR", str(tmp_path / "dsakit"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    return tmp_path


def _kernel_target(calls: list[list[str]], out: Path) -> targets.JitTarget:
    def build(tests, _device) -> int:
        calls.append(list(tests))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"cubin")
        return len(tests)

    return targets.JitTarget("fake-kernels", "", (), ("triton",), build)


def test_a_stamp_that_holds_skips_the_build(stamp_node: Path) -> None:
    calls: list[list[str]] = []
    target = _kernel_target(calls, stamp_node / "triton" / "K" / "k.cubin")
    device = simulated_model("sm90")
    first = targets.warm_target(target, device, test_ids=["a", "b"])
    assert (first.status, first.stale) == ("built", "no stamp")
    again = targets.warm_target(target, device, test_ids=["b", "a"])
    assert (again.status, again.launches, len(calls)) == ("cached", 2, 1)
    assert again.stamp_time and json.loads((stamp_node / "dsakit" / "jit" / "fake-kernels.json").read_text())[
        "evidence"] == {"files": {"triton": {"K/k.cubin": 5}}, "roots": {"triton": str(stamp_node / "triton")},
                        "path_bound": []}


@pytest.mark.parametrize("change", ["file gone", "other tests", "other stack"])
def test_a_stamp_that_no_longer_holds_builds_again_saying_why(stamp_node: Path, monkeypatch: pytest.MonkeyPatch,
                                                              change: str) -> None:
    from dsakit.warm import tarball

    calls: list[list[str]] = []
    kernel = stamp_node / "triton" / "K" / "k.cubin"
    target = _kernel_target(calls, kernel)
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    tests = ["a"]
    if change == "file gone":
        kernel.unlink()
    elif change == "other tests":
        tests = ["a", "c"]
    else:
        real = tarball.stack_key
        monkeypatch.setattr(tarball, "stack_key", lambda d: {**real(d), "torch": "9.9"})
    result = targets.warm_target(target, device, test_ids=tests)
    assert result.status == "built" and len(calls) == 2
    assert result.stale == {"file gone": f"{kernel} is gone",
                            "other tests": "built for another selection", "other stack": "built for another stack"}[change]


def test_logs_and_build_temp_files_are_no_evidence(stamp_node: Path) -> None:
    """FlashInfer appends to its JIT log and drops its tmp/ locks on every run: a stamp that
    required them would send a fresh node back to building."""
    calls: list[list[str]] = []
    target = _kernel_target(calls, stamp_node / "triton" / "K" / "k.cubin")
    for rel in ("flashinfer_jit.log", "cached_ops/tmp/topk.lock2", "tmpab12/x.so"):
        (stamp_node / "triton" / rel).parent.mkdir(parents=True, exist_ok=True)
        (stamp_node / "triton" / rel).write_text("x")
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    stamp = json.loads((stamp_node / "dsakit" / "jit" / "fake-kernels.json").read_text())
    assert stamp["evidence"]["files"] == {"triton": {"K/k.cubin": 5}}
    for rel in ("flashinfer_jit.log", "cached_ops/tmp/topk.lock2", "tmpab12/x.so"):
        (stamp_node / "triton" / rel).unlink()
    (stamp_node / "triton" / "K" / "k.cubin").write_bytes(b"rewritten, other size")  # the library's own business
    assert targets.warm_target(target, device, test_ids=["a"]).status == "cached" and len(calls) == 1


@pytest.mark.parametrize("log", [".ninja_log", ".ninja_deps"])
def test_ninjas_logs_are_evidence(stamp_node: Path, log: str) -> None:
    """FlashInfer runs ninja on every load: without its log (or deps log) ninja finds no record of
    the objects and compiles them all again, so a cache without them is not warm."""
    calls: list[list[str]] = []
    target = _kernel_target(calls, stamp_node / "triton" / "topk" / "topk.so")
    (stamp_node / "triton" / "topk").mkdir(parents=True)
    (stamp_node / "triton" / "topk" / log).write_text("# ninja log v7\n")
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    (stamp_node / "triton" / "topk" / log).unlink()
    again = targets.warm_target(target, device, test_ids=["a"])
    assert (again.status, again.stale, len(calls)) == ("built", f"{stamp_node / 'triton' / 'topk' / log} is gone", 2)


def test_files_a_build_writes_outside_its_declared_caches_are_evidence(stamp_node: Path) -> None:
    """A target that declares Triton but also compiled into SGLang's JIT dir: that dir's files are
    its evidence too, so a node without them builds again."""
    calls: list[list[str]] = []
    leaf = stamp_node / "home" / ".cache/sglang/jit/sm90a/topk_v2/build-1/deps-2/topk_v2.so"

    def build(tests, _device) -> int:
        calls.append(list(tests))
        for out in (stamp_node / "triton" / "K" / "k.cubin", leaf):
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(b"so")
        return 1

    target = targets.JitTarget("fake-kernels", "", (), ("triton",), build)
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    stamp = json.loads((stamp_node / "dsakit" / "jit" / "fake-kernels.json").read_text())
    assert stamp["evidence"]["files"] == {"sglang-jit": {"sm90a/topk_v2/build-1/deps-2/topk_v2.so": 2},
                                          "triton": {"K/k.cubin": 2}}
    leaf.unlink()
    again = targets.warm_target(target, device, test_ids=["a"])
    assert (again.status, again.stale, len(calls)) == ("built", f"{leaf} is gone", 2)


def test_a_cache_that_records_its_own_path_holds_only_at_that_path(stamp_node: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's group files list its artifacts by absolute path: the same files copied to another
    TRITON_CACHE_DIR are a cache miss for Triton, so the stamp does not hold there."""
    calls: list[list[str]] = []

    def build(tests, _device) -> int:
        calls.append(list(tests))
        root = Path(jit_warmup_roots()["triton"])
        (root / "K").mkdir(parents=True, exist_ok=True)
        (root / "K" / "k.cubin").write_bytes(b"cubin")
        (root / "K" / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": str(root / "K" / "k.cubin")}}))
        return 1

    target = targets.JitTarget("fake-kernels", "", (), ("triton",), build)
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    assert targets.warm_target(target, device, test_ids=["a"]).status == "cached"
    subprocess.run(["cp", "-r", str(stamp_node / "triton"), str(stamp_node / "triton-copy")], check=True)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(stamp_node / "triton-copy"))
    again = targets.warm_target(target, device, test_ids=["a"])
    assert (again.status, len(calls)) == ("built", 2)
    assert again.stale == (f"the triton cache was built in {stamp_node / 'triton'} and its files record that path; "
                           f"here it is {stamp_node / 'triton-copy'}, where its library would build again")


def jit_warmup_roots() -> dict[str, Path]:
    from dsakit.warm.jit_caches import cache_roots

    return {name: root.path for name, root in cache_roots().items()}


def test_bytecode_evidence_is_the_sources_pyc(stamp_node: Path) -> None:
    import py_compile

    source = stamp_node / "mod.py"
    source.write_text("X = 1\n")
    calls: list[int] = []

    def build(_tests, _device) -> targets.Built:
        calls.append(1)
        py_compile.compile(str(source), doraise=True)
        return targets.Built(1, {"sources": [str(source)]})

    target = targets.JitTarget("fake-bytecode", "", (), (), build, inputs=lambda _t: ("mod",))
    device = simulated_model("sm90")
    assert targets.warm_target(target, device, test_ids=["x"]).status == "built"
    assert targets.warm_target(target, device, test_ids=["y"]).status == "cached"  # inputs ignore the tests
    source.write_text("X = 22\n")  # stale bytecode
    rebuilt = targets.warm_target(target, device)
    assert (rebuilt.status, rebuilt.stale, len(calls)) == ("built", f"no valid bytecode for {source}", 2)


def test_a_stamp_from_before_ninjas_logs_were_evidence_builds_again(stamp_node: Path) -> None:
    """A format-1 stamp never required `.ninja_log` / `.ninja_deps` nor recorded its roots' paths:
    it may hold on a cache that does not cover the run, so it is not trusted."""
    calls: list[list[str]] = []
    target = _kernel_target(calls, stamp_node / "triton" / "K" / "k.cubin")
    device = simulated_model("sm90")
    targets.warm_target(target, device, test_ids=["a"])
    path = stamp_node / "dsakit" / "jit" / "fake-kernels.json"
    stamp = json.loads(path.read_text())
    path.write_text(json.dumps({**stamp, "stamp_format": 1}))
    again = targets.warm_target(target, device, test_ids=["a"])
    assert (again.status, again.stale, len(calls)) == ("built", "a stamp of another dsakit", 2)
