"""Mutation testing of whole core modules, in one pytest session: mutmut 2's mutants and the added
boundary / dropped-operand ones, a fork per mutant.

Owns: the mutants (mutmut 2's operators, and `NEW_OPERATORS`: a comparison's boundary, a number
minus one, an `and` / `or` / `+` / `-` operand dropped, a guard made always true or false, an
argument the callee has a default for left out), the verdict of every mutant of the named modules
(killed / timeout / survived / no test reaches it) and the per-module and per-operator tables.
Must not write into the checkout: a mutant lives only in a forked child's memory (bytecode
writing is off there).

One run (bench/README.md, "Mutation testing"): the parent starts pytest on the focused tests,
collects them once (torch, SGLang, the tests and dsakit imported once) and takes over the test
loop. A baseline child runs every test under a profiler that records which functions of the
modules each test calls. Then per mutant the parent forks a child that
- for a mutant inside a function: swaps that function's code object for the mutated one (every
  reference to the function, in dsakit or in a test module, sees it) and runs only the tests that
  call the function, stopping at the first failure;
- for any other mutant (module constants, class bodies, signatures, decorators) or one whose
  function is only called while importing: drops everything imported from the checkout, serves the
  mutated module through an import hook and runs a fresh `pytest.main` on every usable test.
The parent ends a child's process group at its timeout. Needs `mutmut<3` importable (only its
operators are used): install it with `--target` into a folder of its own, put that on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import gc
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_ROOT_PREFIX, _BENCH_PREFIX = str(ROOT) + os.sep, str(ROOT / "bench") + os.sep
# Plain asserts: rewriting the tests and plugins was most of a fresh child's start, and the core
# modules hold no bare `assert` whose rewritten message a test reads. No plugin autoload: only
# dsakit's and syrupy's are needed (xdist, pytest-split, randomly only add start time).
_PYTEST_ARGS = ["-q", "--assert=plain", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                "-p", "no:threadexception", "-p", "dsakit.plugin", "-p", "syrupy", "--no-header"]

# The core, in groups that share focused tests: (modules, tests). Paths are the checkout's layout
# on 2026-12-01; a module that moved is named by its new path here.
GROUPS: dict[str, tuple[list[str], list[str]]] = {
    "mocks": (["mocks/model_runner.py", "mocks/strict_node.py", "mocks/read_log.py", "mocks/runner_scope.py",
               "contracts/schema.py"],
              ["tests/mocks/test_mock_model_runner.py", "tests/mocks/test_runner_copies_and_errors.py",
               "tests/mocks/test_runner_scope_and_read_log.py", "tests/mocks/test_contract_schema.py",
               "contracts/test_model_runner_contract.py"]),
    "gates": (["dsakit/gates/table.py"],
              ["tests/gates/test_gates_table.py", "tests/gates/test_device_model.py", "tests/gates/test_gate_devices_and_sentences.py"]),
    "contract_check": (["dsakit/sglang_facts/contract_check.py"],
                       ["tests/sglang_facts/test_contract_check.py", "tests/sglang_facts/test_contract_check_rules.py"]),
    "checks": (["dsakit/topk/checks.py"],
               ["tests/topk/test_topk_checks.py", "tests/topk/test_topk_check_messages.py", "contracts/test_topk_selection.py"]),
    "audit": ([f"dsakit/audit/{m}.py" for m in (  # smallest first
        "explain", "attr_tree", "guard_eval", "release_match", "command", "registry", "findings",
        "suite_device", "device_guards", "report", "usage", "suite_files", "mock_finder")],
              ["tests/audit/test_audit.py", "tests/audit/test_audit_value_tree_and_inputs.py", "tests/audit/test_audit_guard_eval.py",
               "tests/audit/test_audit_explain.py", "tests/audit/test_audit_report.py",
               "tests/audit/test_audit_release_match.py", "tests/audit/test_audit_attention_registry.py",
               "tests/audit/test_audit_suite_device.py", "tests/audit/test_audit_command_in_process.py",
               "tests/audit/test_audit_backend_usage.py", "tests/audit/test_audit_mock_finder.py",
               "tests/audit/test_audit_findings.py", "tests/audit/test_audit_device_guards.py",
               "tests/audit/test_audit_suites.py", "tests/audit/test_audit_precision.py"]),
    # the kernel-launch contracts: the table's pre- and postconditions and the guard (issues 43, 45)
    "kernel_contracts": (["dsakit/topk/kernel_contracts.py", "dsakit/topk/launch_guard.py"],
                         ["tests/topk/test_kernel_contracts.py", "tests/topk/test_contract_boundaries.py",
                          "tests/topk/test_metadata_postconditions.py", "tests/topk/test_launch_guard.py",
                          "tests/topk/test_launch_guard_part.py",
                          "tests/topk/test_contract_kinds.py"]),
    # the simulation's verdicts (issue 45): the plan and its CPU view, the arch-only kernel table, the
    # arch rules and the reference stand-ins (pytester: the CPU-placed and portable runs are in-process)
    "simulation": (["dsakit/simulation/runtime.py", "dsakit/simulation/kernel_archs.py",
                    "dsakit/simulation/arch_rules.py", "dsakit/simulation/reference_kernels.py"],
                   ["tests/simulation/test_arch_rules.py", "tests/simulation/test_kernel_arch_rows.py",
                    "tests/simulation/test_cpu_placement_rules.py", "tests/simulation/test_portable.py",
                    "tests/simulation/test_runtime_plan_and_cpu_view.py", "tests/simulation/test_kernel_arch_lookups.py",
                    "tests/simulation/test_arch_rule_kinds.py", "tests/simulation/test_reference_batch.py",
                    "tests/simulation/test_reference_ragged_call.py", "tests/simulation/test_reference_mla_decode.py"]),
    # the run session's verdict (issue 45): the run's device as RunDevice resolves it (every spelling of
    # 'real', a simulated key, --dsakit-device-from-torch, the plan), reached in-process and through
    # pytester's inner runs. DsakitSession (the hand-offs to each part) is not measured here: its
    # pytester baseline alone took over 18 min on the loaded 2-core box (2026-12-03)
    "session": (["dsakit/session.py::REAL,DEVICE_KEY,NAME,RunDevice,session_of"],
                ["tests/plugin/test_run_device.py", "tests/plugin/test_run_options.py",
                 "tests/plugin/test_retired_settings.py", "tests/plugin/test_run_device_resolution.py"]),
    # the skip paragraph and its causes alone (issue 45; `inventory` also names them, with inventory.py)
    "skip_causes": (["dsakit/gates/sglang_skips.py", "dsakit/gates/skip_causes.py"],
                    ["tests/gates/test_skip_causes.py", "tests/gates/test_skip_inventory_parts.py",
                     "tests/gates/test_sglang_skip_ranges.py", "tests/gates/test_skip_cause_records.py",
                     "tests/gates/test_skip_cause_groups.py"]),
    # what a user's verdict depends on (issue 34): the fleet merge, the skip inventory, pr-check
    "report_merge": (["dsakit/compare/report_merge.py"],
                     ["tests/compare/test_report_merge.py", "tests/compare/test_report_merge_fields.py"]),
    "inventory": (["dsakit/gates/sglang_skips.py", "dsakit/gates/skip_causes.py", "dsakit/gates/inventory.py"],
                  ["tests/gates/test_skip_inventory.py", "tests/gates/test_skip_inventory_parts.py",
                   "tests/gates/test_skip_causes.py",
                   "tests/gates/test_report_shards.py"]),
    # pr-check's verdicts: what pr_check.py and pr_vs_base.py conclude from two runs (not the
    # command's input checks, runs, tree scans and work folder: only the end-to-end tests, over 3 s,
    # reach them)
    "pr_check": (["dsakit/compare/pr_check.py::VERDICTS,Verdict,DeviceCheck,_flaky,_explanation,outcome_text,verdicts,"
                  "ReadChange,read_changes,_CLASS_LACKS,_CONTRACT_LACKS,_mock_lacking,failing_mocks,PrCheck,"
                  "_TESTS_PER_ROW,_rows,_section,comment,_causes,_why,_not_run_groups,as_json",
                  "dsakit/compare/pr_vs_base.py::CLASSES,_crash_message,load_record,Change,_OVERLAY_PATH,in_tree,"
                  "skip_reason,_skip_key,classify,_describe,fingerprint_mismatch,_UNUSABLE,unusable_runs"],
                 [*(f"tests/cli/test_pr_check.py::{t}" for t in (
                     "test_only_pre_existing_failures_are_exit_0_and_counted_in_the_comment",
                     "test_skips_no_device_ran_are_grouped_by_their_reason_code",
                     "test_a_skip_naming_the_two_runs_overlays_or_another_line_is_the_same_skip",
                     "test_runs_in_flight_follow_the_cpus_and_the_xdist_workers_of_each_run",
                     "test_a_run_that_compared_nothing_is_exit_2_and_a_pr_only_collection_break_exit_1",
                     "test_a_failure_section_counts_test_x_device_beside_its_rows", "test_bad_input_is_exit_2")),
                  "tests/compare/test_pr_vs_base.py", "tests/compare/test_pr_check_verdicts.py",
                  "tests/gates/test_skip_causes.py"]),
}

# groups whose focused tests include pytester runs: the plugin's hooks (the inventory's sections and
# report) are reached only through an inner pytest run, and pytester's in-process one reaches the
# mutant (a test whose inner run is a subprocess calls nothing of the module here: the profile
# leaves it out of every swapped mutant)
PYTESTER_GROUPS = {"report_merge", "inventory", "pr_check", "simulation", "session", "skip_causes"}

# ---------------------------------------------------------------- mutants (mutmut 2's operators)

@dataclass
class Mutant:
    module: str          # path relative to the checkout root
    line: int            # 1-based
    index: int           # mutmut's index of this mutant on its line
    source: str          # the whole mutated module
    diff: str
    kind: str            # "wording" when only a message literal changed, else "code"
    route: str = ""      # "swap" (code object of one function) or "fresh" (a fresh import)
    verdict: str = ""
    tests_run: int = 0
    seconds: float = 0.0
    label: str = ""      # survivors: wording / equivalent / real, from bench/mutation_triage.py
    reason: str = ""
    operator: str = "mutmut"  # "mutmut" (any of mutmut 2's) or one of NEW_OPERATORS
    scope: str = ""      # the module as the run named it: its path, or PATH::NAMES for a part of it


def mutants_of(module: str, lines: set[int] | None = None) -> list[Mutant]:
    """Every mutmut 2 mutant of `module` (path relative to ROOT), in source order; only those on
    `lines` when given (each mutant re-parses the module: most of a module's listing time)."""
    from mutmut import Context, list_mutations, mutate

    path = ROOT / module
    original = path.read_text(encoding="utf-8")
    ids = sorted(list_mutations(Context(source=original, filename=str(path))),
                 key=lambda m: (m.line_number, m.index))
    found: list[Mutant] = []
    for mid in ids:
        if lines is not None and mid.line_number + 1 not in lines:
            continue
        source, count = mutate(Context(source=original, mutation_id=mid, filename=str(path)))
        if count != 1:
            raise SystemExit(f"{module}: mutant {mid} applied {count} times")
        before, after = original.splitlines(True), str(source).splitlines(True)
        diff = "".join(difflib.unified_diff(before, after, f"a/{module}", f"b/{module}", n=0))
        found.append(Mutant(module, mid.line_number + 1, mid.index, str(source), diff, _kind(before, after)))
    return found


def _kind(before: list[str], after: list[str]) -> str:
    """"wording" where only a message literal changed (mutmut wraps its body in XX ... XX): two
    words or more; a short literal (":", " in ", a code) is data the code works with: "code"."""
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    if len(before) == len(after) and len(changed) == 1:
        old, new = changed[0]
        literal = re.search(r"""(["'])XX(.*?)XX\1""", new)
        if _strip_xx(new) == old and literal and len(re.findall(r"[A-Za-z]{2,}", literal.group(2))) >= 2:
            return "wording"
    return "code"


def _strip_xx(line: str) -> str:
    for quote in ('"', "'"):
        line = line.replace(quote + "XX", quote).replace("XX" + quote, quote)
    return line


# ---------------------------------------------------------------- boundary and dropped-operand mutants

# Operators added to mutmut 2's (issue 34): each mutant is one textual edit of the module, checked
# against the same edit made on its syntax tree (the mutated source must parse to exactly that tree).
# A mutant that mutmut 2 also makes (the same source) is listed once, as mutmut's.
NEW_OPERATORS = ("boundary", "constant", "drop-operand", "guard", "drop-argument")
_SWAPS: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                            ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_OP_TEXT: dict[type, str] = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_ATOMS = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.List, ast.Tuple, ast.Dict,
          ast.Set, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.JoinedStr)


