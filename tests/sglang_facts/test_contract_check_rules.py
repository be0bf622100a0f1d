"""Gaps in `dsakit contract check`'s tests found by mutation testing (bench/mutation_run.py --group
contract_check): the rules, the table and the JSON on a small contract and hand-made reads, in-process
and without scanning SGLang (the scan has its own tests in test_contract_check.py). The expected
table and findings were read line by line against the rules in dsakit/sglang_facts/contract_check.py."""

from __future__ import annotations

import types
from pathlib import Path

from dsakit.contracts.schema import Contract, ContractEntry, per_role
from dsakit.sglang_facts import contract_check as cc
from dsakit.sglang_facts.runner_source import SourceSite
from dsakit.sglang_facts.backend_reads import RunnerRead

CONTRACT = Contract("small", [
    ContractEntry("page_size", "int", 64, readers=("A",)),
    ContractEntry("model_config", "namespace"),
    ContractEntry("model_config.context_len", "int", **per_role(4096, 2048)),
    ContractEntry("req_to_token_pool", "object", None, optional=True),
    ContractEntry("kv_index_translator", "object", None, optional=True, feature="kv-index-translator"),
    ContractEntry("draft_attn_backend", "object", None, optional=True, set_outside_runner="EagleDraftWorker.__init__ (eagle_worker_v2.py:412)"),
    ContractEntry("my_cache", "object", None, optional=True, set_by="backend", declared_in="suite/pyproject.toml"),
    ContractEntry("gone", "int", 1),
    ContractEntry("suite_gone", "int", 1, declared_in="suite/pyproject.toml"),
])
D = "sglang/srt/layers/attention/dsa/backend.py"
def site(n, f=D): return SourceSite(f, n)
READS = [
    RunnerRead("page_size", site(10), "Backend.__init__"),
    RunnerRead("model_config.brand_new", site(11), "Backend.__init__"),
    RunnerRead("brand_new", site(12), "Backend.__init__", guards=("is_sm100_supported()",)),
    RunnerRead("brand_new", site(13), "Backend.forward", guards=("self.is_draft_worker",), via=("sglang/srt/layers/attention/dsa/helper.py:5 (helper)",)),
    RunnerRead("req_to_token_pool.req_to_token", site(14), "Backend.__init__"),
    RunnerRead("soft_one", site(15), "Backend.__init__", soft=True),
    RunnerRead("page_size", site(16), "Backend.__init__", soft=True),
    RunnerRead("req_to_token_pool.size", site(17), "Backend.__init__", soft=True),
    RunnerRead("my_cache", site(18), "Backend.__init__"),
]
ASSIGN = {"page_size": SourceSite("sglang/srt/model_executor/model_runner.py", 300),
          "model_config": SourceSite("sglang/srt/model_executor/model_runner.py", 301),
          "req_to_token_pool": SourceSite("sglang/srt/model_executor/model_runner.py", 302)}
RELEASE = types.SimpleNamespace(version="9.9.9", package_dir=Path("/site/sglang"))  # what CheckResult reads


def _result(**kwargs) -> cc.CheckResult:
    return cc.CheckResult(RELEASE, CONTRACT, READS, ASSIGN,  # type: ignore[arg-type]
                          cc.find_drift(CONTRACT, READS, ASSIGN, "9.9.9", has_feature=lambda f: False, **kwargs))


