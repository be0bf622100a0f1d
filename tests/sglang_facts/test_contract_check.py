"""`dsakit contract check`: the static drift check, run on copies of the installed SGLang source.

Each test copies only the files the check scans (a few MB) into tmp_path, edits the copy, and runs
the command in-process (`dsakit.cli.main`, so the mutation run sees what it checks; one test runs the
real command line in a subprocess); nothing imports SGLang or torch.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dsakit.sglang_facts.contract_check import check_release
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import (
    DEEPSEEK_V4_BACKEND_FILE,
    DSA_BACKEND_FILE,
    MODEL_RUNNER_FILE,
    RUNTIME_CONTEXT_FILE,
    TOPK_V2_FILE,
    SGLangRelease,
    installed_release,
    release_from_tree,
)
from dsakit.sglang_facts.runner_source import runner_site
from dsakit.sglang_facts.backend_reads import RunnerRead, scan_runner_reads

_COPIED_FILES = (
    MODEL_RUNNER_FILE, DSA_BACKEND_FILE, DEEPSEEK_V4_BACKEND_FILE, TOPK_V2_FILE, RUNTIME_CONTEXT_FILE,
    "_version.py", "version.py", "srt/server_args.py",
)
_COPIED_FOLDERS = ("srt/layers/attention/dsa", "srt/layers/attention/nsa", "srt/arg_groups/fields")


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
    """`dsakit contract check ARGS` in this process: its exit code, stdout and stderr."""
    from dsakit.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["contract", "check", *args])
        except SystemExit as exit:  # argparse's usage errors
            code = exit.code if isinstance(exit.code, int) else 2
    return subprocess.CompletedProcess(["dsakit", "contract", "check", *args], code, out.getvalue(), err.getvalue())


def _check_process(*args: str) -> subprocess.CompletedProcess[str]:
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
    result = _check_process()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SGLang {release.version}: " in _summary(result)


def test_pristine_0517_tree_passes(sglang_release_tree: Callable[[str], Path]) -> None:
    tree = sglang_release_tree("0.5.17")  # the shared wheel fixture (skips offline)
    assert release_from_tree(str(tree)).version == "0.5.17"
    result = _check("--sglang-src", str(tree))
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


def test_new_guarded_read_fails_naming_it(tree: Path) -> None:
    """The B300 class: a read under an `if` (max_running_requests is read only on SM >= 10) is
    drift like any other read; a check that lets guarded reads pass must fail here."""
    backend = tree / DSA_BACKEND_FILE
    _edit(backend, "        self.device = model_runner.device\n",
          "        self.device = model_runner.device\n"
          "        if self.device_sm_major >= 10:\n"
          "            self.guarded = model_runner.brand_new_guarded\n")
    line = _line_of(backend, "model_runner.brand_new_guarded")

    result = _check("--sglang-src", str(tree))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 missing from contract" in _summary(result) and _summary(result).endswith("FAILED")
    failure = next(l for l in result.stdout.splitlines() if "[read-not-in-contract]" in l)
    assert "model_runner.brand_new_guarded" in failure
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
                                     "not_set_by_runner", "not_set_by_backend", "read_before_backend_sets",
                                     "conditional", "soft"}
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
    assert runner_site("model_config.context_len", release).endswith(
        "; where model_config.context_len is set is not scanned")
    # a field below server_args: its ServerArgs declaration, never the line that sets server_args
    bogus = runner_site("server_args.bogus_arg", release)
    assert bogus.startswith(f"not a ServerArgs field: SGLang {release.version} declares no "
                            "server_args.bogus_arg"), bogus
    real = runner_site("server_args.dsa_decode_backend", release)
    assert "(ServerArgs field dsa_decode_backend;" in real and not real.startswith("sglang/srt/model_executor")
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


# ---------------------------------------------------------------- gaps found by mutation testing
# (bench/README.md "Mutation testing": each test below kills mutants that survived the suite)


def _rows(table: str) -> list[list[str]]:
    return [[cell.strip(" |") for cell in line.split(" | ")] for line in table.splitlines()[2:-1]]


def test_table_shows_each_read_with_its_tags_and_guard_and_the_undeclared_reads(tree: Path) -> None:
    backend = tree / DSA_BACKEND_FILE
    _edit(backend, "        hf_config = model_runner.model_config.hf_config\n",
          "        hf_config = model_runner.model_config.hf_config\n        _x = hf_config.brand_new_field\n"
          "        _y = model_runner.brand_new_attr\n")
    line = _line_of(backend, "model_runner.brand_new_attr")
    result = check_release(release_from_tree(tree))
    table = result.table()
    header, separator = table.splitlines()[:2]
    assert header.startswith("contract entry ") and header.endswith("| set by ModelRunner at")
    assert set(separator) == {"-", "+"}
    rows = {row[0]: row for row in _rows(table) if row[0]}
    assert rows["brand_new_attr"] == ["brand_new_attr", "NOT IN CONTRACT", "-", "-", f"dsa_backend.py:{line}", "NEVER"]
    # an undeclared read below a namespace is set where its root is set
    assert rows["model_config.hf_config.brand_new_field"][5] == rows["model_config"][5] != "NEVER"
    assert rows["model_config"][4] == "-"  # declared, read by no backend
    [hw] = [r for r in result.reads if r.path == "max_running_requests" and r.site.file.endswith("dsa_backend.py")]
    assert rows["max_running_requests"][4].startswith(f"dsa_backend.py:{hw.site.line} [hw] if {hw.guard[:40]}")
    assert any(row[4].startswith("deepseek_v4_backend.py:") and row[4].endswith(" [soft]") for row in _rows(table))
    clipped = [cell for row in _rows(table) for cell in row[:4] if cell.endswith("\u2026")]
    assert clipped and all(len(cell) == 44 for cell in clipped)
    [below] = [f for f in result.findings if f.subject == "model_config.hf_config.brand_new_field"]
    assert "(namespace model_runner.model_config.hf_config does not declare it)" in below.message


def test_not_set_by_runner_finding_has_no_sites_in_json(tree: Path) -> None:
    _edit(tree / MODEL_RUNNER_FILE, "self.max_running_requests =", "self.max_running_requests_renamed =")
    report = check_release(release_from_tree(tree)).as_dict()
    [finding] = [f for f in report["findings"] if f["code"] == "contract-not-set-by-runner"]
    assert finding["subject"] == "max_running_requests" and finding["sites"] == []


def test_runner_assignments_follow_every_in_file_base_past_an_imported_one(tmp_path: Path) -> None:
    from dsakit.sglang_facts.runner_source import runner_assignments

    release = _mini_tree(tmp_path, "class Backend:\n    pass\n")
    (release.package_dir / MODEL_RUNNER_FILE).write_text(
        "from elsewhere import ImportedBase\n\n"
        "class KVCacheMixin:\n    def init_pools(self):\n        self.from_mixin = 1\n\n"
        "class ModelRunner(ImportedBase, KVCacheMixin):\n    def __init__(self):\n        self.a = 1\n"
    )
    sites = runner_assignments(release_from_tree(tmp_path))
    assert set(sites) >= {"a", "from_mixin"}
    assert sites["from_mixin"].line == 5


def test_runner_site_defaults_to_the_installed_release() -> None:
    release = _installed()
    assert runner_site("max_running_requests") == runner_site("max_running_requests", release)
    assert runner_site("max_running_requests").endswith("(ModelRunner sets it)")


def test_followed_helpers_are_scanned_and_an_unparsable_one_is_named(tmp_path: Path) -> None:
    # a helper the backend calls is followed; one that does not parse is a usage error naming it
    # (before, it was skipped: the check said OK without the reads it could not see, and a file
    # skipped as a helper first then scanned directly was an AssertionError, issue 34 item 2)
    backend = (
        "from sglang.srt.layers.attention.dsa_helpers import read_pool\n\n"
        "class Backend:\n    def __init__(self, model_runner):\n        read_pool(model_runner)\n"
    )
    release = _mini_tree(tmp_path, backend)
    helper = release.package_dir / "srt/layers/attention/dsa_helpers.py"
    helper.write_text("def read_pool(runner):\n    return runner.req_to_token_pool.size\n")
    assert "req_to_token_pool.size@2" in _reads(release_from_tree(tmp_path))
    helper.write_text("def read_pool(runner:\n")
    with pytest.raises(UsageError, match=r"^sglang/srt/layers/attention/dsa_helpers\.py:1: does not parse: .*"
                                         r"; fix the file or pass --sglang-src a clean SGLang tree$"):
        _reads(release_from_tree(tmp_path))


def _chain(tmp_path: Path, depth: int) -> dict[str, RunnerRead]:
    """The backend hands model_runner to f1, f1 to f2, ... f{depth} reads `deep_attr`."""
    release = _mini_tree(tmp_path, "from sglang.srt.layers.attention.chain import f1\n\n"
                                   "class Backend:\n    def __init__(self, model_runner):\n        f1(model_runner)\n")
    steps = [f"def f{i}(runner):\n    return f{i + 1}(runner)\n" for i in range(1, depth)]
    steps.append(f"def f{depth}(runner):\n    return runner.deep_attr\n")
    (release.package_dir / "srt/layers/attention/chain.py").write_text("\n".join(steps))
    return {key: read for key, read in _reads(release_from_tree(tmp_path)).items() if "deep_attr" in key}


def test_calls_are_followed_exactly_three_helpers_deep(tmp_path: Path) -> None:
    from dsakit.sglang_facts import backend_reads

    [read] = _chain(tmp_path / "three", 3).values()
    assert len(read.via) == backend_reads._FOLLOW_DEPTH == 3
    assert read.via[-1].endswith("chain.py:5 (f2)")
    assert _chain(tmp_path / "four", 4) == {}


def test_function_local_imports_are_followed(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, "class Backend:\n    def __init__(self, model_runner):\n"
                                   "        from sglang.srt.layers.attention.dsa_helpers import read_pool as rp\n"
                                   "        rp(model_runner)\n")
    (release.package_dir / "srt/layers/attention/dsa_helpers.py").write_text(
        "def read_pool(runner):\n    return runner.req_to_token_pool.size\n")
    assert "req_to_token_pool.size@2" in _reads(release_from_tree(tmp_path))


def test_unparsable_backend_file_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, "class Backend:\n    def __init__(self, model_runner:\n")
    with pytest.raises(UsageError, match=r"^sglang/srt/layers/attention/dsa_backend\.py:2: does not parse: "):
        scan_runner_reads(release)


def test_alias_chains_resolve_through_several_assignments(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, "class Backend:\n    def __init__(self, model_runner):\n"
                                   "        cfg = model_runner.model_config\n"
                                   "        hf = cfg.hf_config\n"
                                   "        self.topk = hf.index_topk\n")
    assert "model_config.hf_config.index_topk@5" in _reads(release)


def test_getattr_defaults_and_constructed_classes_are_scanned(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, '''\
from sglang.srt.layers.attention.dsa_helpers import Pool

class Local:
    def __init__(self, runner):
        self.v = runner.local_attr

class Backend:
    def __init__(self, model_runner):
        x = getattr(model_runner, "soft_attr", model_runner.fallback_attr)
        Local(model_runner)
        Pool(model_runner)
        Pool.build(model_runner)
        Pool.static_build(model_runner)
''')
    (release.package_dir / "srt/layers/attention/dsa_helpers.py").write_text(
        "class Pool:\n    def __init__(self, runner):\n        self.size = runner.pool_attr\n\n"
        "    def build(self, runner):\n        return runner.built_attr\n\n"
        "    @staticmethod\n    def static_build(runner):\n        return runner.static_attr\n")
    reads = _reads(release_from_tree(tmp_path))
    assert {"soft_attr?@9", "fallback_attr@9", "local_attr@5", "pool_attr@3", "built_attr@6",
            "static_attr@10"} <= set(reads)
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

    # a second tree: a release's facts are read once per tree in a process (the check runs in-process)
    second = _copy_tree(_installed(), tree.parent / "second")
    (second / MODEL_RUNNER_FILE).write_text(text.replace("self.kv_index_translator =", "self.kv_translator_gone ="),
                                            encoding="utf-8")
    result = _check("--sglang-src", str(second))
    assert result.returncode == 1
    assert "model_runner.kv_index_translator" in next(
        line for line in result.stdout.splitlines() if "[contract-not-set-by-runner]" in line)


# ---------------------------------------------------------------- bases and mixins in other files

_MIXIN = "srt/model_executor/runner_mixin.py"
_BASE = "srt/model_executor/runner_base.py"


@pytest.mark.parametrize("style", ["absolute", "relative", "module-attribute"])
def test_runner_attributes_set_by_a_mixin_in_another_file_are_found(tmp_path: Path, style: str) -> None:
    """A base class or mixin imported from another file of the tree (0.5.14's
    ModelRunnerKVCacheMixin), and its own base in a third file, count as the runner's."""
    package = tmp_path / "sglang"
    (package / "srt/model_executor").mkdir(parents=True)
    (package / _BASE).write_text("class RunnerBase:\n    def setup(self):\n\n        self.from_the_base = 1\n")
    (package / _MIXIN).write_text(
        "from .runner_base import RunnerBase\n\n\nclass RunnerMixin(RunnerBase):\n"
        "    def init_pools(self):\n        self.token_to_kv_pool = None\n")
    head, base = {
        "absolute": ("from sglang.srt.model_executor.runner_mixin import RunnerMixin\n", "RunnerMixin"),
        "relative": ("from .runner_mixin import RunnerMixin\n", "RunnerMixin"),
        "module-attribute": ("from sglang.srt.model_executor import runner_mixin as mixins\n", "mixins.RunnerMixin"),
    }[style]
    (package / MODEL_RUNNER_FILE).write_text(
        head + f"\n\nclass ModelRunnerOutput:\n    def __init__(self):\n        self.not_the_runners = 1\n\n\n"
        f"class ModelRunner({base}):\n    def __init__(self):\n        self.a = 1\n")
    from dsakit.sglang_facts.runner_source import runner_assignments

    sites = runner_assignments(release_from_tree(tmp_path))
    assert str(sites["token_to_kv_pool"]) == "sglang/srt/model_executor/runner_mixin.py:6"
    assert str(sites["from_the_base"]) == "sglang/srt/model_executor/runner_base.py:4"
    assert str(sites["a"]) == "sglang/srt/model_executor/model_runner.py:11"
    assert "not_the_runners" not in sites