@dataclass
class _Edit:
    operator: str
    line: int
    start: int     # character offsets into the module's source
    end: int
    text: str
    on_tree: Any   # (tree's node list, parents) -> None: the same change on a copy of the tree
    wording: bool = False


class _Source:
    """Character offsets of AST positions (whose columns are UTF-8 byte offsets) and tokens."""

    def __init__(self, source: str) -> None:
        import io
        import tokenize

        self.source = source
        self.lines = source.splitlines(True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.OP]

    def offset(self, lineno: int, col_bytes: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col_bytes].decode("utf-8"))

    def span(self, node: Any) -> tuple[int, int]:
        return self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)

    def text(self, node: Any) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def op_between(self, start: int, end: int, texts: set[str]) -> tuple[int, int] | None:
        for token in self.tokens:
            at = self.starts[token.start[0] - 1] + token.start[1]
            if start <= at < end and token.string in texts:
                return at, at + len(token.string)
        return None


def _in_parens(text: str, lost_lines: int) -> str:
    """`text` standing in for a span `lost_lines` lines longer: parenthesised where it is not an
    atom, with the lost line breaks inside the parentheses, so every later line keeps its number."""
    return f"({text}{chr(10) * lost_lines})" if lost_lines else f"({text})"


def _replace_node(src: _Source, node: Any, by: Any, operator: str, wording: bool = False) -> _Edit:
    """`node` replaced by its operand `by` (its text, parenthesised unless an atom)."""
    start, end = src.span(node)
    text = src.text(by)
    lost = src.source[start:end].count("\n") - text.count("\n")
    if lost or "\n" in text or not isinstance(by, _ATOMS):
        text = _in_parens(text, lost)
    return _Edit(operator, node.lineno, start, end, text, None, wording)