EXPECTED_RENDER = 'SGLang 9.9.9 at /site/sglang\n\ncontract entry           | type            | target default | draft default | read at (file:line, guard)                                           | set by ModelRunner at\n-------------------------+-----------------+----------------+---------------+----------------------------------------------------------------------+---------------------------------------------------\npage_size                | int             | 64             | same          | dsa/backend.py:10                                                    | model_runner.py:300\n                         |                 |                |               | dsa/backend.py:16 [soft]                                             |\nmodel_config             | namespace       | None           | same          | -                                                                    | model_runner.py:301\nmodel_config.context_len | int             | 4096           | 2048          | -                                                                    | (part of model_config)\nreq_to_token_pool        | object | None   | None           | same          | dsa/backend.py:14                                                    | model_runner.py:302\n                         |                 |                |               | dsa/backend.py:17 [soft]                                             |\nkv_index_translator      | object | None   | None           | same          | -                                                                    | NEVER\ndraft_attn_backend       | object | None   | None           | same          | -                                                                    | EagleDraftWorker.__init__ (eagle_worker_v2.py:412)\nmy_cache                 | object | None   | None           | same          | dsa/backend.py:18                                                    | the suite\'s backend (set_by = "backend")\ngone                     | int             | 1              | same          | -                                                                    | NEVER\nsuite_gone               | int             | 1              | same          | -                                                                    | NEVER\nbrand_new                | NOT IN CONTRACT | -              | -             | dsa/backend.py:12 [hw] if is_sm100_supported()                       | NEVER\n                         |                 |                |               | dsa/backend.py:13 [role] if self.is_draft_worker via dsa/helper.py:5 |\nmodel_config.brand_new   | NOT IN CONTRACT | -              | -             | dsa/backend.py:11                                                    | model_runner.py:301\nsoft_one                 | NOT IN CONTRACT | -              | -             | dsa/backend.py:15 [soft]                                             | NEVER\n(read sites are under sglang/srt/layers/attention/; ModelRunner sites in sglang/srt/model_executor/)\n\nfailures:\n  [read-not-in-contract] model_runner.brand_new is read at sglang/srt/layers/attention/dsa/backend.py:12 (Backend.__init__) if is_sm100_supported(); sglang/srt/layers/attention/dsa/backend.py:13 (Backend.forward) if self.is_draft_worker but the role contract does not declare it: add it to contracts/model_runner_contract.py with its type, per-role default and reader\n  [read-not-in-contract] model_runner.model_config.brand_new is read at sglang/srt/layers/attention/dsa/backend.py:11 (Backend.__init__) but the role contract does not declare it (namespace model_runner.model_config does not declare it): add it to contracts/model_runner_contract.py with its type, per-role default and reader\n  [contract-not-set-by-runner] contract entry model_runner.gone is never assigned or defined by the real ModelRunner (SGLang 9.9.9): a mock providing it hides a backend read that fails on the real runner; rename or remove it in contracts/model_runner_contract.py\n  [contract-not-set-by-runner] contract entry model_runner.suite_gone is never assigned or defined by the real ModelRunner (SGLang 9.9.9): a mock providing it hides a backend read that fails on the real runner; rename or remove it in suite/pyproject.toml, or declare set_by = "backend" if your backend sets it itself\n\ninformational:\n  [conditional-read] model_runner.brand_new is read only if is_sm100_supported() (hardware-conditional) at sglang/srt/layers/attention/dsa/backend.py:12 (Backend.__init__): a test that does not meet the condition never reads it\n  [conditional-read] model_runner.brand_new is read only if self.is_draft_worker (role-conditional) at sglang/srt/layers/attention/dsa/backend.py:13 (Backend.forward): a test that does not meet the condition never reads it\n  [soft-read] model_runner.page_size is read with getattr/hasattr at sglang/srt/layers/attention/dsa/backend.py:16 (Backend.__init__): the contract declares it\n  [soft-read] model_runner.req_to_token_pool.size is read with getattr/hasattr at sglang/srt/layers/attention/dsa/backend.py:17 (Backend.__init__): the contract covers it through model_runner.req_to_token_pool (object)\n  [soft-read] model_runner.soft_one is read with getattr/hasattr at sglang/srt/layers/attention/dsa/backend.py:15 (Backend.__init__): the contract does not declare it, so a strict mock makes the reader fall back to its default\n  [entry-of-other-release] contract entry model_runner.kv_index_translator belongs to SGLang releases with feature \'kv-index-translator\'; SGLang 9.9.9 lacks it, so its ModelRunner need not set it\n  [set-by-backend] contract entry model_runner.my_cache is set by the suite\'s own backend (set_by = "backend" in suite/pyproject.toml), not by ModelRunner: `dsakit contract check --backend-src DIR` checks that the backend sets it\n\ndsakit contract check: SGLang 9.9.9: 9 contract entries, 9 reads in 1 files, 2 missing from contract, 2 not set by runner, 2 conditional, 3 soft → FAILED'


def test_the_rendered_check_is_the_table_then_failures_then_information_then_the_summary() -> None:
    assert _result().render() == EXPECTED_RENDER


def test_the_exit_code_and_counts_follow_the_failures() -> None:
    result = _result()
    assert (result.ok, result.exit_code) == (False, 1)
    assert result.counts() == {"contract_entries": 9, "reads": 9, "files": 1, "missing_from_contract": 2,
                               "not_set_by_runner": 2, "not_set_by_backend": 0, "read_before_backend_sets": 0,
                               "conditional": 2, "soft": 3}
    clean = cc.CheckResult(RELEASE, CONTRACT, READS, ASSIGN, [  # type: ignore[arg-type]
        f for f in result.findings if f.severity == cc.INFO])
    assert (clean.ok, clean.exit_code) == (True, 0)
    assert clean.summary_line().endswith(" \u2192 OK")
    downstream = cc.CheckResult(RELEASE, CONTRACT, READS, ASSIGN, [], backend_src="suite/backend")  # type: ignore[arg-type]
    assert downstream.summary_line().startswith(
        "dsakit contract check: backend suite/backend against SGLang 9.9.9: 9 contract entries, ")


