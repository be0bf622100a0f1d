"""The strict MockModelRunner: built from the contract, refuses what the contract does not declare."""

from __future__ import annotations

import sys

import pytest

import dsakit
from dsakit.mocks import read_log
from dsakit.mocks.strict_node import StrictNamespace


@pytest.fixture(autouse=True)
def _fresh_read_log():
    read_log.clear()
    yield
    read_log.clear()


def test_role_defaults() -> None:
    target, draft = dsakit.MockModelRunner("target"), dsakit.MockModelRunner("draft")
    assert (target.is_draft_worker, draft.is_draft_worker) == (False, True)
    assert target.max_running_requests == 64
    assert target.model_config.hf_config.index_topk == 2048


def test_no_torch_until_a_tensor_default_is_read() -> None:
    code = (
        "import sys, dsakit\n"
        "r = dsakit.MockModelRunner('draft')\n"
        "assert r.max_running_requests == 64 and r.page_size == 64\n"
        "assert 'torch' not in sys.modules and 'sglang' not in sys.modules\n"
        "t = r.req_to_token_pool.req_to_token\n"
        "assert tuple(t.shape) == (64, 163840), t.shape\n"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_violation_asks_which_device_is_simulated_without_importing_the_simulation() -> None:
    """The mock names the simulated device a violation ran on (dsakit.active's stack): asking must
    not import the simulation nor the device model (it cost the first violation ~24 ms of 41 ms;
    bench/README.md, "The strict mock's first violation")."""
    code = (
        "import sys, dsakit\n"
        "r = dsakit.MockModelRunner('target')\n"
        "try:\n"
        "    r.attention_chunk_size\n"
        "except dsakit.ContractViolation as error:\n"
        "    assert error.device == '' and ' on simulated ' not in str(error), error\n"
        "loaded = [m for m in ('dsakit.simulation', 'dsakit.simulation.probe_patches', 'dsakit.gates.device_model',\n"
        "                      'dsakit.simulation.probes') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "with dsakit.simulate_device('sm103'):\n"
        "    try:\n"
        "        r.attention_chunk_size\n"
        "    except dsakit.ContractViolation as error:\n"
        "        assert error.device == 'sm103' and ' on simulated sm103 (NVIDIA B300)' in str(error), error\n"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_undeclared_read_names_attribute_site_and_real_runner() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.brand_new_attr  # noqa: B018 - the read is the test
    message = str(raised.value)
    assert isinstance(raised.value, AttributeError)
    assert "model_runner.brand_new_attr is not in the dsakit role contract" in message
    assert f"test_mock_model_runner.py:{sys._getframe().f_lineno - 4} in test_undeclared_read" in message
    assert "never sets it" in message  # the real ModelRunner has no such attribute
    assert [r.kind for r in read_log.contract_reads()] == [read_log.UNDECLARED]


def test_undeclared_read_of_a_real_runner_attribute_points_at_its_assignment() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation, match=r"model_runner\.py:\d+"):
        runner.lora_manager  # noqa: B018 - ModelRunner sets it, the contract does not declare it


def test_nested_objects_are_strict() -> None:
    runner = dsakit.MockModelRunner("draft")
    with pytest.raises(dsakit.ContractViolation, match=r"model_runner\.token_to_kv_pool\.get_key_buffer"):
        runner.token_to_kv_pool.get_key_buffer  # noqa: B018


def test_soft_read_returns_default_and_is_logged() -> None:
    runner = dsakit.MockModelRunner("draft")
    assert getattr(runner, "some_optional_feature", "dflt") == "dflt"
    assert hasattr(runner.model_config.hf_config, "index_kpool") is False
    reads = read_log.contract_reads()
    assert [(r.kind, r.path) for r in reads] == [
        (read_log.SOFT, "some_optional_feature"),
        (read_log.SOFT, "model_config.hf_config.index_kpool"),
    ]
    assert any("soft-read: model_runner.some_optional_feature (draft)" in line for line in read_log.format_summary())


def test_a_soft_read_spread_over_lines_is_a_soft_read() -> None:
    # the reading line is where the call starts; its name and default may follow on the next lines
    runner = dsakit.MockModelRunner("draft")
    assert getattr(
        runner, "optional_over_two_lines", "dflt") == "dflt"
    assert hasattr(runner,
                   "optional_over_three_lines"
                   ) is False
    reads = read_log.contract_reads()
    assert [(r.kind, r.path) for r in reads] == [
        (read_log.SOFT, "optional_over_two_lines"), (read_log.SOFT, "optional_over_three_lines")]


def test_omitted_attribute_fails_with_contract_violation_not_bare_attribute_error() -> None:
    runner = dsakit.MockModelRunner("target", omit=["max_running_requests"])
    with pytest.raises(dsakit.ContractViolation) as raised:
        runner.max_running_requests  # noqa: B018
    message = str(raised.value)
    assert raised.value.code == "contract-omitted-read"
    assert "omitted" in message and "SM major >= 10" in message and "model_runner.py:" in message


def test_writes_are_type_checked_and_undeclared_writes_refused() -> None:
    runner = dsakit.MockModelRunner("target")
    runner.max_running_requests = 8
    assert runner.max_running_requests == 8
    with pytest.raises(dsakit.UsageError, match="expected int, got str"):
        runner.max_running_requests = "8"
    with pytest.raises(dsakit.ContractViolation, match="cannot set model_runner.lora_manager"):
        runner.lora_manager = object()


def test_declared_kit_writes_are_type_checked() -> None:
    """The attention kit's draft-runner setup writes these; a wrong type is still refused."""
    runner = dsakit.MockModelRunner("target")
    runner.model_config.vocab_size = 64
    runner.model_config.hf_config.vocab_size = 64
    runner.device_timer = None
    assert (runner.model_config.vocab_size, runner.model_config.hf_config.vocab_size) == (64, 64)
    with pytest.raises(dsakit.UsageError, match="model_config.spec_hidden_size='64': expected int"):
        runner.model_config.spec_hidden_size = "64"
    with pytest.raises(dsakit.UsageError, match="no model to run: assign runner.forward"):
        runner.forward()


def test_draft_from_turns_a_target_into_a_draft_in_place() -> None:
    runner = dsakit.MockModelRunner("target", max_running_requests=8)
    assert runner.server_args.dsa_topk_backend  # builds the server_args level as a target
    with pytest.raises(dsakit.UsageError, match=r"contradicts role='target'.*draft_from"):
        runner.is_draft_worker = True
    draft = dsakit.MockModelRunner.draft_from(runner, model_config__vocab_size=64, device="cpu")
    assert draft is runner and runner.is_draft_worker is True
    assert runner.max_running_requests == 8 and runner.model_config.vocab_size == 64
    # per-role defaults not read yet follow the draft role, in namespaces built before the turn too
    assert runner.server_args.speculative_eagle_topk == 1
    assert runner.spec_algorithm.is_eagle()
    with pytest.raises(dsakit.UsageError, match="already has role='draft'"):
        dsakit.MockModelRunner.draft_from(runner)


def test_draft_from_checks_its_overrides_and_its_target() -> None:
    with pytest.raises(dsakit.UsageError, match="model_config.vocab_size='64': expected int"):
        dsakit.MockModelRunner.draft_from(dsakit.MockModelRunner("target"), model_config__vocab_size="64")
    with pytest.raises(dsakit.UsageError, match="needs a MockModelRunner, got SimpleNamespace"):
        from types import SimpleNamespace

        dsakit.MockModelRunner.draft_from(SimpleNamespace())  # type: ignore[arg-type]


def test_every_written_entry_names_its_writers() -> None:
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT

    written = {e.path for e in MODEL_RUNNER_CONTRACT if e.writable}
    assert {"model", "device_timer", "forward", "attn_backend", "draft_attn_backend",
            "model_config.spec_hidden_size", "model_config.dtype", "model_config.vocab_size",
            "model_config.hf_config.vocab_size"} <= written
    assert all(all(w.strip() for w in MODEL_RUNNER_CONTRACT.entries[p].writers) for p in written)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_running_requests": "64"}, "max_running_requests='64': expected int, got str"),
        ({"max_running_requests": True}, "expected int, got bool"),
        ({"page_size": 1.5}, "expected int, got float"),
        ({"model_config__context_len": None}, "model_config.context_len=None: expected int, got NoneType"),
        ({"is_draft_worker": True}, "contradicts role='target'"),
        ({"max_runing_requests": 1}, "unknown override 'max_runing_requests'"),
        ({"model_config__hf_config__index_top_k": 1}, "unknown override 'model_config.hf_config.index_top_k'"),
        ({"page_size__x": 1}, "page_size is a int, not a nested object"),
        # issue 28 item 8: a namespace takes a mapping or an object, never a scalar
        ({"model_config": 5}, "override model_runner.model_config=5: expected a namespace (a strict nested "
                              "object: a mapping of its attributes"),
        ({"server_args": "trtllm"}, "model_runner.server_args='trtllm': expected a namespace"),
        ({"overrides": "str"}, "overrides='str': expected a dict of attribute paths to values"),
        ({"overrides": {5: 1}}, "overrides={5: 1}: expected a dict of attribute paths (str) to values"),
        ({"contract": 42}, "contract=42: expected a dsakit Contract"),
        ({"omit": 5}, "omit=5: expected attribute paths (str)"),
    ],
)
def test_bad_overrides_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(dsakit.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dsakit.MockModelRunner("target", **kwargs)


def test_overrides_nested_by_keyword_and_by_dotted_key() -> None:
    runner = dsakit.MockModelRunner(
        "draft", model_config__context_len=4096, overrides={"model_config.hf_config.index_topk": 512}
    )
    assert runner.model_config.context_len == 4096
    assert runner.model_config.hf_config.index_topk == 512
    assert runner.model_config.num_attention_heads == 128


def test_unknown_role_and_unknown_omit() -> None:
    with pytest.raises(dsakit.UsageError, match="unknown role 'verifier'; expected one of: target, draft"):
        dsakit.MockModelRunner("verifier")
    with pytest.raises(dsakit.UsageError, match="cannot omit 'max_requests'"):
        dsakit.MockModelRunner("target", omit=["max_requests"])


def test_mutable_defaults_are_not_shared() -> None:
    first, second = dsakit.MockModelRunner("target"), dsakit.MockModelRunner("target")
    first.model_config.hf_config.architectures.append("X")
    assert second.model_config.hf_config.architectures == ["DeepseekV32ForCausalLM"]


def test_defaults_derived_from_an_omitted_attribute_still_build() -> None:
    runner = dsakit.MockModelRunner("target", omit=["max_running_requests"])
    assert runner.req_to_token_pool.size == 64  # derived from the omitted value
    assert read_log.contract_reads() == []
    with pytest.raises(dsakit.ContractViolation, match="omitted"):
        runner.max_running_requests  # noqa: B018


# ---------------------------------------------------------------- lazy construction
# The tree is built on first access (bench/bench_kit_overhead.py: a runner that a test only passes
# through costs ~1.7 us instead of ~14 us); everything a test can observe stays as if eager.


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_config": {"hf_config": {"index_topk": "2048"}}}, "model_config.hf_config.index_topk='2048': expected int"),
        ({"overrides": {"model_config.hf_config": {"index_topk_x": 1}}}, "unknown override 'model_config.hf_config.index_topk_x'"),
        ({"token_to_kv_pool__page_size__x": 1}, "token_to_kv_pool.page_size is a int, not a nested object"),
        ({"req_to_token_pool__size": 0.5}, "req_to_token_pool.size=0.5: expected int, got float"),
        ({"omit": "max_requests"}, "cannot omit 'max_requests'"),
        ({"omit": ["model_config.context_length"]}, "cannot omit 'model_config.context_length'"),
    ],
)
def test_bad_nested_overrides_and_omits_are_refused_at_construction(kwargs: dict, message: str) -> None:
    # nothing is read: the error comes from MockModelRunner(...) itself, not from a later access
    with pytest.raises(dsakit.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dsakit.MockModelRunner("draft", **kwargs)
    with pytest.raises(dsakit.UsageError, match="unknown role 'Verifier'"):
        dsakit.MockModelRunner("Verifier", **kwargs)  # the role is checked first, as before


def test_an_untouched_runner_is_not_built_and_still_looks_like_a_runner() -> None:
    runner = dsakit.MockModelRunner(" Draft ")  # the role is still parsed leniently
    assert not runner._dsakit_built
    assert isinstance(runner, dsakit.MockModelRunner) and type(runner) is dsakit.MockModelRunner
    assert repr(runner) == "<strict model_runner role=draft>"
    assert not runner._dsakit_built  # repr, isinstance and type() build nothing
    assert runner.is_draft_worker is True
    assert runner._dsakit_built


def test_first_access_builds_one_level_at_a_time() -> None:
    runner = dsakit.MockModelRunner("target", model_config__context_len=4096)
    assert runner.page_size == 64
    model_config = runner.model_config
    assert isinstance(model_config, StrictNamespace) and not isinstance(model_config, dsakit.MockModelRunner)
    assert repr(model_config) == "<strict model_runner.model_config role=target>"
    assert not model_config._dsakit_built  # reading runner.model_config builds only the namespace object
    assert model_config.context_len == 4096  # the override, validated at construction
    assert runner.model_config is model_config  # built once
    assert not model_config.hf_config._dsakit_built
    assert model_config.hf_config.index_topk == 2048
    assert runner.model_config.hf_text_config is model_config.hf_config  # a factory default


def test_dir_and_writes_build_the_level_they_touch() -> None:
    runner = dsakit.MockModelRunner("target")
    assert "max_running_requests" in dir(runner) and "model_config" in dir(runner)
    assert dir(runner.server_args) == sorted(dir(runner.server_args))
    fresh = dsakit.MockModelRunner("target")
    fresh.max_running_requests = 8  # a write before any read
    assert fresh.max_running_requests == 8
    assert fresh.req_to_token_pool.size == 8  # defaults derived from it see the write
    assert fresh.page_size == 64  # the rest of the level still has its defaults
    untouched = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.UsageError, match="expected int, got str"):
        untouched.model_config.context_len = "4096"
    with pytest.raises(dsakit.ContractViolation, match="cannot set model_runner.lora_manager"):
        dsakit.MockModelRunner("target").lora_manager = object()


