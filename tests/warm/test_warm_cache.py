"""`dsakit warm --export / --import`: the round trip restores every cache file and valid bytecode,
a key mismatch is refused naming the fields (exit 2), and unsafe members extract nothing.

Fake caches under a fake HOME (where the libraries put them; a decoy XDG_CACHE_HOME that none of
them reads) and a fake installed package, so nothing outside tmp_path is read or written."""

from __future__ import annotations

import io
import json
import os
import py_compile
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dsakit.errors import UsageError
from dsakit.gates.device_model import resolve_device
from dsakit.warm import jit_caches, tarball, targets
from dsakit.warm.bytecode import _needs_compile

# Where SGLang 0.5.21+ (which redirects the third-party caches into its own) and the libraries
# put their builds under HOME, and the tarball root each belongs to.
LAYOUT_0521 = {
    ".cache/sglang/jit/sm90a/sgl_kernel_jit_dpsk_v4_metadata/build-3b/deps-4b/m.so": "sglang-jit",
    ".cache/sglang/triton/SD4NKCH2/_build_swa_token_ids_kernel.cubin": "triton",
    ".cache/sglang/.cache/flashinfer/0.6.18/90a/cached_ops/topk/topk.so": "flashinfer",
    ".cache/sglang/deep_gemm/cache/kernel.sm90_paged_mqa_logits_metadata.e2/kernel.cubin": "deep-gemm",
    ".cache/sglang/inductor/fxgraph/ab/graph": "inductor",
    ".cache/sglang/tilelang/mhc_prenorm.so": "tilelang",
    ".cache/sglang/nv/ComputeCache/0/1": "cuda",
    ".cache/sglang/cute_aot/kernel.o": "sglang",
    ".cache/tvm-ffi/sgl_kernel_jit_topk/b.so": "tvm-ffi",
    # FlashInfer imported before `import sglang` set its workspace: its own default
    ".cache/flashinfer/0.6.18/90a/cached_ops/page/page.so": "flashinfer-before-sglang",
}
CACHE_VARS = ("SGLANG_CACHE_DIR", "SGLANG_JIT_CACHE_DIR", "SGLANG_DG_CACHE_DIR", "DG_JIT_CACHE_DIR",
              "TVM_FFI_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE", "TRITON_CACHE_DIR", "TRITON_HOME",
              "TORCHINDUCTOR_CACHE_DIR", "TILELANG_CACHE_DIR", "CUDA_CACHE_PATH", "DSAKIT_CACHE_DIR")


def _node(monkeypatch: pytest.MonkeyPatch, where: Path) -> None:
    """A node whose HOME, decoy XDG_CACHE_HOME and TMPDIR are under `where`."""
    for name in CACHE_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(where / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(where / "xdg"))
    monkeypatch.setenv("TMPDIR", str(where / "tmp"))