def test_the_json_names_each_entry_its_defaults_reads_and_runner_site() -> None:
    report = _result().as_dict()
    assert report["sglang"] == {"version": "9.9.9", "package_dir": "/site/sglang"}
    assert (report["ok"], report["exit_code"], report["summary"]) == (False, 1, _result().summary_line())
    entries = {e["path"]: e for e in report["entries"]}
    assert entries["model_config.context_len"] == {
        "path": "model_config.context_len", "type": "int", "optional": False, "target_default": "4096",
        "draft_default": "2048", "read_at": [],
        "set_by_runner": "sglang/srt/model_executor/model_runner.py:301"}  # set with its namespace
    assert entries["req_to_token_pool"]["optional"] is True
    assert [r["site"] for r in entries["req_to_token_pool"]["read_at"]] == [
        f"{D}:14", f"{D}:17"]  # reads below an object entry belong to it
    assert entries["gone"]["set_by_runner"] is None
    assert len(report["reads"]) == len(READS)
    assert [f["code"] for f in report["findings"]] == [f.code for f in _result().findings]
    first = report["findings"][0]
    assert first["sites"] == [f"{D}:12", f"{D}:13"] and first["severity"] == "failure"


def test_a_downstream_backend_must_set_what_it_declares_set_by_backend_before_reading_it() -> None:
    def findings(sets):
        return [f for f in cc.find_drift(CONTRACT, READS, ASSIGN, "9.9.9", downstream=True, sets_by_backend=sets)
                if f.subject == "my_cache"]

    [late] = findings({"my_cache": [cc.RunnerWrite("my_cache", site(30), "Backend.__init__")]})
    assert (late.code, late.severity, late.sites) == ("read-before-backend-sets", "failure", (f"{D}:18", f"{D}:30"))
    assert late.message == (f"model_runner.my_cache is read at {D}:18 (Backend.__init__) before the backend "
                            f"sets it at {D}:30: on the real ModelRunner that read raises AttributeError; set it first")
    assert findings({"my_cache": [cc.RunnerWrite("my_cache", site(5), "Backend.__init__")]}) == []  # set first
    assert findings({"my_cache": [cc.RunnerWrite("my_cache", site(30), "Backend.other")]}) == []  # another function
    assert findings({"my_cache": [cc.RunnerWrite("my_cache", site(30, "elsewhere.py"), "Backend.__init__")]}) == []
    [never] = findings({})
    assert (never.code, never.severity) == ("contract-not-set-by-backend", "failure")
    assert never.message == (
        'contract entry model_runner.my_cache is declared set_by = "backend" in suite/pyproject.toml, but the '
        "backend never assigns model_runner.my_cache (nor self.model_runner.my_cache): assign it before reading "
        "it, or give set_by the file:line where the real ModelRunner sets it")
    # the earliest of several sets is named; a read below the entry counts as a read of it
    below = [RunnerRead("my_cache.size", site(18), "Backend.__init__")]
    sets = {"my_cache": [cc.RunnerWrite("my_cache", site(40), "Backend.__init__"),
                         cc.RunnerWrite("my_cache", site(30), "Backend.__init__")]}
    [named] = [f for f in cc.find_drift(CONTRACT, below, ASSIGN, "9.9.9", downstream=True, sets_by_backend=sets)
               if f.subject == "my_cache"]
    assert named.sites == (f"{D}:18", f"{D}:30")


def test_without_release_facts_no_entry_is_excused_as_another_releases() -> None:
    codes = {f.subject: f.code for f in cc.find_drift(CONTRACT, READS, ASSIGN, "9.9.9")}
    assert codes["kv_index_translator"] == "contract-not-set-by-runner"
    with_feature = {f.subject: f.code for f in cc.find_drift(CONTRACT, READS, ASSIGN, "9.9.9", has_feature=lambda f: True)}
    assert with_feature["kv_index_translator"] == "contract-not-set-by-runner"


def test_coverage_is_the_entry_or_a_non_namespace_ancestor() -> None:
    assert cc.coverage(CONTRACT, "page_size").path == "page_size"
    assert cc.coverage(CONTRACT, "req_to_token_pool.req_to_token.shape").path == "req_to_token_pool"
    assert cc.coverage(CONTRACT, "model_config.context_len").path == "model_config.context_len"
    assert cc.coverage(CONTRACT, "model_config.brand_new") is None  # below a namespace: declared children only
    assert cc.coverage(CONTRACT, "model_config.context_len.real") .path == "model_config.context_len"
    assert cc.coverage(CONTRACT, "brand_new.x") is None