def _join_operands(src: _Source, node: ast.BoolOp, keep: list[Any]) -> _Edit:
    """`node` (an `and` / `or` of three or more) rebuilt from the operands in `keep`."""
    start, end = src.span(node)
    word = " and " if isinstance(node.op, ast.And) else " or "
    text = word.join(src.text(v) if isinstance(v, _ATOMS) and "\n" not in src.text(v) else f"({src.text(v)})" for v in keep)
    return _Edit("drop-operand", node.lineno, start, end,
                 _in_parens(text, src.source[start:end].count("\n") - text.count("\n")), None)


def _number(src: _Source, node: Any, value: int | float) -> _Edit:
    start, end = src.span(node)
    return _Edit("constant", node.lineno, start, end, repr(value) if value >= 0 else f"({value!r})", None)


def _number_node(value: int | float) -> Any:
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def _message_words(node: Any) -> bool:
    """A message literal of two words or more (a str constant or an f-string's constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        words = node.value
    elif isinstance(node, ast.JoinedStr):
        words = " ".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    else:
        return False
    return len(re.findall(r"[A-Za-z]{2,}", words)) >= 2


def _resolve_callee(func: Any, module: types.ModuleType | None, classes: list[str]) -> tuple[Any, int]:
    """The object a call's callee names, resolved in the loaded module (a dotted name from the
    module's globals or builtins; `self.` / `cls.` through the enclosing class), and how many
    leading parameters the call does not pass itself (1 for `self.method` on a plain function)."""
    import builtins
    import inspect

    parts: list[str] = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name) or module is None:
        return None, 0
    parts.append(func.id)
    parts.reverse()
    skip = 0
    if parts[0] in ("self", "cls") and classes:
        obj: Any = module
        for name in classes:
            obj = getattr(obj, name, None)
        if obj is None or len(parts) != 2:
            return None, 0
        static = inspect.getattr_static(obj, parts[1], None)
        if static is None:
            return None, 0
        # self.f / cls.f pass the instance or class themselves, except to a staticmethod
        return (static.__func__ if isinstance(static, (staticmethod, classmethod)) else static), \
            0 if isinstance(static, staticmethod) else 1
    obj = vars(module).get(parts[0], getattr(builtins, parts[0], None))
    for name in parts[1:]:
        if obj is None:
            break
        try:
            obj = inspect.getattr_static(obj, name, None)
        except Exception:  # noqa: BLE001 -- an odd object: no callee known
            return None, 0
        if isinstance(obj, (staticmethod, classmethod)):
            skip = 1 if isinstance(obj, classmethod) else 0  # Class.f(...): a classmethod gets cls bound
            obj = obj.__func__
        else:
            skip = 0
    return obj, skip


def _defaulted(call: ast.Call, callee: Any, skip: int) -> list[Any]:
    """The arguments of `call` that may be left out because the callee has a default for them:
    keywords naming a defaulted parameter, and the last positional one where its parameter has one."""
    import inspect

    if callee is None or not callable(callee):
        return []
    try:
        params = list(inspect.signature(callee).parameters.values())
    except (TypeError, ValueError):
        return []
    by_name = {p.name: p for p in params}
    found: list[Any] = []
    for keyword in call.keywords:
        param = by_name.get(keyword.arg or "")
        if param is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY) \
                and param.default is not param.empty:
            found.append(keyword)
    if call.args and not any(isinstance(a, ast.Starred) for a in call.args):
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][skip:]
        at = len(call.args) - 1
        if at < len(positional) and positional[at].default is not positional[at].empty:
            found.append(call.args[-1])
    return found


def _drop_argument(src: _Source, call: ast.Call, argument: Any) -> _Edit:
    """Leave `argument` out of `call`, with the comma that separates it (line breaks kept)."""
    ordered = sorted([*call.args, *call.keywords], key=lambda a: (a.lineno, a.col_offset))
    k = next(i for i, a in enumerate(ordered) if a is argument)
    if k > 0:
        start, end = src.span(ordered[k - 1])[1], src.span(argument)[1]
    elif len(ordered) > 1:
        start, end = src.span(argument)[0], src.span(ordered[1])[0]
    elif isinstance(argument, ast.GeneratorExp):  # f(x for x in y): the call's parentheses are the genexp's
        start, end = src.span(call.func)[1], src.span(call)[1]
        return _Edit("drop-argument", argument.lineno, start, end, "(" + "\n" * src.source[start:end].count("\n") + ")", None)
    else:
        start, end = src.span(argument)[0], src.span(call)[1] - 1  # up to the closing parenthesis
    return _Edit("drop-argument", argument.lineno, start, end, "\n" * src.source[start:end].count("\n"), None)


def new_operator_edits(source: str, module: types.ModuleType | None) -> list[tuple[_Edit, Any]]:
    """Every mutant of the added operators: (edit, the node it changes, by its index in ast.walk)."""
    tree = ast.parse(source)
    src = _Source(source)
    nodes = list(ast.walk(tree))
    index = {id(n): i for i, n in enumerate(nodes)}
    classes: dict[int, list[str]] = {}

    def scope(node: Any, names: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                classes[id(child)] = names + [child.name]
                scope(child, names + [child.name])
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                classes[id(child)] = names
                scope(child, names)  # a method's nested function still sees the method's self
            else:
                classes[id(child)] = names
                scope(child, names)

    scope(tree, [])
    parent_of = {id(child): node for node in nodes for child in ast.iter_child_nodes(node)}
    edits: list[tuple[_Edit, Any]] = []

    def add(edit: _Edit, change: Any) -> None:
        edits.append((edit, change))

    for node in nodes:
        i = index[id(node)]
        if isinstance(node, ast.Compare):
            previous = node.left
            for k, (op, right) in enumerate(zip(node.ops, node.comparators)):
                swap = _SWAPS.get(type(op))
                where = src.op_between(src.span(previous)[1], src.span(right)[0], {_OP_TEXT[type(op)]}) if swap else None
                if swap and where:
                    add(_Edit("boundary", node.lineno, where[0], where[1], _OP_TEXT[swap], None),
                        lambda ns, ps, i=i, k=k, swap=swap: ns[i].ops.__setitem__(k, swap()))
                previous = right
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float) \
                and not isinstance(parent_of.get(id(node)), ast.UnaryOp):
            add(_number(src, node, node.value - 1), lambda ns, ps, i=i, v=node.value - 1: _put(ns, ps, i, _number_node(v)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
                and type(node.operand.value) in (int, float):
            # -1: mutmut makes +1 and -2; the step it lacks is -1 + 1
            value = -node.operand.value + 1
            add(_number(src, node, value), lambda ns, ps, i=i, v=value: _put(ns, ps, i, _number_node(v)))
        elif isinstance(node, ast.BoolOp):
            for k, value in enumerate(node.values):
                rest = [v for j, v in enumerate(node.values) if j != k]
                if len(rest) == 1:
                    edit = _replace_node(src, node, rest[0], "drop-operand")
                    add(edit, lambda ns, ps, i=i, keep=index[id(rest[0])]: _put(ns, ps, i, ns[keep]))
                else:  # a or b or c -> a or c
                    add(_join_operands(src, node, rest),
                        lambda ns, ps, i=i, k=k: ns[i].values.pop(k))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            add(_replace_node(src, node, node.left, "drop-operand", _message_words(node.right)),
                lambda ns, ps, i=i, keep=index[id(node.left)]: _put(ns, ps, i, ns[keep]))
            if isinstance(node.op, ast.Add):
                add(_replace_node(src, node, node.right, "drop-operand", _message_words(node.left)),
                    lambda ns, ps, i=i, keep=index[id(node.right)]: _put(ns, ps, i, ns[keep]))
        elif isinstance(node, ast.If) and not isinstance(node.test, ast.Constant) \
                and not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            for value in (True, False):
                start, end = src.span(node.test)
                lost = src.source[start:end].count("\n")
                add(_Edit("guard", node.lineno, start, end, _in_parens(str(value), lost) if lost else str(value), None),
                    lambda ns, ps, i=i, value=value: setattr(ns[i], "test", ast.Constant(value)))
        elif isinstance(node, ast.comprehension):
            for k, test in enumerate(node.ifs):
                for value in (True, False):
                    start, end = src.span(test)
                    lost = src.source[start:end].count("\n")
                    add(_Edit("guard", test.lineno, start, end, _in_parens(str(value), lost) if lost else str(value), None),
                        lambda ns, ps, i=i, k=k, value=value: ns[i].ifs.__setitem__(k, ast.Constant(value)))
        elif isinstance(node, ast.Call):
            callee, skip = _resolve_callee(node.func, module, classes.get(id(node), []))
            for argument in _defaulted(node, callee, skip):
                edit = _drop_argument(src, node, argument)
                if isinstance(argument, ast.keyword):
                    change = (lambda ns, ps, i=i, name=argument.arg:
                              setattr(ns[i], "keywords", [kw for kw in ns[i].keywords if kw.arg != name]))
                else:
                    change = lambda ns, ps, i=i: ns[i].args.pop()  # noqa: E731
                add(edit, change)
    return edits


def _put(nodes: list[Any], parents: dict[int, tuple[Any, str, int | None]], i: int, new: Any) -> None:
    """Put `new` where nodes[i] is in its parent."""
    parent, field_name, position = parents[id(nodes[i])]
    if position is None:
        setattr(parent, field_name, new)
    else:
        getattr(parent, field_name)[position] = new


def _parents(tree: Any) -> dict[int, tuple[Any, str, int | None]]:
    found: dict[int, tuple[Any, str, int | None]] = {}
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                found[id(value)] = (node, name, None)
            elif isinstance(value, list):
                for k, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        found[id(item)] = (node, name, k)
    return found


def trees_of(mutants: list[Mutant]) -> set[str]:
    """ast.dump of each mutant's source (one that does not parse, as mutmut sometimes makes: left out)."""
    found = set()
    for mutant in mutants:
        try:
            found.add(ast.dump(ast.parse(mutant.source)))
        except SyntaxError:
            pass
    return found


