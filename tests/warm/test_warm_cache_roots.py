"""Where `dsakit warm --export` looks for each JIT library's cache: where the library itself
resolves it (HOME, the library's own variable, SGLang 0.5.21+'s redirect into its cache dir),
never XDG_CACHE_HOME, which none of them reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from dsakit.warm import jit_caches
from dsakit.warm.jit_caches import cache_roots, owner, sglang_redirects_caches

VARS = ("SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR", "TVM_FFI_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR", "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR",
        "TILELANG_CACHE_DIR", "CUDA_CACHE_PATH")
HOME = Path("/h")
BASE = {"HOME": str(HOME), "XDG_CACHE_HOME": "/xdg", "TMPDIR": "/t", "USER": "ci", "LOGNAME": "ci"}


def _paths(env: dict[str, str], redirects: bool) -> dict[str, Path]:
    return {name: root.path for name, root in cache_roots(env, redirects=redirects).items()}


@pytest.fixture(autouse=True)
def _user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jit_caches, "_user", lambda: "ci")


def test_before_the_redirect_each_library_keeps_its_own_default() -> None:
    """SGLang 0.5.17-0.5.20: Triton under ~/.triton, FlashInfer under ~/.cache, DeepGEMM where
    SGLang's wrapper points it (~/.cache/deep_gemm)."""
    assert _paths(BASE, redirects=False) == {
        "sglang": HOME / ".cache/sglang", "sglang-jit": HOME / ".cache/sglang/jit", "tvm-ffi": HOME / ".cache/tvm-ffi",
        "flashinfer": HOME / ".cache/flashinfer", "triton": HOME / ".triton/cache",
        "inductor": Path("/t/torchinductor_ci"), "deep-gemm": HOME / ".cache/deep_gemm",
        "deep-gemm-own": HOME / ".deep_gemm", "tilelang": HOME / ".tilelang/cache", "cuda": HOME / ".nv/ComputeCache"}


def test_with_the_redirect_the_third_party_caches_live_in_sglangs() -> None:
    sglang = HOME / ".cache/sglang"
    paths = _paths(BASE, redirects=True)
    assert {n: paths[n] for n in ("triton", "inductor", "cuda", "tilelang", "flashinfer", "deep-gemm")} == {
        "triton": sglang / "triton", "inductor": sglang / "inductor", "cuda": sglang / "nv",
        "tilelang": sglang / "tilelang", "flashinfer": sglang / ".cache/flashinfer", "deep-gemm": sglang / "deep_gemm"}
    # a library loaded before `import sglang` (the redirect is a setdefault then) keeps its own
    # default: those folders are roots too
    assert {n: paths[f"{n}-before-sglang"] for n in ("triton", "inductor", "cuda", "tilelang", "flashinfer")} == {
        "triton": HOME / ".triton/cache", "inductor": Path("/t/torchinductor_ci"), "cuda": HOME / ".nv/ComputeCache",
        "tilelang": HOME / ".tilelang/cache", "flashinfer": HOME / ".cache/flashinfer"}
    assert not any(name.endswith("-before-sglang") for name in _paths(BASE, redirects=False))
    moved = _paths({**BASE, "SGLANG_CACHE_DIR": "/s"}, redirects=True)
    assert moved["triton"] == Path("/s/triton") and moved["flashinfer"] == Path("/s/.cache/flashinfer")
    assert moved["sglang-jit"] == HOME / ".cache/sglang/jit", "SGLang's JIT dir ignores SGLANG_CACHE_DIR"


@pytest.mark.parametrize("redirects", [False, True])
def test_a_variable_set_by_the_user_wins(redirects: bool) -> None:
    env = {**BASE, **{name: f"/v/{name}" for name in VARS}}
    paths = _paths(env, redirects)
    assert paths["triton"] == Path("/v/TRITON_CACHE_DIR") and paths["tvm-ffi"] == Path("/v/TVM_FFI_CACHE_DIR")
    assert paths["flashinfer"] == Path("/v/FLASHINFER_WORKSPACE_BASE/.cache/flashinfer")
    assert paths["inductor"] == Path("/v/TORCHINDUCTOR_CACHE_DIR") and paths["cuda"] == Path("/v/CUDA_CACHE_PATH")
    assert paths["deep-gemm"] == Path("/v/SGLANG_DG_CACHE_DIR") and paths["sglang-jit"] == Path("/v/SGLANG_JIT_CACHE_DIR")
    assert _paths({**BASE, "TRITON_HOME": "/th"}, redirects=False)["triton"] == Path("/th/.triton/cache")
    assert not any(name.endswith("-before-sglang") for name in paths), "a variable set is read before and after"


def test_xdg_cache_home_moves_nothing() -> None:
    assert not any(str(p).startswith("/xdg") for p in _paths(BASE, redirects=True).values())
    assert _paths(BASE, True) == _paths({**BASE, "XDG_CACHE_HOME": "/elsewhere"}, True)


def test_a_file_belongs_to_the_deepest_root() -> None:
    roots = cache_roots(BASE, redirects=True)
    sglang = HOME / ".cache/sglang"
    assert owner(sglang / "triton/KEY/k.cubin", roots) == "triton"
    assert owner(sglang / "jit/sm90a/m/x.so", roots) == "sglang-jit"
    assert owner(sglang / "cute_aot/k.o", roots) == "sglang"
    assert owner(Path("/elsewhere/k"), roots) is None


@pytest.mark.parametrize(("release", "redirects"), [("0.5.17", False), ("0.5.21", True)])
def test_the_redirect_is_read_from_the_release(sglang_release_tree, release: str, redirects: bool) -> None:
    assert sglang_redirects_caches(sglang_release_tree(release) / "sglang") is redirects


def test_no_sglang_no_redirect(tmp_path: Path) -> None:
    assert sglang_redirects_caches(None) is False
    assert sglang_redirects_caches(tmp_path / "absent") is False
