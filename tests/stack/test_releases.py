"""Every supported SGLang release (the release table, SUPPORTED_RELEASES): its probe-table rows, its feature probes, the
version dsakit reports, and the import-chain gate. Other releases' wheels are downloaded into the
pytest cache (`sglang_release_tree`); offline, those cases skip with [sglang-wheel-unavailable]."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dsakit.backends.dsa_metadata_kernels import CLAMP_REVERT, kernel_file
from dsakit.errors import UsageError
from dsakit.simulation import probes as device_probes
from dsakit.stack.sglang_release import SUPPORTED_RELEASES, SGLangRelease, installed_release, release_from_tree

ROOT = Path(__file__).resolve().parents[2]
Tree = Callable[[str], Path]


def _release(version: str, sglang_release_tree: Tree) -> SGLangRelease:
    """The installed SGLang when it is `version`, else that release's downloaded wheel."""
    try:
        installed = installed_release()
    except UsageError:
        installed = None
    if installed is not None and installed.version == version:
        return installed
    release = release_from_tree(sglang_release_tree(version))
    assert release.version == version
    return release


def _env_over(tree: Path) -> dict[str, str]:
    """This checkout first, then an SGLang tree over the venv's SGLang (as the README's recipe)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tree)])}


# ---------------------------------------------------------------- the probe table, per release


def test_every_supported_release_has_rows_in_the_probe_table() -> None:
    declared = {release for probe in device_probes.PROBES for release in probe.releases}
    assert set(SUPPORTED_RELEASES) <= declared, f"no probe row names {set(SUPPORTED_RELEASES) - declared}"
    assert declared <= set(SUPPORTED_RELEASES), f"rows name unsupported releases {declared - set(SUPPORTED_RELEASES)}"
    for version in SUPPORTED_RELEASES:
        assert device_probes.probes_for(version) != list(device_probes.PROBES), (
            f"{version} gets every probe: its rows are not declared")


# (feature, releases lacking it): what makes 0.5.21's DeepSeek-V4 backend and the MLA KV write
# need a GPU, and the V4.1 low-ratio store, read from each release's own source
_CPU_FEATURES = {
    "dsv4-builds-without-gpu": {"0.5.21"},
    "mla-kv-write-without-triton": {"0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21"},
    # what contracts/test_deepseek_v4_low_ratio_store.py drives (it skips behind the feature elsewhere)
    "dsv41-low-ratio-sources": {"0.5.17", "0.5.18", "0.5.19", "0.5.20"},
}


# One test per release, so one process scans each release once (the probe scan is ~3.5 s of CPU
# per tree and cached per process; three tests per release landed on both xdist workers).
@pytest.mark.parametrize("version", SUPPORTED_RELEASES)
def test_each_release_has_its_probe_rows_and_its_cpu_feature_probes(
    version: str, sglang_release_tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = _release(version, sglang_release_tree)
    # the probe table has every probe the scan finds
    assert device_probes.missing_probes(release) == []
    # feature probes that differ on CPU, read from the release's own source
    for feature, lacking in _CPU_FEATURES.items():
        assert release.has(feature) is (version not in lacking), (feature, version)
    # the fused DSA metadata kernels, with the draft-extend clamp the interpreter suite reverts once
    # (contracts/test_dsa_metadata_kernels_interpreted.py): a release that moved or changed it fails here
    # (the KPool variants from 0.5.20 on, their draft-extend kernel with the clamp too)
    assert release.has("dsa-kpool-metadata-kernels") is (version not in ("0.5.17", "0.5.18", "0.5.19")), version
    for kpool in (False, True) if release.has("dsa-kpool-metadata-kernels") else (False,):
        relative = kernel_file(release, "draft_extend", kpool=kpool)
        CLAMP_REVERT.apply(release.file(relative).read_text(), relative)
    # a row with `version` taken out of the probe it declares: missing_probes names that probe
    found = next(p for p in device_probes.scan_probes(release) if p.kind == "constant")
    table = []
    for probe in device_probes.PROBES:
        if probe.name == found.name and found.module in probe.modules:
            probe = device_probes.SGLangProbe(probe.name, probe.kind, probe.modules, probe.answer,
                                              tuple(r for r in probe.releases if r != version), probe.note, probe.patched)
        table.append(probe)
    monkeypatch.setattr(device_probes, "PROBES", tuple(table))
    missing = device_probes.missing_probes(release)
    assert [(m.module, m.name) for m in missing] == [(found.module, found.name)]


def test_an_unguarded_device_capability_read_is_found(tmp_path: Path) -> None:
    from dsakit.stack.sglang_release import V41_INDEXER_FILE, _capability_read_guarded

    path = tmp_path / "indexer.py"
    path.write_text("import torch\n\ndef is_sm100_or_newer():\n    return torch.cuda.get_device_capability()[0] >= 10\n")
    assert _capability_read_guarded(path, "is_sm100_or_newer") is False
    path.write_text("def is_sm100_or_newer():\n    if not is_cuda():\n        return False\n"
                    "    return torch.cuda.get_device_capability()[0] >= 10\n")
    assert _capability_read_guarded(path, "is_sm100_or_newer") is True
    path.write_text("def is_sm100_or_newer():\n    return is_cuda() and torch.cuda.get_device_capability()[0] >= 10\n")
    assert _capability_read_guarded(path, "is_sm100_or_newer") is True
    assert _capability_read_guarded(tmp_path / "absent.py", "is_sm100_or_newer") is True
    assert V41_INDEXER_FILE.endswith("v41_indexer/__init__.py")


# ---------------------------------------------------------------- the release is the imported tree's


_VERSION_SCRIPT = r"""
import json, sys
from dsakit.gates.capabilities import capabilities
from dsakit.gates.device_model import resolve_device
from dsakit.stack.sglang_release import installed_release
report = capabilities(resolve_device(None))
gate = next(g for g in report["gates"] if g["code"] == "sglang:import-chain")
print("RESULT" + json.dumps({"version": installed_release().version, "capabilities": report["sglang"],
                             "imported": sorted(m for m in sys.modules if m.split(".")[0] == "sglang"),
                             "import_chain_open": gate["open"]}))