def new_operator_mutants(module: str, loaded: types.ModuleType | None, seen: set[str]) -> list[Mutant]:
    """The added operators' mutants of `module` that no earlier mutant made (`seen`: the trees, as
    ast.dump, of mutmut's mutants; `(-2)` and `-2` are one mutant)."""
    import copy

    path = ROOT / module
    original = path.read_text(encoding="utf-8")
    tree = ast.parse(original)
    found: list[Mutant] = []
    per_line: dict[int, int] = {}
    for edit, change in new_operator_edits(original, loaded):
        source = original[:edit.start] + edit.text + original[edit.end:]
        if source == original:
            continue
        expected = copy.deepcopy(tree)
        expected_nodes = list(ast.walk(expected))
        change(expected_nodes, _parents(expected))
        try:
            got = ast.dump(ast.parse(source))
        except SyntaxError:
            got = "does not parse"
        if got != ast.dump(expected) or source.count("\n") != original.count("\n"):
            # the text edit went wrong (an operand in parentheses of its own, ...): listed, not run
            print(f"left out: {module}:{edit.line} {edit.operator} mutant: its text edit does not give the "
                  f"changed tree ({got if got == 'does not parse' else 'another tree or other line numbers'})")
            continue
        if got in seen:
            continue
        seen.add(got)
        before, after = original.splitlines(True), source.splitlines(True)
        diff = "".join(difflib.unified_diff(before, after, f"a/{module}", f"b/{module}", n=0))
        first = next(n for n, (a, b) in enumerate(zip(before, after)) if a != b) + 1
        per_line[first] = per_line.get(first, 0) + 1
        found.append(Mutant(module, first, 1000 + per_line[first] - 1, source, diff,
                            "wording" if edit.wording else "code", operator=edit.operator))
    return found