def test_violation_from_a_lazily_built_namespace_names_attribute_and_site() -> None:
    hf_config = dsakit.MockModelRunner("draft").model_config.hf_config  # the runner itself is gone
    assert not hf_config._dsakit_built
    with pytest.raises(dsakit.ContractViolation) as raised:
        hf_config.index_top_k  # noqa: B018 - the read is the test
    line = sys._getframe().f_lineno - 1  # the read, the line above
    assert raised.value.attribute == "model_config.hf_config.index_top_k"
    assert raised.value.code == "contract-undeclared-read"
    assert raised.value.reading_site.endswith(f"test_mock_model_runner.py:{line} in "
                                              "test_violation_from_a_lazily_built_namespace_names_attribute_and_site")
    assert "model_runner.model_config.hf_config.index_top_k is not in the dsakit role contract (role=draft)" in str(
        raised.value)
    assert [(r.kind, r.path, r.site) for r in read_log.contract_reads()] == [
        (read_log.UNDECLARED, "model_config.hf_config.index_top_k", raised.value.reading_site)
    ]
    assert hf_config.index_topk == 2048  # the namespace works without its runner alive


def test_omitted_namespace_and_soft_reads_on_lazily_built_namespaces() -> None:
    runner = dsakit.MockModelRunner("target", omit=["model_config.hf_config", "token_to_kv_pool"])
    assert runner.model_config.context_len == 163840
    with pytest.raises(dsakit.ContractViolation, match="model_runner.model_config.hf_config was omitted"):
        runner.model_config.hf_config  # noqa: B018
    with pytest.raises(dsakit.ContractViolation, match="model_runner.token_to_kv_pool was omitted"):
        runner.token_to_kv_pool  # noqa: B018
    server_args = dsakit.MockModelRunner("target").server_args
    assert getattr(server_args, "brand_new_flag", None) is None
    assert [(r.kind, r.path) for r in read_log.contract_reads()] == [
        (read_log.OMITTED, "model_config.hf_config"),
        (read_log.OMITTED, "token_to_kv_pool"),
        (read_log.SOFT, "server_args.brand_new_flag"),
    ]