"""


def test_the_release_is_read_from_the_imported_tree_not_the_distribution(sglang_release_tree: Tree) -> None:
    """0.5.22 on PYTHONPATH over the venv's SGLang: dsakit names 0.5.22 (the distribution metadata
    still says the venv's release), and `dsakit capabilities` imports no SGLang module."""
    import importlib.metadata

    tree = sglang_release_tree("0.5.22")
    done = subprocess.run([sys.executable, "-c", _VERSION_SCRIPT], capture_output=True, text=True,
                          env=_env_over(tree), timeout=300, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT")), None)
    assert line is not None, done.stderr[-3000:]
    out = json.loads(line[len("RESULT"):])
    assert out["version"] == out["capabilities"] == "0.5.22"
    try:
        assert importlib.metadata.version("sglang") != "0.5.22"  # the case the version file decides
    except importlib.metadata.PackageNotFoundError:
        pass
    assert out["imported"] == [] and out["import_chain_open"] is True


# ---------------------------------------------------------------- the import-chain gate


def test_a_release_whose_import_chain_fails_here_skips_naming_release_and_error(
    pytester: pytest.Pytester, sglang_release_tree: Tree, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.5.19 over this venv: its srt/server_args imports xgrammar (not installed) and srt/configs
    registers a config name the venv's transformers already has. Under the contract suites'
    conftest a test that imports SGLang skips as [sglang:import-chain] naming 0.5.19 and both
    errors; a test that does not import it still runs, and any other failure stays a failure."""
    tree = sglang_release_tree("0.5.19")
    pytester.makeconftest((ROOT / "contracts" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyfile(test_pool="""
        import pytest

        @pytest.fixture
        def pool_class():
            from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
            return ReqToTokenPool

        def test_imports_sglang_in_the_body():
            from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
            assert ReqToTokenPool

        def test_imports_sglang_in_a_fixture(pool_class):
            assert pool_class

        def test_needs_no_sglang():
            assert 1 + 1 == 2

        def test_fails_on_its_own():
            assert 1 + 1 == 3
    """)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(tree)]))  # the subprocess's
    result = pytester.runpytest_subprocess("-rfs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=2, passed=1, failed=1)
    text = result.stdout.str()
    assert "[sglang:import-chain]" in text and "SGLang 0.5.19 does not" in text
    assert "No module named 'xgrammar'" in text and "qwen3_asr" in text
    assert "FAILED test_pool.py::test_fails_on_its_own" in text


def test_an_error_raised_outside_sglangs_imports_is_not_an_import_chain_error() -> None:
    from dsakit.stack.import_chain import raised_importing_sglang

    try:
        raise ValueError("not an import")
    except ValueError as error:
        assert raised_importing_sglang(error) is False