# ---------------------------------------------------------------- a part of a module

def split_scope(spec: str) -> tuple[str, list[str], bool]:
    """`PATH`, `PATH::a,b` (only the top-level definitions a and b) or `PATH::-a,b` (all but them):
    (path, names, whether the names are left out)."""
    path, _, names = spec.partition("::")
    leave_out = names.startswith("-")
    return path, [n for n in names.lstrip("-").split(",") if n], leave_out


def scope_lines(spec: str) -> set[int] | None:
    """The lines of the module part `spec` names (None: the whole module). A name is a top-level
    function or class (decorators included) or a module-level assignment's target."""
    path, names, leave_out = split_scope(spec)
    if not names:
        return None
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    spans: dict[str, tuple[int, int]] = {}
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            spans[node.name] = (first, node.end_lineno or node.lineno)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name):
                    spans[target.id] = (first, node.end_lineno or node.lineno)
    unknown = [n for n in names if n not in spans]
    if unknown:
        raise SystemExit(f"{spec}: {', '.join(unknown)}: no top-level definition of that name in {path}")
    named = {line for n in names for line in range(spans[n][0], spans[n][1] + 1)}
    if not leave_out:
        return named
    return set(range(1, len((ROOT / path).read_text(encoding="utf-8").splitlines()) + 1)) - named


# ---------------------------------------------------------------- which function holds a line

def function_spans(path: Path) -> list[tuple[int, int, int]]:
    """(body first line, body last line, code first line) of every function in `path`; the code
    first line is what `co_firstlineno` says (the first decorator's line where decorated)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            spans.append((node.body[0].lineno, node.end_lineno or node.lineno, first))
    return spans


def enclosing(spans: list[tuple[int, int, int]], line: int) -> list[int]:
    """The code first lines of the functions whose body holds `line`, innermost first; empty where
    the line runs at import (module level, class bodies, a def's signature and decorators)."""
    holding = [s for s in spans if s[0] <= line <= s[1]]
    return [s[2] for s in sorted(holding, key=lambda s: -s[0])]


def live_functions(module: types.ModuleType, filename: str) -> dict[int, list[types.FunctionType]]:
    """The function objects of `module` by code first line: module functions, methods, static and
    class methods, properties, and what functools wrappers wrap. Nested functions are not live:
    the code object of the function around them carries theirs."""
    found: dict[int, list[types.FunctionType]] = {}
    seen: set[int] = set()

    def add(obj: Any) -> None:
        for _ in range(5):  # functools.wraps chains (lru_cache, ...)
            if id(obj) in seen:
                return
            seen.add(id(obj))
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
                continue
            if isinstance(obj, property):
                for part in (obj.fget, obj.fset, obj.fdel):
                    if part is not None:
                        add(part)
                return
            if isinstance(obj, types.FunctionType):
                if os.path.realpath(obj.__code__.co_filename) == filename:
                    found.setdefault(obj.__code__.co_firstlineno, []).append(obj)
            wrapped = getattr(obj, "__wrapped__", None)
            if wrapped is None:
                return
            obj = wrapped

    def walk_class(cls: type) -> None:
        if id(cls) in seen:
            return
        seen.add(id(cls))
        for value in list(vars(cls).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                walk_class(value)
            else:
                add(value)

    for value in list(vars(module).values()):
        if isinstance(value, type) and value.__module__ == module.__name__:
            walk_class(value)
        else:
            add(value)
    return found


def codes_by_first_line(code: types.CodeType) -> dict[tuple[int, str], types.CodeType]:
    found: dict[tuple[int, str], types.CodeType] = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found[(const.co_firstlineno, const.co_qualname)] = const
            found.update(codes_by_first_line(const))
    return found


# ---------------------------------------------------------------- serving a fresh import

class _ServeMutant(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the target module under any name (the import path may go through a symlink) and
    executes the mutated source in its place."""

    def __init__(self, target: Path, source: str) -> None:
        self.target = os.path.realpath(target)
        self.stem = target.stem
        self.source = source

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.rpartition(".")[2] != self.stem:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or os.path.realpath(spec.origin) != self.target:
            return None
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        origin = module.__spec__.origin if module.__spec__ else None
        exec(compile(self.source, origin or self.target, "exec", dont_inherit=True), module.__dict__)


def _from_checkout(module: Any) -> bool:
    file = getattr(module, "__file__", None)
    # no realpath: what loads from the checkout loads through its path (mocks/ and contracts/
    # through dsakit/'s links to them), and thousands of realpath calls cost a child 0.4 s
    return isinstance(file, str) and file.startswith(_ROOT_PREFIX) and not file.startswith(_BENCH_PREFIX)


class _InnerAutoload:
    """Plugin autoload off for the driving session only: pytester's inner runs load the installed
    plugins (xdist, pytest-split) as a user's run does."""

    def pytest_configure(self, config: Any) -> None:
        os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)


def _fresh_pytest(mutant: Mutant, tests: list[str], scratch: Path, pytester: bool = False) -> int:
    """In a forked child: forget everything imported from the checkout, serve the mutant, run pytest."""
    for name, module in list(sys.modules.items()):
        if _from_checkout(module):
            del sys.modules[name]
    sys.meta_path.insert(0, _ServeMutant(ROOT / mutant.module, mutant.source))
    import pytest

    basetemp = scratch / f"fresh-{os.getpid()}"
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return int(pytest.main(["-x", *_PYTEST_ARGS, "--rootdir", str(ROOT), "--basetemp", str(basetemp),
                            "-p", "no:terminal", *tests], plugins=[_InnerAutoload()] if pytester else []))


def _fork(run: Any, log: str) -> int:
    """Fork a child (its own process group, output to `log`) that exits with `run()`'s value."""
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.setpgid(0, 0)
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
            sys.dont_write_bytecode = True
            code = run()
        except BaseException:  # noqa: BLE001 -- whatever happens, the child must not return
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def _clear_caches(files: set[str], tables_only: bool) -> None:
    """Empty the functools caches defined in `files` (the modules under test); with `tables_only`
    only those of functions without arguments (the gate table, ...), whose one answer every later
    test would otherwise read without calling the function."""
    import inspect

    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str) or not _from_checkout(module) or os.path.realpath(file) not in files:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) or not callable(getattr(value, "cache_clear", None)):
                continue
            if tables_only:
                try:
                    if inspect.signature(value).parameters:
                        continue
                except (TypeError, ValueError):
                    continue
            value.cache_clear()


