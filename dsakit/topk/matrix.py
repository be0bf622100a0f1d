"""Target/draft DSA top-k backend matrices: cells, subsets, ids, pytest parameters and scopes.

Owns: `TopkCell` (one role under one flag configuration) and its id, the subsets (full, per-role,
pairwise covering array), invalid-cell handling, a cell's gates and the `topk_cell`
parametrization. Never imports torch or SGLang at collection; must not ask SGLang what a cell
resolves to (`dsakit.topk.resolve` does).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from dsakit.contracts.schema import Role
from dsakit.errors import UsageError
from dsakit.reasons import Reason
from dsakit.topk.backends import topk_backend
from dsakit.topk.flags import DRAFT_FIELD, FUSE_FLAG, TARGET_FIELD, V2_FLAG, TopkFlags, topk_flags
from dsakit.topk.rules import ROLES, Expectation, TopkConfig, expect

if TYPE_CHECKING:
    from dsakit.stack.sglang_release import SGLangRelease
    from dsakit.sglang_facts.scope import SGLangScope

SUBSETS = ("full", "per-role", "pairwise")
DEFAULT_SUBSET = "pairwise"
INVALID_MODES = ("skip", "drop", "keep")
MARKER = "dsakit_topk_matrix"
FIXTURE = "topk_cell"


class InvalidTopkCell(UsageError):
    """A cell whose configuration cannot be served; `reasons` says why (stable codes)."""

    def __init__(self, cell: TopkCell, reasons: Sequence[Reason]) -> None:
        self.cell = cell
        self.reasons = tuple(reasons)
        super().__init__(
            f"invalid DSA top-k configuration {cell.id}: "
            + "; ".join(str(r) for r in self.reasons)
            + " (refused before any kernel runs)"
        )


def _token(backend: str) -> str:
    return backend.replace("-", "_")


@dataclass(frozen=True)
class TopkCell:
    """One role under one top-k configuration, on one release (`flags`)."""

    role: str
    config: TopkConfig
    flags: TopkFlags = field(compare=False, repr=False, hash=False)

    # ------------------------------------------------------------ naming

    @property
    def target(self) -> str:
        return self.config.target

    @property
    def draft(self) -> str:
        return self.config.draft

    @property
    def fused(self) -> bool:
        return self.config.fused

    @property
    def v2(self) -> bool:
        return self.config.v2

    @property
    def config_id(self) -> str:
        c = self.config
        return (f"target-{_token(c.target)}/draft-{_token(c.draft)}-"
                f"{'fused' if c.fused else 'unfused'}-{'v2' if c.v2 else 'nov2'}")

    @property
    def id(self) -> str:
        return f"{self.role}@{self.config_id}"

    def __str__(self) -> str:
        return self.id

    # ------------------------------------------------------------ the oracle

    @property
    def expectation(self) -> Expectation:
        return expect(self.role, self.config, self.flags)

    @property
    def expected_backend(self) -> str:
        return self.expectation.backend

    @property
    def valid(self) -> bool:
        return self.expectation.valid

    @property
    def reasons(self) -> tuple[Reason, ...]:
        """Why the cell is invalid (empty when valid)."""
        return self.expectation.invalid

    @property
    def gates(self) -> tuple[str, ...]:
        """Gate codes the selection check of the expected backend needs (its `TopkBackend` record's;
        a backend with no record is a UsageError naming it and the known ones)."""
        return topk_backend(self.expected_backend).gates

    # ------------------------------------------------------------ applying it

    def server_args(self) -> dict[str, str]:
        """The ServerArgs fields this cell sets; the draft flag only where the release has it."""
        args = {TARGET_FIELD: self.target}
        if self.flags.has_split:
            args[DRAFT_FIELD] = self.draft
        return args

    def env(self) -> dict[str, bool]:
        return {FUSE_FLAG: self.fused, V2_FLAG: self.v2}

    def check(self) -> None:
        """Raise `InvalidTopkCell` (with its reasons) unless the configuration can be served."""
        if not self.valid:
            raise InvalidTopkCell(self, self.reasons)

    def scope(self, *, allow_invalid: bool = False) -> SGLangScope:
        """An `SGLangScope` applying this cell (server args through the runtime context, env
        flags, one-GPU topology), restored on exit even when the body raises. Invalid cells are
        refused here, before anything is applied, unless `allow_invalid` (then a draft flag the
        release lacks is simply not set: the pre-split rule decides)."""
        if not allow_invalid:
            self.check()
        from dsakit.sglang_facts.scope import SGLangScope

        return SGLangScope(server_args=self.server_args(), env=self.env())

    # ------------------------------------------------------------ pytest

    def param(self, *, gated: bool = True, invalid: str = "skip") -> Any:
        """`pytest.param(cell, id=cell.id, marks=...)`: gates for the backend's selection check
        when `gated`, a skip carrying the invalid reasons when `invalid == "skip"`."""
        from dsakit.gates import marks as gate_marks

        marks: list[Any] = []
        if not self.valid and invalid == "skip":
            from dsakit.gates.inventory import format_reasons

            marks.append(pytest.mark.skip(reason=format_reasons(self.reasons)))
        elif gated and self.gates:
            marks.append(gate_marks.gate(*self.gates))
        return pytest.param(self, id=self.id, marks=marks)


# ---------------------------------------------------------------- building cells


def _check_backend(name: str, flags: TopkFlags, field_name: str) -> str:
    choices = flags.target.choices if field_name == TARGET_FIELD or flags.draft is None else flags.draft.choices
    if name not in choices and name.replace("_", "-") in choices:
        name = name.replace("_", "-")  # the id spelling (sgl_kernel)
    if name not in choices:
        raise UsageError(
            f"{name} is not a top-k backend of SGLang {flags.version}; choices: {', '.join(choices)}"
            + (f" (flag --{field_name.replace('_', '-')})" if field_name == DRAFT_FIELD else "")
        )
    return name


def _defaults(flags: TopkFlags) -> tuple[str, str | None]:
    target = flags.target.default or flags.target.choices[0]
    draft = (flags.draft.default or flags.draft.choices[0]) if flags.draft is not None else None
    return target, draft


def topk_cell(
    role: str,
    target: str | None = None,
    draft: str | None = None,
    *,
    fused: bool = True,
    v2: bool = True,
    release: SGLangRelease | None = None,
) -> TopkCell:
    """One cell, names checked against the release's choices. `target` defaults to the flag's
    default; `draft` to its own default on a split release, to `target` before the split."""
    flags = topk_flags(release)
    default_target, default_draft = _defaults(flags)
    target = _check_backend(target or default_target, flags, TARGET_FIELD)
    if draft is None:
        draft = default_draft if flags.has_split and default_draft else target
    draft = _check_backend(draft, flags, DRAFT_FIELD)
    return TopkCell(Role.parse(role).value, TopkConfig(target, draft, bool(fused), bool(v2)), flags)


def _full(flags: TopkFlags, roles: Sequence[str]) -> list[TopkCell]:
    drafts = flags.choices("draft")
    return [
        TopkCell(role, TopkConfig(t, d, fused, v2), flags)
        for role, t, d, fused, v2 in itertools.product(
            roles, flags.choices("target"), drafts, (True, False), (True, False))
    ]


def _per_role(flags: TopkFlags, roles: Sequence[str]) -> list[TopkCell]:
    """Each role's own flag varied over its choices, the other flag at its default."""
    default_target, default_draft = _defaults(flags)
    cells = []
    for role in roles:
        for backend, fused, v2 in itertools.product(flags.choices(role), (True, False), (True, False)):
            if role == "target":
                draft = default_draft if flags.has_split and default_draft else backend
                config = TopkConfig(backend, draft, fused, v2)
            else:
                config = TopkConfig(default_target, backend, fused, v2)
            cells.append(TopkCell(role, config, flags))
    return cells