@pytest.fixture
def fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _node(monkeypatch, tmp_path)
    monkeypatch.setattr(jit_caches, "sglang_redirects_caches", lambda _dir: True)  # 0.5.21+
    for rel in LAYOUT_0521:
        (tmp_path / "home" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "home" / rel).write_bytes(rel.encode())
    decoy = tmp_path / "xdg" / "sglang" / "jit" / "not-read-by-sglang.so"
    decoy.parent.mkdir(parents=True)
    decoy.write_bytes(b"decoy")
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    # the chain reaches a second sys.path folder (as SGLang's reaches torch's site-packages)
    (site / "fakepkg" / "__init__.py").write_text("from . import sub\nimport otherpkg\n")
    (site / "fakepkg" / "sub.py").write_text("X = 1\n")
    other = tmp_path / "other-site"
    (other / "otherpkg").mkdir(parents=True)
    (other / "otherpkg" / "__init__.py").write_text("Y = 2\n")
    for source in (site / "fakepkg" / "__init__.py", site / "fakepkg" / "sub.py", other / "otherpkg" / "__init__.py"):
        py_compile.compile(str(source), doraise=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(other), *sys.path]))
    monkeypatch.syspath_prepend(str(other))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(tarball, "install_root", lambda package="sglang": site)
    return tmp_path


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_export_import_round_trip_to_a_fresh_home(fake_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pycs = sorted((fake_node / "site" / "fakepkg" / "__pycache__").glob("*.pyc"))
    assert len(pycs) == 2
    result = tarball.export_cache(str(fake_node / "out" / "cache.tgz"), modules=["fakepkg"])
    # every file once, under the root that owns it (the deepest); the XDG decoy is not a cache;
    # the bytecode of the whole chain, not only what lies beside SGLang (format 2 carried 2 of 3)
    counts = {name: 0 for name in tarball.cache_roots()}
    for name in LAYOUT_0521.values():
        counts[name] += 1
    # the chain's 3 sources, beside whatever every interpreter here loads at start-up (.pth hooks
    # of site-packages: an editable install's finder, ...), which a bare chain carries as well
    startup = tarball.export_cache(str(fake_node / "out" / "startup.tgz"), modules=["json"]).files["bytecode"]
    assert result.files == {**counts, "bytecode": startup + 3}
    with tarfile.open(fake_node / "out" / "cache.tgz") as tar:
        names = tar.getnames()
    assert "jit/triton/SD4NKCH2/_build_swa_token_ids_kernel.cubin" in names
    assert not any("decoy" in n or "not-read-by-sglang" in n for n in names)
    # a fresh node: another HOME, XDG and TMPDIR; the bytecode removed
    _node(monkeypatch, fake_node / "fresh")
    sources = [fake_node / "site" / "fakepkg" / "__init__.py", fake_node / "site" / "fakepkg" / "sub.py",
               fake_node / "other-site" / "otherpkg" / "__init__.py"]
    for source in sources:
        subprocess.run(["rm", "-rf", str(source.parent / "__pycache__")], check=True)
    imported = tarball.import_cache(str(fake_node / "out" / "cache.tgz"))
    assert imported.files == {name: n for name, n in result.files.items() if n}
    assert _files(fake_node / "fresh" / "home") == {rel: rel.encode() for rel in LAYOUT_0521}
    for source in sources:
        assert not _needs_compile(str(source))  # valid bytecode again


def test_files_already_there_are_not_rewritten(fake_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing onto a node that has them (a warm node, a shared venv's bytecode) leaves them alone."""
    exported = tarball.export_cache(str(fake_node / "cache.tgz"), modules=["fakepkg"])
    pyc = next((fake_node / "other-site" / "otherpkg" / "__pycache__").glob("*.pyc"))
    before = pyc.stat().st_ino
    _node(monkeypatch, fake_node / "fresh")
    first = tarball.import_cache(str(fake_node / "cache.tgz"))
    assert first.present == exported.files["bytecode"] >= 3  # the bytecode was never removed here
    again = tarball.import_cache(str(fake_node / "cache.tgz"))
    assert again.present == sum(again.files.values()) and pyc.stat().st_ino == before


def test_a_cache_moved_by_its_variable_lands_where_that_node_reads_it(fake_node: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tarball.export_cache(str(fake_node / "cache.tgz"), modules=["fakepkg"])
    _node(monkeypatch, fake_node / "fresh")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(fake_node / "fresh" / "triton-here"))
    monkeypatch.setenv("SGLANG_CACHE_DIR", str(fake_node / "fresh" / "sglang-here"))
    tarball.import_cache(str(fake_node / "cache.tgz"))
    assert (fake_node / "fresh" / "triton-here" / "SD4NKCH2" / "_build_swa_token_ids_kernel.cubin").is_file()
    # SGLang's JIT dir does not follow SGLANG_CACHE_DIR (~/.cache/sglang/jit unless SGLANG_JIT_CACHE_DIR)
    assert (fake_node / "fresh" / "home" / ".cache" / "sglang" / "jit" / "sm90a").is_dir()
    assert (fake_node / "fresh" / "sglang-here" / "deep_gemm" / "cache").is_dir()
    assert (fake_node / "fresh" / "sglang-here" / "cute_aot" / "kernel.o").is_file()


def test_a_cache_that_records_its_own_path_is_refused_where_it_would_land_elsewhere(
        fake_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """FlashInfer's ninja log keys its objects by absolute path and Triton's group files list theirs:
    imported under another HOME, ninja finds no log entry (the H200's fresh run recompiled the
    top-k module) and Triton misses. Refused there, naming them; imported where the paths are the same."""
    home = fake_node / "home"
    flashinfer = home / ".cache/sglang/.cache/flashinfer"
    log = flashinfer / "0.6.18/90a/cached_ops/topk/.ninja_log"
    log.write_text(f"# ninja log v7\n0\t9\t1796\t{log.parent}/topk.so\tf81b\n")
    group = home / ".cache/sglang/triton/SD4NKCH2/__grp___build_swa_token_ids_kernel.json"
    group.write_text(json.dumps({"child_paths": {"k.cubin": str(group.parent / "_build_swa_token_ids_kernel.cubin")}}))
    result = tarball.export_cache(str(fake_node / "cache.tgz"), modules=["fakepkg"])
    assert result.path_bound == ["flashinfer", "triton"]
    _node(monkeypatch, fake_node / "fresh")
    with pytest.raises(UsageError) as error:
        tarball.import_cache(str(fake_node / "cache.tgz"))
    message = str(error.value)
    assert f"flashinfer (0.6.18/90a/cached_ops/topk/.ninja_log names {flashinfer}; here it is " \
           f"{fake_node / 'fresh' / 'home' / '.cache/sglang/.cache/flashinfer'})" in message
    assert "triton (SD4NKCH2/__grp___build_swa_token_ids_kernel.json names" in message
    assert "FLASHINFER_WORKSPACE_BASE" in message and "the exporting node's HOME" in message
    assert not (fake_node / "fresh" / "home").exists()  # nothing extracted
    # a fresh node with the same HOME (the caches gone) takes it
    subprocess.run(["rm", "-rf", str(home)], check=True)
    _node(monkeypatch, fake_node)
    imported = tarball.import_cache(str(fake_node / "cache.tgz"))
    assert imported.files["flashinfer"] == 2 and log.read_text().endswith("topk.so\tf81b\n") and group.is_file()


def test_a_fresh_node_after_import_finds_the_warm_targets_built(fake_node: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The stamps travel with the caches: `dsakit warm` on the fresh node runs no build."""
    calls: list[str] = []

    def build(_tests: object, _device: object) -> int:
        calls.append("build")
        out = Path(jit_caches.cache_roots()["triton"].path, "NEWKEY", "kernel.cubin")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"cubin")
        return 3

    target = targets.JitTarget("fake-kernels", "", (), ("triton",), build)
    device = resolve_device(None)
    assert targets.warm_target(target, device, test_ids=["t::a", "t::b"]).status == "built"
    tarball.export_cache(str(fake_node / "cache.tgz"), modules=["fakepkg"])
    _node(monkeypatch, fake_node / "fresh")
    assert targets.warm_target(target, device, test_ids=["t::a"]).status == "built"  # nothing imported yet
    _node(monkeypatch, fake_node / "fresh2")
    tarball.import_cache(str(fake_node / "cache.tgz"))
    again = targets.warm_target(target, device, test_ids=["t::b", "t::a"])
    assert (again.status, again.launches, calls) == ("cached", 3, ["build", "build"])


def _tarball(path: Path, key: dict, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        data = json.dumps(key).encode()
        info = tarfile.TarInfo(tarball.KEY_MEMBER)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for member, payload in members:
            tar.addfile(member, io.BytesIO(payload) if payload else None)
    return path


def _file(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_key_mismatch_is_refused_naming_the_fields(fake_node: Path) -> None:
    key = {**tarball.current_key(), "torch": "0.0.1", "gpu_arch": "sm100"}
    path = _tarball(fake_node / "other.tgz", key, [_file("jit/flashinfer/new.so")])
    with pytest.raises(UsageError) as error:
        tarball.import_cache(str(path))
    assert "torch: cache '0.0.1', this node" in str(error.value)
    assert "gpu_arch: cache 'sm100', this node 'cpu'" in str(error.value)
    assert not (jit_caches.cache_roots()["flashinfer"].path / "new.so").exists()


def test_cli_refuses_mismatch_with_exit_2(tmp_path: Path) -> None:
    key = {**tarball.current_key(), "sglang": "0.0.0"}
    path = _tarball(tmp_path / "other.tgz", key, [])
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "xdg"),
           "TRITON_CACHE_DIR": str(tmp_path / "tr")}
    done = subprocess.run([sys.executable, "-m", "dsakit", "warm", "--import", str(path)], capture_output=True,
                          text=True, env=env, check=False, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "sglang: cache '0.0.0', this node" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "dsakit", "warm", "--import", str(tmp_path / "nope.tgz")],
                             capture_output=True, text=True, env=env, check=False, timeout=120)
    assert missing.returncode == 2 and "no warm cache at" in missing.stderr


@pytest.mark.parametrize("bad", ["traversal", "symlink", "absolute", "unknown-cache", "not-pyc"])
def test_unsafe_members_extract_nothing(fake_node: Path, bad: str) -> None:
    link = tarfile.TarInfo("jit/triton/link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    members = {"traversal": [_file("jit/flashinfer/../../../escaped")],
               "symlink": [(link, b"")],
               "absolute": [_file("/tmp/dsakit-absolute-member")],
               "unknown-cache": [_file("jit/elsewhere/x")],
               "not-pyc": [_file("bytecode/fakepkg/evil.py")]}[bad]
    path = _tarball(fake_node / "bad.tgz", tarball.current_key(),
                    [_file("jit/flashinfer/first.so"), *members])
    with pytest.raises(UsageError, match="refusing cache member"):
        tarball.import_cache(str(path))
    assert not (jit_caches.cache_roots()["flashinfer"].path / "first.so").exists()  # all or nothing
    assert not (fake_node / "escaped").exists() and not (fake_node / "site" / "fakepkg" / "evil.py").exists()


def test_export_lists_the_bytecode_from_the_warm_stamp_without_importing_the_chain(
        fake_node: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dsakit.warm import bytecode

    site = fake_node / "site" / "fakepkg"
    sources = [str(site / "__init__.py"), str(site / "sub.py")]
    target = targets.JitTarget("sglang-bytecode", "", (), (), lambda _t, _d: targets.Built(0, {"sources": sources}),
                            inputs=lambda _t: bytecode.stamp_inputs(["fakepkg"]))
    assert targets.warm_target(target, resolve_device(None)).status == "built"

    def no_child_import(*_a: object, **_k: object) -> None:
        raise AssertionError("listed the import chain again")

    monkeypatch.setattr(bytecode, "imported_sources", no_child_import)
    result = tarball.export_cache(str(fake_node / "cache.tgz"), modules=["fakepkg"])
    assert result.files["bytecode"] == 2 and result.files["dsakit-stamps"] == 1  # the stamp's 2 sources
    # a stamp for other modules is not used: the chain is listed again
    with pytest.raises(AssertionError, match="listed the import chain again"):
        tarball.export_cache(str(fake_node / "cache2.tgz"), modules=["fakepkg", "other"])