def test_a_contract_entry_the_runner_sets_only_in_a_mixin_file_is_no_drift(tree: Path) -> None:
    """Move what ModelRunner assigns for max_running_requests into a mixin of another file: the
    check still finds it (before: `contract-not-set-by-runner`, advice to delete a correct entry)."""
    runner = tree / MODEL_RUNNER_FILE
    text = runner.read_text(encoding="utf-8")
    assert "self.max_running_requests =" in text and "\nclass ModelRunner:" in text
    text = text.replace("self.max_running_requests =", "self._moved_away =")
    text = text.replace("\nclass ModelRunner:", "\nfrom .runner_mixin import RunnerMixin\n\n\n"
                        "class ModelRunner(RunnerMixin):", 1)
    runner.write_text(text, encoding="utf-8")
    (tree / _MIXIN).write_text("class RunnerMixin:\n    def init_memory(self):\n"
                               "        self.max_running_requests = 8\n", encoding="utf-8")

    result = _check("--sglang-src", str(tree.parent), "--json")

    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    report = json.loads(result.stdout)
    assert report["counts"]["not_set_by_runner"] == 0
    entry = next(e for e in report["entries"] if e["path"] == "max_running_requests")
    assert entry["set_by_runner"] == "sglang/srt/model_executor/runner_mixin.py:3"