def _factors(cell: TopkCell) -> tuple[object, ...]:
    c = cell.config
    return (cell.role, c.target, c.draft, c.fused, c.v2)


def _pairs(cell: TopkCell) -> frozenset[tuple[int, object, int, object]]:
    values = _factors(cell)
    return frozenset((i, values[i], j, values[j]) for i, j in itertools.combinations(range(len(values)), 2))


def _pairwise(flags: TopkFlags, roles: Sequence[str], invalid: str) -> list[TopkCell]:
    """A greedy all-pairs covering array over (role, target, draft, fusion, v2), chosen from the
    valid cells (every pair some valid cell has is covered), ties broken by product order, so
    the same release always gets the same cells. Unless invalid cells are dropped, one invalid
    cell per (reason code, role) is added so each rule of the table is exercised."""
    full = _full(flags, roles)
    order = {cell: index for index, cell in enumerate(full)}
    candidates = [cell for cell in full if cell.valid]
    uncovered: set[tuple[int, object, int, object]] = set()
    for cell in candidates:
        uncovered |= _pairs(cell)
    chosen: list[TopkCell] = []
    while uncovered:
        best = max(candidates, key=lambda cell: len(_pairs(cell) & uncovered))
        chosen.append(best)
        uncovered -= _pairs(best)
    if invalid != "drop":
        seen: set[tuple[str, str]] = set()
        for cell in full:
            keys = {(r.code, cell.role) for r in cell.reasons} - seen
            if keys:
                seen |= keys
                if cell not in chosen:
                    chosen.append(cell)
    return sorted(chosen, key=order.__getitem__)