def test_overrides_of_a_namespace_by_mapping_and_by_object() -> None:
    import types

    by_mapping = dsakit.MockModelRunner("target", model_config={"context_len": 4096, "hf_config": {"index_topk": 512}})
    assert by_mapping.model_config.context_len == 4096
    assert by_mapping.model_config.hf_config.index_topk == 512
    assert by_mapping.model_config.hf_config.index_n_heads == 64
    replaced = types.SimpleNamespace(context_len=1)
    assert dsakit.MockModelRunner("target", model_config=replaced).model_config is replaced


# ---------------------------------------------------------------- gaps found by mutation testing


def test_omitting_an_undeclared_attribute_lists_the_declared_ones() -> None:
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
    from dsakit.errors import UsageError

    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner("target", omit=["max_runing_requests"])
    assert str(raised.value) == (
        "cannot omit 'max_runing_requests': not declared by the role contract; declared top-level "
        f"attributes: {', '.join(sorted(MODEL_RUNNER_CONTRACT.top_level()))}"
    )
    assert "max_running_requests, " in str(raised.value)


def test_unknown_nested_override_names_the_namespace_and_its_declared_children() -> None:
    from dsakit.contracts.model_runner_contract import MODEL_RUNNER_CONTRACT
    from dsakit.errors import UsageError

    with pytest.raises(UsageError) as raised:
        dsakit.MockModelRunner("target", server_args__no_such_flag=1)
    declared = ", ".join(sorted(MODEL_RUNNER_CONTRACT.children("server_args")))
    assert str(raised.value).endswith(
        "'server_args.no_such_flag': the role contract declares no such attribute on "
        f"model_runner.server_args; declared here: {declared}"
    )