def test_0514_kv_cache_mixin_sets_the_pools(sglang_release_tree: Callable[[str], Path]) -> None:
    """SGLang 0.5.14 sets max_running_requests and token_to_kv_pool in ModelRunnerKVCacheMixin
    (model_runner_kv_cache_mixin.py): neither is reported as never set."""
    tree = sglang_release_tree("0.5.14")
    result = _check("--sglang-src", str(tree), "--json")
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["sglang"]["version"] == "0.5.14"
    never_set = [f["subject"] for f in report["findings"] if f["code"] == "contract-not-set-by-runner"]
    assert never_set == []
    sites = {e["path"]: e["set_by_runner"] for e in report["entries"]}
    for name in ("max_running_requests", "token_to_kv_pool"):
        assert sites[name].startswith("sglang/srt/model_executor/model_runner_kv_cache_mixin.py:"), sites[name]


# ---------------------------------------------------------------- a tree that does not parse (issue 28 item 6)


def test_a_merge_conflicted_model_runner_is_a_usage_error_naming_file_and_line(tree: Path) -> None:
    runner = tree / MODEL_RUNNER_FILE
    lines = runner.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[40:40] = ["<<<<<<< HEAD\n", "x = 1\n", "=======\n", "x = 2\n", ">>>>>>> theirs\n"]
    runner.write_text("".join(lines), encoding="utf-8")

    result = _check("--sglang-src", str(tree.parent))

    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert "Traceback" not in result.stderr
    assert "sglang/srt/model_executor/model_runner.py:41: does not parse" in result.stderr
    assert "merge conflict" in result.stderr and "--sglang-src" in result.stderr


def test_a_model_runner_that_is_not_utf8_is_a_usage_error_naming_file_and_line(tree: Path) -> None:
    runner = tree / MODEL_RUNNER_FILE
    raw = runner.read_bytes().split(b"\n")
    raw[29] += b"  # caf\xe9"
    runner.write_bytes(b"\n".join(raw))

    result = _check("--sglang-src", str(tree.parent))

    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    assert "Traceback" not in result.stderr
    assert "sglang/srt/model_executor/model_runner.py:30: not utf-8 (byte 0xe9" in result.stderr


def test_a_latin1_model_runner_with_its_coding_cookie_parses(tmp_path: Path) -> None:
    release = _mini_tree(tmp_path, "class Backend:\n    def __init__(self, model_runner):\n"
                                   "        self.device = model_runner.device\n")
    (release.package_dir / MODEL_RUNNER_FILE).write_bytes(
        b"# -*- coding: latin-1 -*-\nclass ModelRunner:\n    def __init__(self):\n"
        b"        self.device = 'caf\xe9'\n")
    from dsakit.sglang_facts.runner_source import runner_assignments

    assert str(runner_assignments(release)["device"]) == "sglang/srt/model_executor/model_runner.py:4"