def _check_choice(value: str, allowed: Sequence[str], what: str) -> str:
    if value not in allowed:
        raise UsageError(f"unknown {what} {value!r}; choose one of: {', '.join(allowed)}")
    return value


def topk_cells(
    subset: str = "full",
    *,
    roles: Iterable[str] = ROLES,
    invalid: str = "keep",
    release: SGLangRelease | None = None,
) -> list[TopkCell]:
    """The matrix cells of `subset` for the installed release (or `release`), in product order
    (role, target, draft, fused before unfused, v2 before nov2). `invalid="drop"` removes
    invalid cells; "keep" and "skip" keep them (they carry their reasons)."""
    _check_choice(subset, SUBSETS, "top-k matrix subset")
    _check_choice(invalid, INVALID_MODES, "invalid-cell mode")
    role_list = [Role.parse(r).value for r in roles]
    flags = topk_flags(release)
    if subset == "full":
        cells = _full(flags, role_list)
    elif subset == "per-role":
        cells = _per_role(flags, role_list)
    else:
        cells = _pairwise(flags, role_list, invalid)
    if invalid == "drop":
        cells = [cell for cell in cells if cell.valid]
    return cells


# ---------------------------------------------------------------- pytest wiring


def topk_matrix(
    subset: str | None = None,
    *,
    roles: Iterable[str] | None = None,
    invalid: str = "skip",
    gated: bool = True,
) -> pytest.MarkDecorator:
    """`@dsakit.topk_matrix(subset="pairwise")`: parametrize the test's `topk_cell` fixture.

    subset   full | per-role | pairwise (default; `--dsakit-topk-subset` overrides it for a run)
    roles    restrict to some roles (default both, intersected with `--dsakit-roles`)
    invalid  skip (default: a skip naming the reasons) | drop | keep (the test sees the cell)
    gated    mark GPU-only backends with their gates (off for checks that need no GPU)
    """
    if subset is not None:
        _check_choice(subset, SUBSETS, "top-k matrix subset")
    _check_choice(invalid, INVALID_MODES, "invalid-cell mode")
    kwargs: dict[str, Any] = {"invalid": invalid, "gated": bool(gated)}
    if subset is not None:
        kwargs["subset"] = subset
    if roles is not None:
        kwargs["roles"] = tuple(Role.parse(r).value for r in roles)
    decorator: pytest.MarkDecorator = getattr(pytest.mark, MARKER)(**kwargs)
    return decorator


def parametrize(metafunc: pytest.Metafunc, run_subset: str | None, run_roles: str) -> None:
    """pytest_generate_tests: parametrize `topk_cell` from the closest marker and the run's options
    (`run_subset`: --dsakit-topk-subset, None when not given; `run_roles`: --dsakit-roles)."""
    from dsakit.contracts.schema import parse_roles

    marker = metafunc.definition.get_closest_marker(MARKER)
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    if marker is not None and marker.args:
        options.setdefault("subset", marker.args[0])
    try:
        subset = run_subset or options.get("subset") or DEFAULT_SUBSET
        roles = [r for r in options.get("roles", ROLES) if r in parse_roles(run_roles)]
        invalid = options.get("invalid", "skip")
        gated = bool(options.get("gated", True))
        params = [cell.param(gated=gated, invalid=invalid) for cell in topk_cells(subset, roles=roles, invalid=invalid)]
    except UsageError as error:  # a bad subset or role, a backend with no record
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {error}") from None
    metafunc.parametrize(FIXTURE, params)


def scoped(cell: TopkCell, node: pytest.Item | None = None) -> Iterator[TopkCell]:
    """The `topk_scope` fixture body: record the oracle on the test report, apply the cell."""
    exp = cell.expectation
    if node is not None:
        node.user_properties.extend([
            ("dsakit_topk_cell", cell.id),
            ("dsakit_topk_rule", exp.rule),
            ("dsakit_topk_expected", exp.backend),
            ("dsakit_topk_transform", exp.transform),
            ("dsakit_topk_reasons", [r.as_dict() for r in exp.invalid + exp.notes]),
        ])
    with cell.scope():
        yield cell


def format_table(cells: Sequence[TopkCell], outcomes: dict[str, str] | None = None) -> list[str]:
    """A plain-text table: cell id, rule, expected backend, transform, reason codes[, outcome]."""
    rows = []
    for cell in cells:
        exp = cell.expectation
        codes = ",".join(r.code for r in exp.invalid) or "-"
        notes = ",".join(r.code for r in exp.notes) or "-"
        row = [cell.id, exp.rule, exp.backend, exp.transform, codes, notes]
        if outcomes is not None:
            row.append(outcomes.get(cell.id, "?"))
        rows.append(row)
    head = ["cell", "rule", "expects", "transform", "invalid", "notes"] + (["outcome"] if outcomes is not None else [])
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    return ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
