"""The `dsakit` command line: argument parsing and dispatch only.

Each subcommand's work lives in the module that owns its concept; this module maps words to
them and imports that module only when its command runs. Exit codes: 0 ok, 1 a check failed,
2 usage error. Never imports torch or SGLang itself.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from dsakit.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, one line) instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "dsakit: error: ", so only the subcommand words ("compare: ") go here
        command = self.prog.partition(" ")[2]
        raise UsageError(f"{command}: {message}" if command else message)


def _project(given: str | None) -> str | None:
    """--project DIR as given, once it is a folder (a mistyped one read dsakit's contract alone, exit 0)."""
    if given is None:
        return None
    path = os.path.expanduser(given)
    if not os.path.exists(path) or not os.path.isdir(path):
        why = "does not exist" if not os.path.exists(path) else "is a file, not a folder"
        raise UsageError(f"--project {given}: {why}; pass the folder that holds your pyproject.toml")
    return path


def _contract_check(args: argparse.Namespace) -> int:
    from dsakit.sglang_facts.contract_check import run_contract_check

    return run_contract_check(sglang_src=args.sglang_src, as_json=args.json, backend_src=args.backend_src,
                              project=_project(args.project))


def _contract_table(args: argparse.Namespace) -> int:
    from pathlib import Path

    from dsakit.contracts.extension import effective_contract
    from dsakit.contracts.schema import markdown_table

    project = _project(args.project)
    print(markdown_table(effective_contract(Path(project) if project else Path.cwd())))
    return 0


def _audit(args: argparse.Namespace) -> int:
    from dsakit.audit.command import run_audit

    return run_audit(args.paths, device_spec=args.device, sglang_src=args.sglang_src, as_json=args.json,
                     backend_src=args.backend_src)


def _env(args: argparse.Namespace) -> int:
    from dsakit.recipes import run_env

    return run_env(args.show)


def _capabilities(args: argparse.Namespace) -> int:
    from dsakit.gates.capabilities import run_capabilities

    return run_capabilities(args.device, as_json=args.json, allow_torch=args.device_from_torch)


# -- GPU-node workflows: dsakit.warm.targets, dsakit.node.rerun, dsakit.compare.pr_vs_base,
# dsakit.compare.report_merge


def _warm(args: argparse.Namespace) -> int:
    from dsakit.warm.targets import run_warm

    from dsakit.warm.tarball import run_export, run_import
    from dsakit.output_paths import output_file

    if args.export_path is not None:
        output_file(args.export_path, "--export")  # a bad path refused before any warming
    if args.import_path:
        code = run_import(args.import_path, device_name=args.device)
        if not (args.selection or args.target):
            return code
    code = run_warm(args.selection, targets=args.target or (), as_json=args.json, device_name=args.device) \
        if (args.selection or args.target or not (args.import_path or args.export_path)) else 0
    if args.export_path and code == 0:
        return run_export(args.export_path, device_name=args.device)
    return code


def _rerun_test(args: argparse.Namespace) -> int:
    from dsakit.node.rerun import run_rerun_test

    return run_rerun_test(args.files, junit_dir=args.junitxml, timeout=args.timeout,
                          only_matching=args.only_matching, show_output=args.show_output,
                          pytest_args=getattr(args, "pytest_args", ()), device_name=args.device)


def _compare(args: argparse.Namespace) -> int:
    from dsakit.compare.pr_vs_base import run_compare

    return run_compare(args.base, args.pr, args.pytest_args, json_path=args.json,
                       allow_env_mismatch=args.allow_env_mismatch, keep=args.keep, timeout=args.timeout,
                       markdown_path=args.markdown)


def _pr_check(args: argparse.Namespace) -> int:
    from dsakit.compare.pr_check import run_pr_check

    return run_pr_check(args.base, args.pr, args.pytest_args, devices=args.devices, json_path=args.json,
                        markdown_path=args.markdown, must_run=args.must_run, keep=args.keep, timeout=args.timeout)


def _report_merge(args: argparse.Namespace) -> int:
    from dsakit.compare.report_merge import run_report_merge

    return run_report_merge(args.reports, must_run=args.must_run, json_path=args.json, markdown_path=args.markdown,
                            must_run_real=args.must_run_real)


class _WarmHelp(argparse.HelpFormatter):
    """`dsakit warm --help`: `{targets}` is the warm registry's target names (the top-k ones from
    the backend table), imported only when the help is shown."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text and "{targets}" in text:
            from dsakit.warm.targets import JIT_TARGETS

            text = text.replace("{targets}", ", ".join(JIT_TARGETS))
        return text


def _add_gpu_node_commands(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from dsakit.devices import pr_gate_keys  # the device table: data only, nothing heavy

    warm = commands.add_parser("warm", help="build the JIT modules a pytest selection needs, once, under a lock",
                               formatter_class=_WarmHelp)
    warm.add_argument("selection", nargs="*", help="pytest selection (files, node ids, -k/-m after --)")
    warm.add_argument("--target", action="append", metavar="NAME",
                      help="warm this target without collecting ({targets}); repeatable")
    warm.add_argument("--device", metavar="NAME", help="simulate a device for the targets' gates")
    warm.add_argument("--json", action="store_true", help="print the report as JSON")
    warm.add_argument("--export", dest="export_path", metavar="PATH",
                      help="after warming (if a selection or --target is given), write the JIT caches and the "
                      "SGLang bytecode to PATH (a tarball keyed by GPU arch, Python, torch, SGLang, flashinfer, "
                      "triton and the install path)")
    warm.add_argument("--import", dest="import_path", metavar="PATH",
                      help="first extract a cache written by --export (refused, exit 2, when its key differs "
                      "from this node's); then warm the selection, if one is given")
    warm.set_defaults(handler=_warm)

    rerun = commands.add_parser("rerun-test", help="rerun test files one process each, like SGLang's CI bot "
                                "(pytest arguments after --: rerun-test FILE... -- -k expr)")
    rerun.add_argument("files", nargs="+", metavar="FILE")
    rerun.add_argument("--junitxml", metavar="DIR", help="JUnit XML + log per file (default ./dsakit-rerun-junit)")
    rerun.add_argument("--timeout", type=float, default=None, metavar="S", help="per-file timeout in seconds")
    rerun.add_argument("--only-matching", action="store_true",
                       help="skip files whose CI registration does not match this node")
    rerun.add_argument("--show-output", action="store_true", help="print every file's full output")
    rerun.add_argument("--device", metavar="NAME", help="simulate a device: for the runner match and, through "
                       "--dsakit-device NAME, for each file's whole run")
    rerun.set_defaults(handler=_rerun_test)

    compare = commands.add_parser("compare", help="one pytest selection against two SGLang trees: regressions, fixes, ...")
    compare.add_argument("--base", required=True, metavar="SRC", help="the base SGLang tree")
    compare.add_argument("--pr", required=True, metavar="SRC", help="the PR's SGLang tree")
    compare.add_argument("--json", metavar="PATH", help="write the classification as JSON")
    compare.add_argument("--markdown", metavar="PATH", help="write a PR comment (regressions first) as markdown")
    compare.add_argument("--allow-env-mismatch", action="store_true",
                         help="classify even when the runs' environment fingerprints differ")
    compare.add_argument("--keep", metavar="DIR", help="keep overlays, records and logs in DIR")
    compare.add_argument("--timeout", type=float, default=None, metavar="S", help="per-run timeout in seconds")
    compare.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS")
    compare.set_defaults(handler=_compare)

    check = commands.add_parser("pr-check", help="the PR gate: base vs PR on every device (real here, else "
                                "simulated): regressions, newly skipped tests, pre-existing failures, flaky, new "
                                "model_runner reads")
    check.add_argument("--base", required=True, metavar="TREE", help="the base SGLang tree")
    check.add_argument("--pr", required=True, metavar="TREE", help="the PR's SGLang tree")
    check.add_argument("--devices", metavar="LIST",
                       help=f"comma-separated devices, or all (default: {','.join(pr_gate_keys())})")
    check.add_argument("--json", metavar="PATH", help="write the verdicts as JSON")
    check.add_argument("--markdown", metavar="PATH", help="write the PR comment as markdown")
    check.add_argument("--must-run", default="", metavar="CODE,...",
                       help="exit 1 when no test behind these gates ran on any device in the PR runs")
    check.add_argument("--keep", metavar="DIR", help="keep overlays, records and logs in DIR")
    check.add_argument("--timeout", type=float, default=None, metavar="S", help="per-run timeout in seconds")
    check.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS")
    check.set_defaults(handler=_pr_check)

    report = commands.add_parser("report", help="--dsakit-report files of several nodes and shards")
    report_commands = report.add_subparsers(dest="report_command", required=True, parser_class=_Parser)
    merge = report_commands.add_parser(
        "merge", help="one coverage table: per gate and test, which node ran, skipped or failed it")
    merge.add_argument("reports", nargs="+", metavar="REPORT.json", help="files written by pytest --dsakit-report")
    merge.add_argument("--must-run", default="", metavar="CODE,...",
                       help="fail (exit 1) when a test behind these gates ran on no node (added to the "
                       "reports' own --dsakit-must-run codes)")
    merge.add_argument("--must-run-real", action="store_true",
                       help="a must-run gate met only by simulated devices (--dsakit-device) fails too")
    merge.add_argument("--json", metavar="PATH", help="write the merged coverage as JSON")
    merge.add_argument("--markdown", metavar="PATH", help="write a PR comment as markdown")
    merge.set_defaults(handler=_report_merge)


class _VersionAction(argparse.Action):
    """`dsakit --version`: the version and where the package is imported from (a wheel in
    site-packages or a checkout on PYTHONPATH), on one unwrapped line; exits 0."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        import dsakit

        print(f"dsakit {dsakit.__version__} (distribution pytest-dsakit) at {os.path.dirname(dsakit.__file__ or '')}")
        parser.exit(0)


def _build_parser() -> argparse.ArgumentParser:
    from dsakit.devices import keys_text  # the device table: data only, nothing heavy

    parser = _Parser(prog="dsakit", description="Contract-testing kit for SGLang DSA / DeepSeek-V4 backends")
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="print the version and where dsakit is imported from")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    contract = commands.add_parser("contract", help="the model-runner role contract")
    contract_commands = contract.add_subparsers(dest="contract_command", required=True, parser_class=_Parser)
    check = contract_commands.add_parser(
        "check", help="statically compare backend reads, the real ModelRunner and the contract"
    )
    check.add_argument("--sglang-src", metavar="DIR", help="SGLang tree to scan (default: the installed one)")
    check.add_argument("--backend-src", metavar="DIR",
                       help="scan your own backend's source (a folder or .py file) instead of SGLang's "
                       "backends, against the contract plus your [tool.dsakit.contract] entries")
    check.add_argument("--project", metavar="DIR",
                       help="where your pyproject.toml with [tool.dsakit.contract] is (default: the "
                       "nearest one at or above the current directory)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=_contract_check)
    table = contract_commands.add_parser(
        "table", help="print the contract (plus your [tool.dsakit.contract] entries) as a Markdown table")
    table.add_argument("--project", metavar="DIR",
                       help="where your pyproject.toml is (default: the nearest at or above the current directory)")
    table.set_defaults(handler=_contract_table)

    # -- static audit of a downstream suite's mock runners (dsakit.audit)
    audit = commands.add_parser("audit", help="find mock model runners in a test tree that lack what a "
                                "DSA / DeepSeek-V4 backend reads, per simulated device")
    audit.add_argument("paths", nargs="+", metavar="PATH", help="test files or folders to scan (AST only)")
    audit.add_argument("--device", metavar="NAME,...",
                       help=f"simulated devices ({keys_text()}; aliases such as b300); default: every one")
    audit.add_argument("--sglang-src", metavar="DIR", help="SGLang tree to scan (default: the installed one)")
    audit.add_argument("--backend-src", metavar="DIR", help="your own backend's .py file or folder: a mock handed "
                       "to one of its classes is checked against what it reads (and [tool.dsakit.contract])")
    audit.add_argument("--json", action="store_true", help="print the report as JSON")
    audit.set_defaults(handler=_audit)

    # -- capability gates (dsakit.gates.capabilities)
    caps = commands.add_parser("capabilities", help="the device model and every gate, open or closed, with reasons")
    caps.add_argument(
        "--device",
        metavar="NAME",
        help=f"simulate a device ({keys_text()}; default: $DSAKIT_DEVICE or the real one)",
    )
    caps.add_argument("--device-from-torch", "--probe-torch", dest="device_from_torch", action="store_true",
                      help="let torch.cuda name this machine's device when NVML, nvidia-smi and rocminfo find "
                      "nothing (--probe-torch: its old name)")
    caps.add_argument("--json", action="store_true", help="print the report as JSON")
    caps.set_defaults(handler=_capabilities)

    # -- the CPU recipe shipped with the package (dsakit.recipes)
    env = commands.add_parser("env", help="print the pinned CPU recipe (torch + SGLang 0.5.23) as pip commands")
    env.add_argument("--show", metavar="NAME", help="print one recipe file instead (torch, sglang)")
    env.set_defaults(handler=_env)

    # -- GPU-node workflows
    _add_gpu_node_commands(commands)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        pytest_args: list[str] = []
        if argv[:1] == ["rerun-test"] and "--" in argv:  # FILE... -- PYTEST_ARGS (files are positional too)
            cut = argv.index("--")
            argv, pytest_args = argv[:cut], argv[cut + 1:]
        args = _build_parser().parse_args(argv)
        if pytest_args:
            args.pytest_args = pytest_args
        handler: Callable[[argparse.Namespace], int] = args.handler
        from dsakit.node.process_group import interruptible

        with interruptible():  # SIGTERM exits 143 through every `finally`: no temp file, workdir or child left
            return handler(args)
    except UsageError as error:
        print(f"dsakit: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: the children are ended and temp folders removed by now
        print("dsakit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`dsakit capabilities | head`): not our failure; keep the
        # interpreter from complaining again when it flushes stdout at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
