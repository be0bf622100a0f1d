"""Which simulated devices a guarded SGLang read fires on: partial evaluation of the guard.

Owns the evaluation of an `if` condition (source text, from `backend_reads.RunnerRead.guard`) on
one `DeviceModel`: device probes (the spellings of `dsakit.audit.device_guards`) become the device
table's answers, what is left is configuration. Configuration counts as *off by default*: flags false, `== 'choice'` false,
`is None` true. Never imports torch or SGLang.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dsakit.audit.device_guards import spelling_for
from dsakit.gates.device_model import DeviceModel


@dataclass(frozen=True)
class _Known:
    value: Any


_Partial = _Known | ast.expr  # a value, or the configuration-dependent rest of the expression

_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}


def _partial(node: ast.expr, device: DeviceModel) -> _Partial:
    known = spelling_for(node)
    if known is not None:
        return _Known(known.value(device))
    if isinstance(node, ast.Constant):
        return _Known(node.value)
    if isinstance(node, ast.Tuple):
        items = [_partial(e, device) for e in node.elts]
        if all(isinstance(i, _Known) for i in items):
            return _Known(tuple(i.value for i in items if isinstance(i, _Known)))
        return node
    if isinstance(node, ast.Subscript):
        base, index = _partial(node.value, device), _partial(node.slice, device)
        if isinstance(base, _Known) and isinstance(index, _Known):
            try:
                return _Known(None if base.value is None else base.value[index.value])
            except (TypeError, IndexError, KeyError):
                return node
        return node
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = _partial(node.operand, device)
        if isinstance(operand, _Known):
            return _Known(not operand.value)
        return ast.UnaryOp(op=ast.Not(), operand=operand)
    if isinstance(node, ast.BoolOp):
        return _bool_op(node, device)
    if isinstance(node, ast.Compare) and len(node.ops) > 1:  # `a <= b < c`: every link holds
        operands = [node.left, *node.comparators]
        links: list[ast.expr] = [ast.Compare(left=operands[i], ops=[op], comparators=[operands[i + 1]])
                                 for i, op in enumerate(node.ops)]
        return _bool_op(ast.BoolOp(op=ast.And(), values=links), device)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = _partial(node.left, device), _partial(node.comparators[0], device)
        if isinstance(left, _Known) and isinstance(right, _Known):
            if (left.value is None or right.value is None) and not isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                return _Known(False)  # no capability (CPU): every SM comparison is false
            try:
                return _Known(bool(_COMPARE[type(node.ops[0])](left.value, right.value)))
            except TypeError:
                if isinstance(node.ops[0], _ORDER) and (_holds_none(left.value) or _holds_none(right.value)):
                    return _Known(False)  # SGLang's (None, None) capability without a GPU: no SM branch
                return node
        return node
    return node


_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _holds_none(value: Any) -> bool:
    return value is None or isinstance(value, tuple) and any(item is None for item in value)


def _bool_op(node: ast.BoolOp, device: DeviceModel) -> _Partial:
    conjunction = isinstance(node.op, ast.And)
    rest: list[ast.expr] = []
    for value in node.values:
        part = _partial(value, device)
        if isinstance(part, _Known):
            if bool(part.value) != conjunction:  # a false conjunct or a true disjunct decides
                return _Known(not conjunction)
            continue
        rest.append(part)
    if not rest:
        return _Known(conjunction)
    return rest[0] if len(rest) == 1 else ast.BoolOp(op=node.op, values=rest)


def holds_by_default(node: ast.expr) -> bool:
    """A configuration condition under the default configuration: every opt-in off."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not holds_by_default(node.operand)
    if isinstance(node, ast.BoolOp):
        values = [holds_by_default(v) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op, right = node.ops[0], node.comparators[0]
        against_none = isinstance(right, ast.Constant) and right.value is None
        if isinstance(op, ast.Is):
            return against_none
        if isinstance(op, ast.IsNot):
            return not against_none
        return isinstance(op, (ast.NotEq, ast.NotIn))
    return False


@dataclass(frozen=True)
class DeviceVerdict:
    """Whether a guarded read fires on one device.

    fires      it fires in the default configuration (unconditionally, or on this device's branch)
    condition  when it does not fire by default but could: the configuration it needs ("" otherwise)
    """

    device: str
    fires: bool
    condition: str = ""


def verdict(guard: str, key: str, device: DeviceModel) -> DeviceVerdict:
    """The verdict of a guard ("" = unconditional) on one device."""
    if not guard:
        return DeviceVerdict(key, True)
    part = _partial(ast.parse(guard, mode="eval").body, device)
    if isinstance(part, _Known):
        return DeviceVerdict(key, bool(part.value))
    if holds_by_default(part):
        return DeviceVerdict(key, True)
    return DeviceVerdict(key, False, _needed(part))


def decided(guard: str, device: DeviceModel) -> bool | None:
    """The guard's value when `device` alone decides it; None when configuration is left."""
    part = _partial(ast.parse(guard, mode="eval").body, device)
    return bool(part.value) if isinstance(part, _Known) else None


def _needed(rest: ast.expr) -> str:
    """The configuration a read needs, without the conjuncts that hold by default anyway."""
    if isinstance(rest, ast.BoolOp) and isinstance(rest.op, ast.And):
        kept = [v for v in rest.values if not holds_by_default(v)]
        if kept:
            rest = kept[0] if len(kept) == 1 else ast.BoolOp(op=ast.And(), values=kept)
    return ast.unparse(rest)


def verdicts(guard: str, devices: dict[str, DeviceModel]) -> list[DeviceVerdict]:
    return [verdict(guard, key, device) for key, device in devices.items()]
