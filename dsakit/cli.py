"""The `dsakit` command line: argument parsing and dispatch only.

Each subcommand's work lives in the module that owns its concept; this module maps words to
them and imports that module only when its command runs. Exit codes: 0 ok, 1 a check failed,
2 usage error. Never imports torch or SGLang itself.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from dsakit.errors import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError (exit 2, one line) instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _contract_check(args: argparse.Namespace) -> int:
    from dsakit.contract_check import run_contract_check

    return run_contract_check(sglang_src=args.sglang_src, as_json=args.json)


def _capabilities(args: argparse.Namespace) -> int:
    from dsakit.capabilities import run_capabilities

    return run_capabilities(args.device, as_json=args.json, allow_torch=args.probe_torch)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dsakit", description="Contract-testing kit for SGLang DSA / DeepSeek-V4 backends")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    contract = commands.add_parser("contract", help="the model-runner role contract")
    contract_commands = contract.add_subparsers(dest="contract_command", required=True, parser_class=_Parser)
    check = contract_commands.add_parser(
        "check", help="statically compare backend reads, the real ModelRunner and the contract"
    )
    check.add_argument("--sglang-src", metavar="DIR", help="SGLang tree to scan (default: the installed one)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(handler=_contract_check)

    # -- capability gates (dsakit.capabilities)
    caps = commands.add_parser("capabilities", help="the device model and every gate, open or closed, with reasons")
    caps.add_argument(
        "--device",
        metavar="NAME",
        help="simulate a device (sm90, sm100, sm103, sm120, gfx90a, gfx942, gfx950, cpu; default: "
        "$DSAKIT_DEVICE or the real one)",
    )
    caps.add_argument("--probe-torch", action="store_true", help="let the real probe fall back to torch.cuda")
    caps.add_argument("--json", action="store_true", help="print the report as JSON")
    caps.set_defaults(handler=_capabilities)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _build_parser().parse_args(argv)
        handler: Callable[[argparse.Namespace], int] = args.handler
        return handler(args)
    except UsageError as error:
        print(f"dsakit: error: {error}", file=sys.stderr)
        return 2
