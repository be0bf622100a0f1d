"""`dsakit contract check`: the static drift check, run on copies of the installed SGLang source.

Each test copies only the files the check scans (a few MB) into tmp_path, edits the copy, and runs
the command line in a subprocess; nothing imports SGLang or torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dsakit.upstream.contract_check import check_release
from dsakit.errors import UsageError
from dsakit.upstream.release import (
    DEEPSEEK_V4_BACKEND_FILE,
    DSA_BACKEND_FILE,
    MODEL_RUNNER_FILE,
    RUNTIME_CONTEXT_FILE,
    TOPK_V2_FILE,
    SGLangRelease,
    installed_release,
    release_from_tree,
)
from dsakit.upstream.source_scan import RunnerRead, runner_site, scan_runner_reads

_COPIED_FILES = (
    MODEL_RUNNER_FILE, DSA_BACKEND_FILE, DEEPSEEK_V4_BACKEND_FILE, TOPK_V2_FILE, RUNTIME_CONTEXT_FILE,
    "_version.py", "version.py",
)
_COPIED_FOLDERS = ("srt/layers/attention/dsa", "srt/layers/attention/nsa")


def _installed() -> SGLangRelease:
    try:
        return installed_release()
    except UsageError as error:
        pytest.skip(f"needs the installed SGLang source: {error}")


def _copy_tree(release: SGLangRelease, destination: Path) -> Path:
    """The scanned subset of an SGLang package, as `destination/sglang`."""
    package = destination / "sglang"
    for relative in _COPIED_FILES:
        source = release.file(relative)
        if source.is_file():
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, package / relative)
    for folder in _COPIED_FOLDERS:
        source_dir = release.file(folder)
        if source_dir.is_dir():
            (package / folder).mkdir(parents=True, exist_ok=True)
            for source in source_dir.glob("*.py"):
                shutil.copy2(source, package / folder / source.name)
    return package


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy_tree(_installed(), tmp_path_factory.mktemp("sglang_pristine"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return _copy_tree(_installed(), tmp_path)


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dsakit", "contract", "check", *args],
        capture_output=True, text=True, timeout=120,
    )


def _summary(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout.strip().splitlines()[-1]


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, f"{old!r} not found in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


# ---------------------------------------------------------------- whole trees


def test_pristine_installed_tree_passes(pristine: Path) -> None:
    result = _check("--sglang-src", str(pristine))
    assert result.returncode == 0, result.stdout + result.stderr
    summary = _summary(result)
    version = release_from_tree(pristine).version
    assert summary.startswith(f"dsakit contract check: SGLang {version}: ")
    assert "0 missing from contract, 0 not set by runner" in summary
    assert summary.endswith("\u2192 OK")
    assert "contract entry" in result.stdout and "set by ModelRunner at" in result.stdout


def test_default_is_the_installed_release() -> None:
    release = _installed()
    result = _check()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SGLang {release.version}: " in _summary(result)


@pytest.mark.skipif(not Path("/tmp/src/0517/sglang").is_dir(),
                    reason="no unpacked SGLang 0.5.17 at /tmp/src/0517 (only on the dev box)")
def test_pristine_0517_tree_passes() -> None:
    result = _check("--sglang-src", "/tmp/src/0517")
    assert result.returncode == 0, result.stdout + result.stderr


# ---------------------------------------------------------------- drift is caught


def test_new_backend_read_fails_naming_attribute_and_site(tree: Path) -> None:
    backend = tree / DSA_BACKEND_FILE
    _edit(backend, "        self.device = model_runner.device\n",
          "        self.device = model_runner.device\n        self.fresh = model_runner.brand_new_attr\n")
    line = _line_of(backend, "model_runner.brand_new_attr")

    result = _check("--sglang-src", str(tree))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 missing from contract" in _summary(result)
    assert _summary(result).endswith("FAILED")
    failure = next(l for l in result.stdout.splitlines() if "[read-not-in-contract]" in l)
    assert "model_runner.brand_new_attr" in failure
    assert f"sglang/{DSA_BACKEND_FILE}:{line}" in failure


def test_new_read_below_a_namespace_fails(tree: Path) -> None:
    backend = tree / DSA_BACKEND_FILE
    _edit(backend, "        hf_config = model_runner.model_config.hf_config\n",
          "        hf_config = model_runner.model_config.hf_config\n        _x = hf_config.brand_new_field\n")
    result = _check("--sglang-src", str(tree), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "read-not-in-contract"]
    assert finding["subject"] == "model_config.hf_config.brand_new_field"


def test_runner_that_stops_setting_an_entry_fails_naming_it(tree: Path) -> None:
    runner = tree / MODEL_RUNNER_FILE
    _edit(runner, "self.max_running_requests =", "self.max_running_requests_renamed =")

    result = _check("--sglang-src", str(tree))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 not set by runner" in _summary(result)
    failure = next(l for l in result.stdout.splitlines() if "[contract-not-set-by-runner]" in l)
    assert "model_runner.max_running_requests" in failure
    assert runner_site("max_running_requests", release_from_tree(tree)).startswith(
        "the real ModelRunner never sets it"
    )


# ---------------------------------------------------------------- what the report says


def test_max_running_requests_read_is_hardware_conditional(pristine: Path) -> None:
    result = check_release(release_from_tree(pristine))
    [read] = [r for r in result.reads if r.path == "max_running_requests" and r.site.file.endswith("dsa_backend.py")]
    assert read.conditional and read.hardware_conditional and not read.role_conditional
    assert "device_sm_major >= 10" in read.guard and "'trtllm'" in read.guard
    assert "not uses_flashinfer_sparse_mla" in read.guard  # the earlier `if` branch, negated
    assert read.function == "DeepseekSparseAttnBackend.__init__"
    codes = {(f.code, f.subject) for f in result.findings}
    assert ("conditional-read", "max_running_requests") in codes


def test_json_report_has_stable_keys(pristine: Path) -> None:
    result = _check("--sglang-src", str(pristine), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report) == {"sglang", "ok", "exit_code", "counts", "summary", "entries", "reads", "findings"}
    assert report["ok"] is True and report["exit_code"] == 0
    assert set(report["counts"]) == {"contract_entries", "reads", "files", "missing_from_contract",
                                     "not_set_by_runner", "conditional", "soft"}
    entry = next(e for e in report["entries"] if e["path"] == "max_running_requests")
    assert set(entry) == {"path", "type", "optional", "target_default", "draft_default", "read_at",
                          "set_by_runner"}
    assert entry["set_by_runner"].startswith(f"sglang/{MODEL_RUNNER_FILE}:")
    assert entry["read_at"][0]["hardware_conditional"] is True
    assert set(report["reads"][0]) == {"path", "site", "function", "soft", "guard", "hardware_conditional",
                                       "role_conditional", "via"}


def test_runner_site_phrases(pristine: Path) -> None:
    release = release_from_tree(pristine)
    assert runner_site("max_running_requests", release).endswith("(ModelRunner sets it)")
    assert runner_site("model_config.context_len", release).endswith("(ModelRunner sets model_config)")
    assert runner_site("no_such_attr", release) == (
        f"the real ModelRunner never sets it (SGLang {release.version})"
    )


# ---------------------------------------------------------------- the scanner on small sources


def _mini_tree(tmp_path: Path, backend: str) -> SGLangRelease:
    package = tmp_path / "sglang"
    (package / "srt/model_executor").mkdir(parents=True)
    (package / "srt/layers/attention").mkdir(parents=True)
    (package / MODEL_RUNNER_FILE).write_text("class ModelRunner:\n    def __init__(self):\n        self.a = 1\n")
    (package / DSA_BACKEND_FILE).write_text(backend)
    return release_from_tree(tmp_path)


def _reads(release: SGLangRelease) -> dict[str, RunnerRead]:
    return {f"{r.path}{'?' if r.soft else ''}@{r.site.line}": r for r in scan_runner_reads(release)}


def test_scanner_aliases_getattr_and_guards(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, '''\
class Backend:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        hf_config = model_runner.model_config.hf_config
        arch = model_runner.model_config.hf_config.architectures[0]
        if _is_hip:
            x = hf_config.index_topk
        elif self.is_draft:
            y = getattr(model_runner, "soft_one", None)
        z = hasattr(model_runner, "probe") and model_runner.probe.value

    def later(self):
        return self.model_runner.spec_algorithm.is_dspark() if self.ready else None
''')
    reads = _reads(release)
    assert reads["model_config.hf_config@4"].guards == ()
    assert "model_config.hf_config.architectures@5" in reads
    topk = reads["model_config.hf_config.index_topk@7"]
    assert topk.guard == "_is_hip" and topk.hardware_conditional
    soft = reads["soft_one?@9"]
    assert soft.guard == "not _is_hip and self.is_draft"  # elif: the earlier branch, negated
    assert soft.role_conditional and soft.hardware_conditional
    assert reads["probe?@10"].soft
    assert reads["probe.value@10"].guard == "hasattr(model_runner, 'probe')"
    later = reads["spec_algorithm.is_dspark@13"]
    assert later.function == "Backend.later" and later.guard == "self.ready"


# ---------------------------------------------------------------- usage errors


def test_bogus_sglang_src_is_a_usage_error(tmp_path: Path) -> None:
    result = _check("--sglang-src", str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not an SGLang source tree" in lines[0]


def test_tree_without_dsa_backend_is_a_usage_error(tree: Path) -> None:
    (tree / DSA_BACKEND_FILE).unlink()
    result = _check("--sglang-src", str(tree))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "has no DSA backend" in lines[0]


def test_help_runs(pytester: pytest.Pytester) -> None:
    result = pytester.run(sys.executable, "-m", "dsakit", "contract", "check", "--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--sglang-src DIR*", "*--json*"])


def test_entry_of_a_feature_the_release_lacks_is_not_required(tree: Path) -> None:
    """kv_index_translator belongs to releases with ModelRunner.init_kv_index_translator (0.5.23):
    a tree without it (0.5.17) passes and says why; a tree that has the feature but stops setting
    the attribute fails."""
    runner = tree / MODEL_RUNNER_FILE
    text = runner.read_text(encoding="utf-8")
    runner.write_text(text.replace("def init_kv_index_translator(", "def init_kv_translator_gone(")
                      .replace("self.kv_index_translator =", "self.kv_translator_gone ="), encoding="utf-8")
    result = _check("--sglang-src", str(tree), "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    [finding] = [f for f in report["findings"] if f["subject"] == "kv_index_translator"]
    assert finding["code"] == "entry-of-other-release" and "kv-index-translator" in finding["message"]

    runner.write_text(text.replace("self.kv_index_translator =", "self.kv_translator_gone ="), encoding="utf-8")
    result = _check("--sglang-src", str(tree))
    assert result.returncode == 1
    assert "model_runner.kv_index_translator" in next(
        line for line in result.stdout.splitlines() if "[contract-not-set-by-runner]" in line)