def test_long_cells_are_clipped_with_an_ellipsis() -> None:
    long_path = "model_config." + "x" * 60
    result = cc.CheckResult(RELEASE, CONTRACT, [RunnerRead(long_path, site(1), "f")], ASSIGN, [])  # type: ignore[arg-type]
    row = next(line for line in result.table().splitlines() if line.startswith("model_config.xxx"))
    assert row.startswith(("model_config." + "x" * 60)[:43] + "\u2026 | NOT IN CONTRACT")


def test_backend_sets_finds_every_assignment_to_the_runner_by_path_and_function(tmp_path: Path) -> None:
    backend = tmp_path / "backend"
    backend.mkdir()
    (backend / "attn.py").write_text(
        "class Backend:\n"
        "    def __init__(self, model_runner):\n"
        "        model_runner.my_cache = {}\n"               # 3
        "        self.model_runner.page_size += 1\n"         # 4
        "        model_runner.model_config.dtype: int = 2\n"  # 5
        "        model_runner = other\n"                      # 6: rebinding the name, not a set
        "        self.model_runner = model_runner\n"          # 7: the attribute itself, not below it
        "        self.other.my_cache = 1\n"                   # 8
        "        other.model_runner.x = 1\n"                  # 9
        "    class Inner:\n"
        "        async def go(self, model_runner):\n"
        "            model_runner.late = 3\n"                 # 12
        "class Aliased:\n"
        "    def __init__(self, model_runner):\n"
        "        self.runner = model_runner\n"               # 15: an alias of the runner, not a set
        "        mr = self.runner\n"
        "        mr.via_local = 1\n"                          # 17
        "    def later(self):\n"
        "        self.runner.via_self = 2\n"                 # 19
        "x = 1\n", encoding="utf-8")
    release = types.SimpleNamespace(package_dir=tmp_path / "site" / "sglang")
    found = cc.backend_sets(release, backend)  # type: ignore[arg-type]
    where = {path: [(s.site.line, s.function) for s in sets] for path, sets in found.items()}
    assert where == {"my_cache": [(3, "Backend.__init__")], "page_size": [(4, "Backend.__init__")],
                     "model_config.dtype": [(5, "Backend.__init__")], "late": [(12, "Backend.Inner.go")],
                     "via_local": [(17, "Aliased.__init__")], "via_self": [(19, "Aliased.later")]}
    assert {s.site.file for sets in found.values() for s in sets} == {str(backend / "attn.py")}


def test_a_finding_as_json_has_every_field() -> None:
    finding = _result().findings[0]
    assert finding.as_dict() == {"code": "read-not-in-contract", "severity": "failure", "subject": "brand_new",
                                 "message": finding.message, "sites": [f"{D}:12", f"{D}:13"]}
    assert _result().as_dict()["counts"] == _result().counts()


def test_a_guard_naming_device_and_role_is_both_and_a_plain_guard_is_config() -> None:
    reads = [RunnerRead("page_size", site(1), "f", soft=True, guards=("is_sm100_supported() and self.is_draft",)),
             RunnerRead("page_size", site(2), "f", guards=("self.enabled",))]
    messages = [f.message for f in cc.find_drift(CONTRACT, reads, ASSIGN, "9.9.9") if f.code == "conditional-read"]
    assert "(hardware/role-conditional)" in messages[0] and "(config-conditional)" in messages[1]
    table = cc.CheckResult(RELEASE, CONTRACT, reads, ASSIGN, []).table()  # type: ignore[arg-type]
    assert "dsa/backend.py:1 [soft,hw,role] if is_sm100_supported() and self.is_draft" in table


def test_a_read_below_a_nested_namespace_names_the_innermost_namespace() -> None:
    contract = Contract("nested", [ContractEntry("model_config", "namespace"),
                                   ContractEntry("model_config.hf_config", "namespace")])
    [finding] = [f for f in cc.find_drift(contract, [RunnerRead("model_config.hf_config.new", site(3), "f")], {},
                                          "9.9.9") if f.code == "read-not-in-contract"]
    assert "(namespace model_runner.model_config.hf_config does not declare it)" in finding.message
    [top] = [f for f in cc.find_drift(contract, [RunnerRead("new", site(3), "f")], {}, "9.9.9")
             if f.code == "read-not-in-contract"]
    assert "does not declare it:" in top.message and "namespace" not in top.message
