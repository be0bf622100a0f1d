"""`dsakit warm --export / --import`: the round trip restores every cache file and valid bytecode,
a key mismatch is refused naming the fields (exit 2), and unsafe members extract nothing.

Fake caches through XDG_CACHE_HOME / TRITON_CACHE_DIR and a fake installed package, so nothing
outside tmp_path is read or written."""

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
from dsakit.node import warm_cache
from dsakit.node.bytecode import _needs_compile


@pytest.fixture
def fake_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    for rel, data in (("xdg/flashinfer/90/topk/topk.so", b"so"), ("xdg/tvm-ffi/a/b.o", b"o"),
                      ("xdg/sglang/jit/v2.so", b"v2"), ("triton/KEY1/kernel.cubin", b"cubin")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    site = tmp_path / "site"
    (site / "fakepkg").mkdir(parents=True)
    (site / "fakepkg" / "__init__.py").write_text("from . import sub\n")
    (site / "fakepkg" / "sub.py").write_text("X = 1\n")
    for name in ("__init__.py", "sub.py"):
        py_compile.compile(str(site / "fakepkg" / name), doraise=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *sys.path]))
    monkeypatch.setattr(warm_cache, "install_root", lambda package="sglang": site)
    return tmp_path


def _cache_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.suffix != ".tgz" and "fakepkg" not in p.parts[-2:] + p.parts[-3:-2]}


def test_export_import_round_trip(fake_node: Path) -> None:
    before = _cache_files(fake_node)
    pycs = sorted((fake_node / "site" / "fakepkg" / "__pycache__").glob("*.pyc"))
    assert len(pycs) == 2
    result = warm_cache.export_cache(str(fake_node / "out" / "cache.tgz"), modules=["fakepkg"])
    assert result.files == {"flashinfer": 1, "tvm-ffi": 1, "sglang": 1, "triton": 1, "bytecode": 2}
    for folder in ("xdg", "triton", "site/fakepkg/__pycache__"):
        subprocess.run(["rm", "-rf", str(fake_node / folder)], check=True)
    imported = warm_cache.import_cache(str(fake_node / "out" / "cache.tgz"))
    assert imported.files == result.files
    assert _cache_files(fake_node) == before
    for source in ("__init__.py", "sub.py"):
        assert not _needs_compile(str(fake_node / "site" / "fakepkg" / source))  # valid bytecode again


def _tarball(path: Path, key: dict, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        data = json.dumps(key).encode()
        info = tarfile.TarInfo(warm_cache.KEY_MEMBER)
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
    key = {**warm_cache.current_key(), "torch": "0.0.1", "gpu_arch": "sm100"}
    path = _tarball(fake_node / "other.tgz", key, [_file("jit/flashinfer/new.so")])
    with pytest.raises(UsageError) as error:
        warm_cache.import_cache(str(path))
    assert "torch: cache '0.0.1', this node" in str(error.value)
    assert "gpu_arch: cache 'sm100', this node 'cpu'" in str(error.value)
    assert not (fake_node / "xdg" / "flashinfer" / "new.so").exists()


def test_cli_refuses_mismatch_with_exit_2(tmp_path: Path) -> None:
    key = {**warm_cache.current_key(), "sglang": "0.0.0"}
    path = _tarball(tmp_path / "other.tgz", key, [])
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "TRITON_CACHE_DIR": str(tmp_path / "tr")}
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
    path = _tarball(fake_node / "bad.tgz", warm_cache.current_key(),
                    [_file("jit/flashinfer/first.so"), *members])
    with pytest.raises(UsageError, match="refusing cache member"):
        warm_cache.import_cache(str(path))
    assert not (fake_node / "xdg" / "flashinfer" / "first.so").exists()  # all or nothing
    assert not (fake_node / "escaped").exists() and not (fake_node / "site" / "fakepkg" / "evil.py").exists()