def _end_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ---------------------------------------------------------------- the pytest session that drives it

class _Profile:
    """Which functions of the target modules run, per test (sys.setprofile: call events only)."""

    def __init__(self, targets: dict[str, str]) -> None:
        self.targets = targets  # realpath -> module as named
        self._by_filename: dict[str, str | None] = {}
        self.current = "<import>"
        self.calls: dict[str, set[tuple[str, int]]] = {}

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        module = self._by_filename.get(code.co_filename, "")
        if module == "":
            module = self.targets.get(os.path.realpath(code.co_filename))
            self._by_filename[code.co_filename] = module
        if module is not None:
            self.calls.setdefault(self.current, set()).add((module, code.co_firstlineno))

    def start(self) -> None:
        sys.setprofile(self)
        threading.setprofile(self)

    def stop(self) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


class _Reports:
    def __init__(self) -> None:
        self.failed = False
        self.skipped = False
        self.seconds = 0.0

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.failed |= bool(report.failed)
        self.skipped |= bool(report.skipped)
        self.seconds += report.duration


def _run_items(session: Any, items: list[Any], stop_on_failure: bool,
               each: Any = None) -> tuple[int, dict[str, dict[str, Any]]]:
    """Run `items` through pytest's own protocol (setup, call, teardown; fixtures shared as in a
    normal run). Returns the exit code (1 on a failure) and per test: failed, skipped, seconds."""
    outcomes: dict[str, dict[str, Any]] = {}
    code = 0
    for n, item in enumerate(items):
        reports = _Reports()
        session.config.pluginmanager.register(reports)
        if each is not None:
            each(item)
        try:
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=items[n + 1] if n + 1 < len(items) else None)
        finally:
            session.config.pluginmanager.unregister(reports)
        outcomes[item.nodeid] = {"failed": reports.failed, "skipped": reports.skipped, "seconds": reports.seconds}
        if reports.failed:
            code = 1
            if stop_on_failure:
                break
    return code, outcomes


