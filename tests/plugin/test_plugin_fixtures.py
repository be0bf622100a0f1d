"""The plugin's model-runner fixtures, run through pytester (in-process: no torch is loaded)."""

from __future__ import annotations

import pytest

from dsakit.node.pytest_invocation import plugin_args

PLUGIN = tuple(plugin_args())  # none where the plugin is installed; -p dsakit.plugin in a checkout (a GPU node)


FIXTURE_TESTS = """
import dsakit

def test_target(target_runner):
    assert target_runner.is_draft_worker is False

def test_draft(draft_runner):
    assert draft_runner.is_draft_worker is True

def test_by_role(model_runner, model_runner_role):
    assert isinstance(model_runner, dsakit.MockModelRunner)
    assert model_runner.is_draft_worker is (model_runner_role == "draft")

@pytest.mark.dsakit_role("draft")
def test_draft_only(model_runner):
    assert model_runner.is_draft_worker
"""


def test_fixtures_and_role_parametrization(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n" + FIXTURE_TESTS)
    result = pytester.runpytest(*PLUGIN, "-v", "--strict-markers")
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(["*test_by_role?role=target? PASSED*", "*test_by_role?role=draft? PASSED*"])


def test_roles_option_narrows_the_matrix(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n" + FIXTURE_TESTS)
    result = pytester.runpytest(*PLUGIN, "-v", "--dsakit-roles=draft")
    result.assert_outcomes(passed=4)
    assert "role=target" not in result.stdout.str()


def test_unknown_role_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n" + FIXTURE_TESTS)
    result = pytester.runpytest(*PLUGIN, "--dsakit-roles=target,verifier")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # refused at configure, before collection
    result.stderr.fnmatch_lines(["ERROR: --dsakit-roles='target,verifier': unknown role 'verifier'; "
                                 "expected one of: target, draft"])


def test_contract_violations_are_summarised_at_the_end(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_reads(target_runner):
            assert getattr(target_runner, "optional_knob", 3) == 3
        """
    )
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*dsakit contract reads*", "soft-read: model_runner.optional_knob (target) at *"])


def test_contract_reads_summary_collects_every_xdist_worker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_reads(target_runner, n):
            assert getattr(target_runner, f"optional_knob_{n}", 3) == 3
        """
    )
    # a subprocess: an in-process controller would merge the workers' reads into this process's log
    result = pytester.runpytest_subprocess(*PLUGIN, "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*dsakit contract reads*"])
    for n in range(4):
        result.stdout.fnmatch_lines([f"*-read: model_runner.optional_knob_{n} (target) at *"])


def test_runner_fixtures_open_an_sglang_scope_for_their_role(pytester: pytest.Pytester) -> None:
    """`DSATopKBackend.resolve(runner)` reads SGLang's runtime context (get_exec / get_spec): on a
    fixture runner it works, a scope the test opens wins, and nothing stays published afterwards."""
    import importlib.util

    if importlib.util.find_spec("sglang") is None:  # not imported here: pytester would unload it
        pytest.skip("[no-sglang] SGLang is not installed")

    pytester.makepyfile(
        """
        import dsakit
        from sglang.srt.layers.attention.dsa.dsa_topk_backend import DSATopKBackend
        from sglang.srt.runtime_context import get_context

        def test_target(target_runner):
            assert DSATopKBackend.resolve(target_runner) is DSATopKBackend.SGL_KERNEL
            assert target_runner.server_args.dsa_topk_backend == "sgl-kernel"

        def test_draft(draft_runner):
            assert DSATopKBackend.resolve(draft_runner) is DSATopKBackend.SGL_KERNEL
            assert draft_runner.server_args.speculative_eagle_topk == 1  # the draft role's value

        def test_own_scope_wins(model_runner):
            with dsakit.SGLangScope(server_args={"dsa_topk_backend": "torch",
                                                 "speculative_dsa_topk_backend": "torch"}):
                assert DSATopKBackend.resolve(model_runner) is DSATopKBackend.TORCH

        def test_nothing_left_published():
            assert not get_context().is_config_namespace_published("exec")
        """
    )
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
