"""The one output writer (`dsakit.output_paths`): every file dsakit writes goes through it.

Atomic for regular files (the old file or the new one, never half, no *.tmp left), written
through for FIFOs and character devices, through a symlink to its target (the link stays), `~`
expanded, a bad path refused before anything runs, and a write that fails at the end is an error
(exit 4 inside pytest, 2 on the command line). Never writes to /dev/null itself: a test that
replaced it would break the machine it runs on when run against a writer that replaces files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dsakit.errors import UsageError
from dsakit.output_paths import OutputError, output_file
from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())
PASSING = "def test_ok():\n    pass\n"


def _pytest(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_ok=PASSING)
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "--dsakit-device=cpu", *args)


def _dsakit(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dsakit", *args], cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=240, env=env)


class _FifoReader(threading.Thread):
    """Reads a FIFO until its writer closes it (opened before the writer starts)."""

    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.data = b""

    def run(self) -> None:
        with open(self.path, "rb") as fifo:
            self.data = fifo.read()


# ---------------------------------------------------------------- --dsakit-report


def test_report_to_a_fifo_is_written_through_and_the_fifo_stays(pytester: pytest.Pytester) -> None:
    fifo = pytester.path / "r.json"
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    reader.start()
    result = _pytest(pytester, f"--dsakit-report={fifo}")
    reader.join(timeout=60)
    assert result.ret == 0, result.stdout.str()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert json.loads(reader.data)["format"] == "dsakit-report"


def test_report_through_a_symlink_writes_its_target_and_keeps_the_link(pytester: pytest.Pytester) -> None:
    real = pytester.path / "reports" / "real.json"
    real.parent.mkdir()
    real.write_text("old\n")
    link = pytester.path / "r.json"
    link.symlink_to(real)
    result = _pytest(pytester, f"--dsakit-report={link}")
    assert result.ret == 0, result.stdout.str()
    assert link.is_symlink(), "the symlink was replaced by a regular file"
    assert json.loads(real.read_text())["format"] == "dsakit-report"
    assert not list(pytester.path.rglob("*.tmp"))


def test_empty_report_path_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = _pytest(pytester, "--dsakit-report=")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["*--dsakit-report is empty: pass a file path*"])


def test_report_path_with_a_tilde_is_under_home(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    home = pytester.path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    result = _pytest(pytester, "--dsakit-report=~/r.json")
    assert result.ret == 0, result.stdout.str()
    assert (home / "r.json").is_file()
    assert not (pytester.path / "~").exists(), "a directory literally named ~ was created"


def test_report_path_that_is_a_directory_is_refused(pytester: pytest.Pytester) -> None:
    (pytester.path / "out").mkdir()
    result = _pytest(pytester, "--dsakit-report=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dsakit-report 'out' is a directory; pass a file path*"])


# ---------------------------------------------------------------- the writer itself


def test_writer_is_atomic_and_leaves_nothing_on_an_error(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old\n")
    target.chmod(0o640)
    out = output_file(target, "--json")
    with pytest.raises(RuntimeError), out.open() as stream:
        stream.write(b"half")
        raise RuntimeError("the producer broke")
    assert target.read_text() == "old\n", "a failed write damaged the old file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"], "a temp file was left behind"
    out.write_text("new\n")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640, "the file lost its permissions"


def test_character_devices_are_written_through_never_replaced() -> None:
    out = output_file("/dev/null", "--json")
    assert out.through and out.target == Path("/dev/null")


@pytest.mark.parametrize(("path", "message"), [
    ("", "--json is empty: pass a file path"),
    ("   ", "--json is empty: pass a file path"),
    (".", "--json '.' is a directory; pass a file path"),
])
def test_bad_paths_are_refused_up_front(path: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        output_file(path, "--json")


def test_a_parent_that_is_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}\n")
    with pytest.raises(UsageError, match=r"a\.json is a file, not a directory"):
        output_file(tmp_path / "a.json" / "x", "--json")


def test_a_fifo_without_a_reader_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    with pytest.raises(OutputError, match="the FIFO has no reader"):
        output_file(fifo, "--json").write_text("x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_path_broken_after_the_check_is_an_output_error(tmp_path: Path) -> None:
    out = output_file(tmp_path / "d" / "r.json", "--json")
    (tmp_path / "d").write_text("now a file\n")
    with pytest.raises(OutputError, match="the path changed during the run.*d is a file"):
        out.write_text("x")


# ---------------------------------------------------------------- the command line


def test_report_merge_json_under_a_report_file_is_exit_2_not_a_traceback(pytester: pytest.Pytester) -> None:
    report = pytester.path / "a.json"
    result = _pytest(pytester, f"--dsakit-report={report}")
    assert result.ret == 0
    done = _dsakit(pytester.path, "report", "merge", "a.json", "--json", "a.json/x")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--json 'a.json/x' cannot be written: a.json is a file, not a directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_report_merge_writes_through_a_fifo(pytester: pytest.Pytester) -> None:
    report = pytester.path / "a.json"
    assert _pytest(pytester, f"--dsakit-report={report}").ret == 0
    fifo = pytester.path / "merged.md"
    os.mkfifo(fifo)
    reader = _FifoReader(fifo)
    reader.start()
    done = _dsakit(pytester.path, "report", "merge", "a.json", "--markdown", str(fifo))
    reader.join(timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert reader.data.startswith(b"## ")


def test_warm_export_to_an_empty_path_is_exit_2(tmp_path: Path) -> None:
    done = _dsakit(tmp_path, "warm", "--export", "")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--export is empty: pass a file path" in done.stderr


def test_warm_import_of_a_truncated_tarball_is_exit_2_naming_the_damage(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import dsakit.cli
    from dsakit.warm import bytecode

    cache = tmp_path / "cache.tgz"
    home = tmp_path / "home"
    env = {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "TRITON_CACHE_DIR": str(home / "triton"),
           "TMPDIR": str(tmp_path)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # the export in this process, its bytecode chain pytest's (~100 .pyc, 1 MB): SGLang's chain costs a
    # child import of SGLang and 45 MB of gzip; the damage is the same, found past the key member
    monkeypatch.setattr(bytecode, "SGLANG_IMPORTS", ("pytest",))
    assert dsakit.cli.main(["warm", "--export", str(cache)]) == 0
    data = cache.read_bytes()
    assert len(data) > 100_000, len(data)  # half of it keeps the key member: the damage is further on
    cache.write_bytes(data[: len(data) // 2])
    done = _dsakit(tmp_path, "warm", "--import", str(cache), env={**os.environ, **env})
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{cache} is truncated or damaged" in done.stderr
    assert "Traceback" not in done.stderr


def test_report_ini_key_with_a_tilde_is_under_home(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    home = pytester.path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    pytester.makeini("[pytest]\ndsakit_report = ~/ini.json\n")
    result = _pytest(pytester)
    assert result.ret == 0, result.stdout.str()
    assert (home / "ini.json").is_file()