class Driver:
    """A pytest plugin: collection is pytest's; the test loop is the mutation run."""

    def __init__(self, args: argparse.Namespace, scratch: Path) -> None:
        self.args = args
        self.scratch = scratch
        self.targets = {os.path.realpath(ROOT / split_scope(m)[0]): split_scope(m)[0] for m in args.modules}
        self.profile = _Profile(self.targets)
        self.table: list[dict[str, Any]] = []
        self.mutants: list[Mutant] = []
        self.durations: dict[str, float] = {}

    def pytest_configure(self, config: Any) -> None:
        if self.args.pytester:
            _InnerAutoload().pytest_configure(config)
        self.profile.start()  # calls made while importing and collecting: "<import>"

    def pytest_runtestloop(self, session: Any) -> bool:
        self.profile.stop()
        # create the session's basetemp here, once: pytest makes it lazily, with rm -rf + mkdir, and
        # every forked child would otherwise do that itself, deleting the tmp_path of the child
        # running beside it (or failing on its mkdir): a test error, counted as a kill
        session.config._tmp_path_factory.getbasetemp()
        started = time.monotonic()
        for spec in self.args.modules:  # loaded here, so a mutant inside a function is swapped in
            path = split_scope(spec)[0]
            if path.startswith("dsakit/") and path.endswith(".py"):
                importlib.import_module(path[:-3].replace("/", ".").removesuffix(".__init__"))
        items = list(session.items)
        by_id = {item.nodeid: item for item in items}
        base = self.baseline(session, items)
        usable = [i.nodeid for i in items if i.nodeid in base["outcomes"]
                  and not base["outcomes"][i.nodeid]["failed"] and not base["outcomes"][i.nodeid]["skipped"]
                  and base["outcomes"][i.nodeid]["seconds"] <= self.args.max_test_seconds
                  and (self.args.pytester or "pytester" not in getattr(i, "fixturenames", ()))]
        failed = [t for t, o in base["outcomes"].items() if o["failed"]]
        print(f"baseline: {len(items)} tests, {len(usable)} used ({len(failed)} failed, "
              f"{sum(o['skipped'] for o in base['outcomes'].values())} skipped, the rest slower than "
              f"{self.args.max_test_seconds} s{'' if self.args.pytester else ' or pytester runs'}); "
              f"{time.monotonic() - started:.0f} s", flush=True)
        for t in failed:
            print(f"  failed in the baseline (left out): {t}", flush=True)
        calls = {t: {(m, line) for m, line in c} for t, c in base["calls"].items()}
        imported = {(m, line) for m, line in self.profile.calls.get("<import>", set())}
        durations = {t: o["seconds"] for t, o in base["outcomes"].items()}
        self.durations = durations
        gc.collect()
        gc.freeze()  # children's collections skip what the parent loaded (and copy less of it)

        wanted = {tuple(x.rsplit(":", 1)) for x in self.args.only_lines.split(",") if x}
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from mutation_triage import label  # bench/mutation_triage.py: the survivors' kinds

        for spec in self.args.modules:
            t0 = time.monotonic()
            module = split_scope(spec)[0]
            path = ROOT / module
            loaded = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None)
                      and os.path.realpath(m.__file__) == os.path.realpath(path)]
            lines = scope_lines(spec)
            if wanted:
                asked = {int(line) for name, line in wanted if name == module}
                lines = asked if lines is None else lines & asked
            mutants = mutants_of(module, lines)
            new = new_operator_mutants(module, loaded[0] if loaded else None, trees_of(mutants))
            mutants = sorted(([] if self.args.operators == "new" else mutants)
                             + ([] if self.args.operators == "mutmut" else new), key=lambda m: (m.line, m.index))
            mutants = [m for m in mutants if lines is None or m.line in lines]
            for m in mutants:
                m.scope = spec
            live: dict[int, list[Any]] = {}
            for copy in loaded:  # the same file may be loaded under two names: swap in every copy
                for first, functions in live_functions(copy, os.path.realpath(path)).items():
                    live.setdefault(first, []).extend(functions)
            spans = function_spans(path)
            plans = [self.plan(m, spans, live, calls, imported, usable) for m in mutants]
            self.run_mutants(session, mutants, plans, by_id, durations)
            for m in mutants:
                if m.verdict not in ("killed", "timeout"):
                    m.label, m.reason = label(m)
            row = summarize(spec, mutants, time.monotonic() - t0)
            self.table.append(row)
            self.mutants.extend(mutants)
            print(format_row(row), flush=True)
            self.write_json()  # after each module: a stopped run keeps what it measured
        print()
        print(format_table(self.table))
        print()
        print(format_operator_table(self.mutants))
        print(f"\n{time.monotonic() - started:.0f} s in all; load average {os.getloadavg()[0]:.1f}")
        return True

    def write_json(self) -> None:
        if self.args.json:
            self.args.json.write_text(json.dumps({
                "tests": self.args.tests, "table": self.table,
                "mutants": [{k: v for k, v in m.__dict__.items() if k != "source"} for m in self.mutants]},
                indent=1) + "\n", encoding="utf-8")

    def baseline(self, session: Any, items: list[Any]) -> dict[str, Any]:
        out = self.scratch / "baseline.json"
        log = str(self.scratch / "baseline.log")

        def run() -> int:
            profile = _Profile(self.targets)

            def each(item: Any) -> None:
                # a test counts as calling the function behind a cached table (the gate table, ...)
                # even where an earlier test filled the cache; caches taking arguments (a scan of a
                # tree) stay: emptying them would make every test rescan
                _clear_caches(set(self.targets), tables_only=True)
                profile.current = item.nodeid

            profile.start()
            _, outcomes = _run_items(session, items, stop_on_failure=False, each=each)
            profile.stop()
            out.write_text(json.dumps({"outcomes": outcomes,
                                       "calls": {t: sorted(c) for t, c in profile.calls.items()}}), encoding="utf-8")
            return 0

        pid = _fork(run, log)
        _, status = os.waitpid(pid, 0)
        _end_group(pid)
        if not out.exists():
            raise SystemExit(f"the baseline run died (status {status}):\n{Path(log).read_text(errors='replace')[-4000:]}")
        return dict(json.loads(out.read_text(encoding="utf-8")))

    def plan(self, mutant: Mutant, spans: list[tuple[int, int, int]], live: dict[int, list[Any]],
             calls: dict[str, set[tuple[str, int]]], imported: set[tuple[str, int]],
             usable: list[str]) -> tuple[str, list[str], Any]:
        """(route, tests, swap): which tests to run and how the child applies the mutant."""
        holders = enclosing(spans, mutant.line)
        # a fresh run stops at its first failure too (-x): fastest first there as well
        usable = sorted(usable, key=lambda t: self.durations.get(t, 1.0))
        if not holders:
            return "fresh", usable, None
        key = (mutant.module, holders[0])
        # fastest first: a child stops at the first failure, so a killed mutant mostly costs its
        # fastest test; a survivor runs them all either way
        tests = sorted((t for t in usable if key in calls.get(t, set())), key=lambda t: self.durations.get(t, 1.0))
        if not tests:
            return ("fresh", usable, None) if key in imported else ("none", [], None)
        same_lines = mutant.source.count("\n") == (ROOT / mutant.module).read_text(encoding="utf-8").count("\n")
        outer = next((first for first in reversed(holders) if first in live), None) if same_lines else None
        if outer is None:
            return "fresh", usable, None
        try:
            code = compile(mutant.source, live[outer][0].__code__.co_filename, "exec", dont_inherit=True)
        except SyntaxError:
            return "fresh", usable, None
        new = codes_by_first_line(code).get((outer, live[outer][0].__code__.co_qualname))
        if new is None:
            return "fresh", usable, None
        return "swap", tests, (live[outer], new)

    def run_mutants(self, session: Any, mutants: list[Mutant], plans: list[tuple[str, list[str], Any]],
                    by_id: dict[str, Any], durations: dict[str, float]) -> None:
        running: dict[int, tuple[int, float, float, str]] = {}  # pid -> (mutant, start, timeout, log)
        queue = list(range(len(mutants)))
        while queue or running:
            while queue and len(running) < self.args.jobs:
                n = queue.pop(0)
                mutant, (route, tests, swap) = mutants[n], plans[n]
                mutant.route, mutant.tests_run = route, len(tests)
                if route == "none":
                    mutant.verdict = "no test"
                    self.progress(mutant)
                    continue
                log = str(self.scratch / f"m{n}.log")

                def run(mutant: Mutant = mutant, route: str = route, tests: list[str] = tests,
                        swap: Any = swap) -> int:
                    if route == "fresh":
                        return _fresh_pytest(mutant, tests, self.scratch, self.args.pytester)
                    functions, code = swap
                    for function in functions:
                        function.__code__ = code
                    _clear_caches(set(self.targets), tables_only=False)  # no answer cached from the original code
                    return _run_items(session, [by_id[t] for t in tests], stop_on_failure=True)[0]

                # generous: on 2 loaded cores a child running 160 tests has taken 30 s; a timeout
                # counts as killed, so a tight one would inflate the score
                timeout = 30.0 + 10.0 * sum(durations.get(t, 1.0) for t in tests) + (20.0 if route == "fresh" else 0.0)
                running[_fork(run, log)] = (n, time.monotonic(), timeout, log)
            time.sleep(0.005)
            for pid, (n, start, timeout, log) in list(running.items()):
                finished, status = os.waitpid(pid, os.WNOHANG)
                elapsed = time.monotonic() - start
                if finished == 0:
                    if elapsed <= timeout:
                        continue
                    _end_group(pid)
                    os.waitpid(pid, 0)
                    verdict = "timeout"
                else:
                    _end_group(pid)  # whatever the tests left running
                    code = os.waitstatus_to_exitcode(status)
                    # 1: a test failed; 2-4: the mutant broke collection, a conftest or the plugin's
                    # import; 3 is also the child's own crash code; < 0: it crashed the interpreter
                    verdict = "survived" if code == 0 else "killed" if code in (1, 2, 3, 4) or code < 0 else f"exit {code}"
                del running[pid]
                mutants[n].verdict = verdict
                mutants[n].seconds = round(elapsed, 2)
                if verdict != "survived" and not verdict.startswith("exit"):
                    os.unlink(log) if os.path.exists(log) else None
                self.progress(mutants[n])

    def progress(self, m: Mutant) -> None:
        if m.verdict not in ("killed", "timeout"):
            print(f"{m.verdict:8s} {m.module}:{m.line} #{m.index} ({m.operator}, {m.kind}, {m.route}, {m.tests_run} tests, "
                  f"{m.seconds:.1f} s)\n{m.diff}", flush=True)