def test_undeclared_write_and_read_carry_their_codes_and_say_where_to_declare() -> None:
    runner = dsakit.MockModelRunner("target")
    with pytest.raises(dsakit.ContractViolation) as wrote:
        runner.brand_new_attr = 1
    assert wrote.value.code == "contract-undeclared-write" and wrote.value.attribute == "brand_new_attr"
    assert str(wrote.value).startswith("cannot set model_runner.brand_new_attr (role=target) at ")
    with pytest.raises(dsakit.ContractViolation) as read:
        runner.brand_new_attr  # noqa: B018
    assert read.value.code == "contract-undeclared-read"
    # where to declare it: the suite's own pyproject.toml, never dsakit's installed files
    assert '[tool.dsakit.contract."brand_new_attr"]' in str(read.value)
    assert str(read.value).endswith(
        "then `dsakit contract check --backend-src DIR` checks your backend's reads against it.")


def test_a_namespace_still_takes_a_mapping_or_an_object() -> None:
    import types

    runner = dsakit.MockModelRunner(model_config={"context_len": 4096})
    assert runner.model_config.context_len == 4096
    pool = types.SimpleNamespace(size=8)
    runner.req_to_token_pool = pool  # a real SGLang pool object is set like this
    assert runner.req_to_token_pool is pool
    with pytest.raises(dsakit.UsageError, match="setting model_runner.req_to_token_pool=3: expected a namespace"):
        runner.req_to_token_pool = 3


def test_type_matches_refuses_none_unless_optional() -> None:
    """Mutation survivor (issue 28 item 11): `optional` defaults to False, also inside list[...]."""
    from dsakit.contracts.schema import type_matches

    assert type_matches("int", None) is False
    assert type_matches("int", None, optional=True) is True
    assert type_matches("list[int]", [1, None], optional=True) is False  # optional is for the list itself
    assert type_matches("int | str", None) is False
    assert type_matches("namespace", None) is False
    assert type_matches("namespace", 5) is False and type_matches("namespace", {}) is True
