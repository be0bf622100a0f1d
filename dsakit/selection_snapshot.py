"""Golden top-k selections as syrupy snapshots, keyed by CASE so every backend meets one golden.

Owns: `SelectionSnapshotExtension` (a syrupy 7 amber-format extension: one file per test module at
`__snapshots__/<module>/selections.topksel`, snapshot name `<test function>[<case id>]`, so the
backend/path part of the test id never reaches the key), `summarize_selection` (the text stored)
and `SelectionSnapshot` (what the `selection_snapshot` fixture returns).

What is stored is small and independent of k: the case's shape, a digest of its input scores
(pins the seeded generator), a digest of the *normalized* selection and the first rows spelled
out. Normalization (`dsakit.topk_compare.normalized_rows`) keeps only what every valid top-k of
the same scores shares: positions strictly above the lowest selected score, that boundary score
and the number of tied picks on it; -inf picks are dropped and NaN rows are marked, not compared.
A backend that picks another member of a tied group therefore serializes to the same text, while
a wrong index changes the digest. No device or tensor repr is ever written.

Goldens are written only by the reference path (`reference=True`); under --snapshot-update other
paths compare against the stored golden instead of rewriting it. xdist safety and unused-snapshot
detection come from syrupy's amber machinery (locked read-modify-write under workers). Never
imports torch at module level.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.extensions.amber import AmberDataSerializer, AmberSnapshotExtension

from dsakit.topk_compare import assert_topk_valid, normalized_rows

if TYPE_CHECKING:
    from syrupy.assertion import SnapshotAssertion
    from syrupy.location import PyTestLocation
    from syrupy.types import SerializableData, SnapshotIndex

    from dsakit.topk_cases import TopkCase

HEAD_ROWS = 2  # rows spelled out in the golden
HEAD_POSITIONS = 6  # positions shown per spelled-out row
DIGEST_ROWS = 16  # rows with their own short digest (the rest only in selection_sha256)


class SelectionSummary(str):
    """The serialized form: a str so syrupy's comparison and amber's writer take it as is."""


class SelectionSnapshotExtension(AmberSnapshotExtension):
    file_extension = "topksel"

    @classmethod
    def dirname(cls, *, test_location: PyTestLocation) -> str:
        test_dir = Path(test_location.filepath).parent
        return str(test_dir / "__snapshots__" / test_location.basename)

    @classmethod
    def get_file_basename(cls, *, test_location: PyTestLocation, index: SnapshotIndex) -> str:
        return "selections"

    @classmethod
    def get_snapshot_name(cls, *, test_location: PyTestLocation, index: SnapshotIndex = 0) -> str:
        # keyed by the function (not its parametrization) and the case id passed as `name=`
        owner = test_location.methodname
        if test_location.classname:
            owner = f"{test_location.classname}.{owner}"
        return f"{owner}[{index}]" if isinstance(index, str) else f"{owner}.{index}"

    @classmethod
    def matches_test_location(cls, *, test_location: PyTestLocation, snapshot_location: str) -> bool:
        loc = Path(snapshot_location)
        return (loc.parent.name == test_location.basename
                and test_location.matches_snapshot_site(snapshot_location))

    def serialize(self, data: SerializableData, **kwargs: Any) -> str:
        if not isinstance(data, str):
            raise TypeError("selection snapshots store summarize_selection(...) text; use the "
                            "selection_snapshot fixture rather than asserting tensors directly")
        return str(data)


def _sha(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def summarize_selection(case_id: str, positions: Any, scores: Any, lengths: Any, k: int, *,
                        row_starts: Any = None) -> SelectionSummary:
    """The golden text of one case's selection (row-local positions, -1 padded)."""
    import torch

    sc = torch.as_tensor(scores).detach().to("cpu", torch.float32).contiguous()
    lens = [int(x) for x in torch.as_tensor(lengths).detach().cpu().tolist()]
    rows = normalized_rows(positions, sc, lens, row_starts=row_starts)
    lines = [
        f"case: {case_id}",
        f"rows: {len(lens)}  width: {sc.shape[1]}  k: {k}",
        "lengths: " + (str(lens) if len(lens) <= DIGEST_ROWS else _sha(str(lens).encode())),
        # the buffer itself, not a .tobytes() copy: same digest, half the time on 1M-token rows
        "scores_sha256: " + _sha(memoryview(sc.numpy()).cast("B")),
        "selection_sha256: " + _sha("\n".join(r.line() for r in rows).encode()),
    ]
    if row_starts is not None:
        lines.insert(3, "row_starts: " + str([int(x) for x in torch.as_tensor(row_starts).tolist()]))
    lines += [r.line(head=HEAD_POSITIONS) for r in rows[:HEAD_ROWS]]
    if len(rows) > HEAD_ROWS:
        tail = rows[HEAD_ROWS:DIGEST_ROWS]
        lines.append(f"rows {HEAD_ROWS}..{HEAD_ROWS + len(tail) - 1}: "
                     + " ".join(r.digest() for r in tail))
    return SelectionSummary("\n".join(lines))


class SelectionSnapshot:
    """Returned by the `selection_snapshot` fixture."""

    def __init__(self, snapshot: SnapshotAssertion) -> None:
        self._snapshot = snapshot.use_extension(SelectionSnapshotExtension)

    @property
    def updating(self) -> bool:
        return bool(self._snapshot.update_snapshots)

    def assert_selection(self, case_id: str, positions: Any, scores: Any, lengths: Any, k: int, *,
                         row_starts: Any = None, reference: bool = False,
                         nan_slot_filler: bool = False) -> None:
        """Check validity (readable per-row diff), then match the golden stored under `case_id`.
        `nan_slot_filler`: the path's kernel may fill NaN-cost slots with position == slot (the
        v2 JIT); NaN rows are not part of the golden, so only the validity check reads it."""
        __tracebackhide__ = True
        assert_topk_valid(positions, scores, lengths, k, row_starts=row_starts,
                          nan_slot_filler=nan_slot_filler)
        summary = summarize_selection(case_id, positions, scores, lengths, k, row_starts=row_starts)
        if self.updating and not reference:
            self._compare_without_writing(case_id, summary)
            return
        assert self._snapshot(name=case_id) == summary

    def assert_case(self, case: TopkCase, positions: Any, *, reference: bool = False,
                    nan_slot_filler: bool = False) -> None:
        __tracebackhide__ = True
        self.assert_selection(case.case_id, positions, case.scores("cpu"), case.lengths, case.k,
                              row_starts=case.row_starts, reference=reference,
                              nan_slot_filler=nan_slot_filler)

    def _compare_without_writing(self, case_id: str, summary: str) -> None:
        __tracebackhide__ = True
        ext = self._snapshot.extension
        loc = self._snapshot.test_location
        location = ext.get_location(test_location=loc, index=case_id)
        name = ext.get_snapshot_name(test_location=loc, index=case_id)
        stored = AmberDataSerializer.read_file(location).get(name) if Path(location).is_file() else None
        if stored is None or stored.data is None:
            pytest.skip(f"[no-golden-yet] no golden for {case_id} yet: goldens are written by the reference path "
                        f"(torch) under --snapshot-update, at the end of the run; run again without it")
        golden = str(stored.data)
        if golden != summary:
            raise AssertionError(
                f"{case_id}: selection differs from the golden (not rewritten: only the reference "
                f"path writes goldens)\n--- golden\n{golden}\n--- this path\n{summary}")