# ---------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="source files to mutate, relative to the checkout root")
    parser.add_argument("--tests", nargs="+", default=[], help="the focused test files or node ids")
    parser.add_argument("--group", choices=sorted(GROUPS), default=None,
                        help="a group of core modules with its focused tests (instead of MODULES --tests)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--max-test-seconds", type=float, default=3.0,
                        help="leave out tests slower than this in the baseline (subprocess runs: "
                             "they never see the mutant anyway)")
    parser.add_argument("--json", type=Path, default=None, help="write every verdict here")
    parser.add_argument("--only-lines", default="", help="MODULE:LINE,... re-test only these mutants")
    parser.add_argument("--operators", choices=("all", "mutmut", "new"), default="all",
                        help="mutmut 2's operators, the added ones (boundary, constant, drop-operand, guard, "
                             "drop-argument), or both")
    parser.add_argument("--pytester", action="store_true",
                        help="use pytester tests too (their in-process runs reach the mutant; a group in "
                             "PYTESTER_GROUPS sets this)")
    parser.add_argument("--table-from", nargs="+", type=Path, default=None, metavar="JSON",
                        help="print one table from earlier --json files (a later file's verdict wins), "
                             "survivors labelled by today's bench/mutation_triage.py")
    args = parser.parse_args(argv)
    if args.table_from:
        print(table_from(args.table_from))
        return 0
    if args.group:
        if args.modules or args.tests:
            parser.error("--group names the modules and tests itself: give either --group or MODULES --tests")
        args.modules, args.tests = GROUPS[args.group]
        args.pytester = args.pytester or args.group in PYTESTER_GROUPS
    elif not args.modules or not args.tests:
        parser.error("name the modules to mutate and --tests, or a --group")
    for module in args.modules:
        if not (ROOT / split_scope(module)[0]).is_file():
            parser.error(f"{module}: no such file in {ROOT}; name a module by its path in the checkout")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    os.chdir(ROOT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    import pytest

    with tempfile.TemporaryDirectory(prefix="dsakit-mutation-") as scratch_dir:
        scratch = Path(scratch_dir)
        driver = Driver(args, scratch)
        code = pytest.main([*_PYTEST_ARGS, "-s", "--rootdir", str(ROOT), "--basetemp", str(scratch / "basetemp"),
                            *args.tests], plugins=[driver])
        if not driver.table:
            print(f"pytest exited {code} before the mutation run", file=sys.stderr)
            return 2
    return 0


def table_from(files: list[Path]) -> str:
    """One table from earlier runs: a mutant's verdict in a later file wins (a re-test of the
    survivors with --only-lines after adding tests), its module's seconds add up."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from mutation_triage import label

    verdicts: dict[str, dict[tuple[int, int], Mutant]] = {}
    seconds: dict[str, float] = {}
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        for row in data["table"]:
            seconds[row["module"]] = seconds.get(row["module"], 0.0) + row["seconds"]
        for record in data["mutants"]:
            mutant = Mutant(**{**record, "source": ""})
            verdicts.setdefault(mutant.scope or mutant.module, {})[(mutant.line, mutant.index)] = mutant
    rows = []
    for module, found in verdicts.items():
        for mutant in found.values():
            mutant.label, mutant.reason = ("", "") if mutant.verdict in ("killed", "timeout") else label(mutant)
        rows.append(summarize(module, list(found.values()), seconds[module]))
    return format_table(rows) + "\n\n" + format_operator_table([m for found in verdicts.values() for m in found.values()])


def summarize(module: str, mutants: list[Mutant], seconds: float) -> dict[str, Any]:
    killed = sum(m.verdict in ("killed", "timeout") for m in mutants)
    survivors = [m for m in mutants if m.verdict not in ("killed", "timeout")]
    kinds = {k: sum(m.label == k for m in survivors) for k in ("wording", "equivalent", "real")}
    counted = len(mutants) - kinds["equivalent"]
    return {"module": module, "mutants": len(mutants), "killed": killed,
            "timeouts": sum(m.verdict == "timeout" for m in mutants), **kinds,
            "score": round(100 * killed / counted, 1) if counted else 100.0,
            "seconds": round(seconds), "per_mutant_s": round(seconds / max(1, len(mutants)), 2)}


def format_row(row: dict[str, Any]) -> str:
    name = row["module"] if row["module"].startswith("**") else f"`{row['module']}`"
    return (f"| {name} | {row['mutants']} | {row['killed']} ({row.get('timeouts', 0)} timeouts) | {row['wording']} | "
            f"{row['equivalent']} | {row['real']} | {row['score']}% | {row['per_mutant_s']} s |")


def format_operator_table(mutants: list[Mutant]) -> str:
    """The same counts per operator family (mutmut's together)."""
    head = ("| operator | mutants | killed | survived | equivalent | score |\n"
            "|---|---|---|---|---|---|")
    rows = []
    for operator in ("mutmut", *NEW_OPERATORS):
        of = [m for m in mutants if m.operator == operator]
        if of:
            row = summarize(operator, of, 0.0)
            rows.append(f"| {operator} | {row['mutants']} | {row['killed']} | {row['wording'] + row['real']} | "
                        f"{row['equivalent']} | {row['score']}% |")
    return "\n".join([head, *rows])


def format_table(rows: list[dict[str, Any]]) -> str:
    head = ("| module | mutants | killed | wording left | equivalent | real left | score | s / mutant |\n"
            "|---|---|---|---|---|---|---|---|")
    total: dict[str, Any] = {"module": "**total**", "mutants": sum(r["mutants"] for r in rows),
                             "killed": sum(r["killed"] for r in rows), "timeouts": sum(r.get("timeouts", 0) for r in rows),
                             **{k: sum(r[k] for r in rows) for k in ("wording", "equivalent", "real")}}
    counted = total["mutants"] - total["equivalent"]
    total["score"] = round(100 * total["killed"] / counted, 1) if counted else 100.0
    total["per_mutant_s"] = round(sum(r["seconds"] for r in rows) / max(1, total["mutants"]), 2)
    return "\n".join([head, *(format_row(r) for r in rows), format_row(total)])


if __name__ == "__main__":
    sys.exit(main())
