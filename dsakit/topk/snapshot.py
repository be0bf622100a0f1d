"""Golden top-k selections as syrupy snapshots, keyed by CASE so every backend meets one golden.

Owns: `SelectionSnapshotExtension` (one amber file per test module), `summarize_selection` (the
stored text: the input's digest and the selection's backend-independent normal form),
`explain_mismatch` and the `selection_snapshot` fixture's object. Never imports torch at module
level; goldens come from the reference path or dsakit's reference top-k (`--snapshot-update`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.extensions.amber import AmberDataSerializer, AmberSnapshotExtension

from dsakit.topk.checks import assert_topk_valid

if TYPE_CHECKING:
    import numpy as np
    from syrupy.assertion import SnapshotAssertion
    from syrupy.data import SnapshotCollection
    from syrupy.location import PyTestLocation
    from syrupy.types import SerializableData, SnapshotIndex

    from dsakit.topk.cases import TopkCase

HEAD_ROWS = 2  # rows spelled out in the golden
HEAD_POSITIONS = 6  # positions shown per spelled-out row
DIGEST_HEX = 8  # hex digits per row digest
DIGESTS_PER_LINE = 16
MAX_ROW_DIGESTS = 256  # more rows than this: one digest per block of rows
FULL_HASH_VALUES = 1 << 20  # scores up to 4 MiB are hashed whole
SAMPLE_VALUES = 1 << 16  # larger ones: about this many strided values ...
END_VALUES = 64  # ... plus this many at each end of every row's window
_SHOW_ROWS = 8  # differing rows described in a mismatch message
_INPUT_KEYS = ("case", "input", "shape", "lengths", "row_starts", "scores")


class SelectionSummary(str):
    """The serialized form: a str so syrupy's comparison and amber's writer take it as is. Carries
    the normal form it was made from (`rows`), so a mismatch can describe any row."""

    rows: _NormalForm | None = None


# What is stored is small and independent of k, in two parts:
#
#   * the INPUT: the case's shape and lengths, its generator identity (recipe, seed, shape; when
#     the case object is known) and a digest of its scores. Scores of up to `FULL_HASH_VALUES`
#     values are hashed whole; larger ones (1M-token contexts: 512 MiB) through a fixed sample --
#     every `stride`-th value of the flattened matrix (about `SAMPLE_VALUES` of them, odd stride
#     so it walks across the columns) plus the first and last `END_VALUES` of every row's window.
#   * the SELECTION, normalised (backend-independent): per row the positions strictly above the
#     lowest selected ranked score (`certain`), that boundary score and the number of tied picks on
#     it; -inf picks are dropped and rows whose window holds NaN are marked, not compared. A backend
#     that picks another member of a tied group serializes to the same text, while a wrong index
#     changes its row. The first `HEAD_ROWS` rows are spelled out, every row has a short digest.
#
# The normal form is computed vectorized on the already-gathered selected scores only (sort, one
# gather, masks); its one full-window need -- which rows hold NaN -- is taken from the validity
# check that `assert_selection` runs first (`TopkReport.nan_rows`; that check reads every window
# anyway), or scanned exactly when a caller gives none. Equal, row by row, to `normalized_rows`
# in tests/topk/test_selection_snapshot.py, the per-row oracle (tested on every catalogue case).
#
# On a mismatch the message says which part differs: the input (the case generator changed: not
# the kernel's fault) or the selection (which rows, with this path's normal form of each). No
# device or tensor repr is ever written. The summary format carries its own serializer version
# (`SelectionSerializer.VERSION`): goldens of an older format read as tainted and must be
# regenerated (`--snapshot-update`).
#
# Under --snapshot-update a `reference=True` path writes its own selection as the golden; any other
# path writes a missing golden from dsakit's reference top-k (`dsakit.topk.reference`) of the same
# input, once its own selection matches it, and compares against an existing golden without
# rewriting it. So a suite without goldens gets them from one `--snapshot-update` run. xdist safety and unused-snapshot
# detection come from syrupy's amber machinery (locked read-modify-write under workers). Never
# imports torch at module level.
class SelectionSerializer(AmberDataSerializer):
    """Amber with dsakit's own version marker: bump VERSION whenever the summary text changes, so
    goldens written in an older format read as tainted ("needs to be regenerated")."""

    VERSION = "topksel-2"

    @classmethod
    def read_file(cls, filepath: str) -> SnapshotCollection:
        """syrupy's reader, except that a damaged file (not UTF-8, a misplaced version marker)
        reads as a tainted collection instead of raising inside syrupy's session finish, where the
        failure details, the skip inventory and --dsakit-report would be lost. The test reading it
        fails with the damage named (`golden_damage`)."""
        from syrupy.data import Snapshot, SnapshotCollection
        from syrupy.extensions.amber.serializer import MalformedAmberFile

        try:
            return super().read_file(filepath)
        except (UnicodeDecodeError, MalformedAmberFile):
            pass
        # the records' names still count as stored (not "unused"); their data is never trusted
        collection = SnapshotCollection(location=filepath)
        collection.tainted = True
        name: str | None = None
        lines: list[str] = []
        for line in Path(filepath).read_bytes().decode("utf-8", errors="replace").splitlines():
            if line.startswith("# name: "):
                name, lines = line[len("# name: "):].strip(), []
            elif line == "# ---" and name:
                collection.add(Snapshot(name=name, data="\n".join(lines), tainted=True))
                name = None
            elif name is not None and line.startswith("  "):
                lines.append(line[2:])
        return collection


class SelectionSnapshotExtension(AmberSnapshotExtension):
    file_extension = "topksel"
    serializer_class = SelectionSerializer

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


# ---------------------------------------------------------------- the input digest


def input_digest(scores: np.ndarray, lengths: np.ndarray, starts: np.ndarray) -> str:
    """The `scores:` line: sha256 of every value, or of a fixed sample of a large matrix (every
    stride-th value of the flattened matrix, odd stride, plus the first and last END_VALUES of
    each row's window). Reads O(SAMPLE_VALUES) values, never the whole matrix."""
    import numpy as np

    flat = np.ascontiguousarray(scores, dtype="<f4").reshape(-1)
    if flat.size <= FULL_HASH_VALUES:
        return f"sha256 of all {flat.size} values {_sha(flat.data)}"
    rows, width = scores.shape
    stride = (flat.size // SAMPLE_VALUES) | 1
    strided = np.ascontiguousarray(flat[::stride])
    lens = np.maximum(lengths, 0)
    j = np.arange(2 * END_VALUES)
    off = np.where(j < END_VALUES, j, lens[:, None] - 2 * END_VALUES + j)
    off = np.clip(off, 0, np.maximum(lens - 1, 0)[:, None])
    cols = np.minimum(starts[:, None] + off, width - 1)
    has = lens > 0
    ends = np.ascontiguousarray(flat[(np.arange(rows)[:, None] * width + cols)[has]])
    h = hashlib.sha256(f"stride={stride} ends={END_VALUES}|".encode())
    h.update(strided.data)
    h.update(ends.data)
    return (f"sha256 of {strided.size + ends.size} sampled values (stride {stride}, "
            f"{END_VALUES} at each end of each window) {h.hexdigest()[:16]}")


# ---------------------------------------------------------------- the normal form, vectorized


@dataclass
class _NormalForm:
    """Every row's normal form (the per-row oracle in tests/topk/test_selection_snapshot.py), as arrays."""

    nan: np.ndarray  # (rows,) bool: window holds NaN (row not normalised)
    count: np.ndarray  # (rows,) selected ranked positions
    boundary: np.ndarray  # (rows,) float32, the lowest selected ranked score (meaningless if count 0)
    tied: np.ndarray  # (rows,) picks on the boundary
    positions: np.ndarray  # (rows, k) sorted selection
    certain: np.ndarray  # (rows, k) bool: above the boundary
    invalid: dict[int, tuple[int, ...]]  # rows with entries neither -1 nor in the window
    pos_dtype: str = "<i4"  # how certain positions are digested ("<i8" for windows past 2**31)

    @property
    def num_rows(self) -> int:
        return int(self.nan.shape[0])

    def certain_positions(self, row: int) -> np.ndarray:
        out: np.ndarray = self.positions[row][self.certain[row]]
        return out

    def fields(self, row: int) -> tuple[bool, int, float | None, int, tuple[int, ...], tuple[int, ...]]:
        """(nan_row, count, boundary, tied, certain, invalid) as `normalized_rows` gives them."""
        if self.nan[row]:
            return True, 0, None, 0, (), ()
        n = int(self.count[row])
        return (False, n, float(self.boundary[row]) if n else None, int(self.tied[row]),
                tuple(int(p) for p in self.certain_positions(row)), self.invalid.get(row, ()))

    def _head(self, row: int) -> str:
        if self.nan[row]:
            return f"row {row}: NaN in window (validity only: backends disagree on NaN)"
        n = int(self.count[row])
        b = float(self.boundary[row]).hex() if n else "none"
        text = f"row {row}: n={n} boundary={b} tied={int(self.tied[row])}"
        if row in self.invalid:
            text += f" invalid={list(self.invalid[row][:8])}"
        return text

    def line(self, row: int, head: int = HEAD_POSITIONS) -> str:
        text = self._head(row)
        if not self.nan[row]:
            text += f" certain[:{head}]={[int(p) for p in self.certain_positions(row)[:head]]}"
        return text

    def digest(self, row: int) -> str:
        h = hashlib.sha256(self._head(row).split(": ", 1)[1].encode())
        if not self.nan[row]:
            h.update(b"|")
            h.update(self.certain_positions(row).astype(self.pos_dtype).tobytes())
        return h.hexdigest()[:DIGEST_HEX]


def _nan_rows_exact(sc: np.ndarray, lens: np.ndarray, starts: np.ndarray) -> set[int]:
    """Rows whose window holds NaN, exactly. One fused pass (a row max propagates NaN); only rows
    whose max is NaN are scanned over their window (NaN may sit outside it in ragged layouts)."""
    import numpy as np

    if sc.size == 0:
        return set()
    out = set()
    for row in np.flatnonzero(np.isnan(sc.max(axis=1))).tolist():
        start, length = int(starts[row]), max(int(lens[row]), 0)
        if length and bool(np.isnan(sc[row, start:start + length]).any()):
            out.add(row)
    return out


def normal_form(positions: np.ndarray, scores: np.ndarray, lengths: np.ndarray,
                starts: np.ndarray, nan_rows: set[int] | frozenset[int]) -> _NormalForm:
    """The per-row normal form of a selection, from the selected scores only: sort each row's
    positions, drop -1 / duplicates / out-of-window entries, gather the selected scores in one
    flat take, drop -inf picks, then boundary = row min, tied = picks equal to it, certain =
    picks above it."""
    import numpy as np

    rows, k = positions.shape
    width = scores.shape[1]
    srt = np.sort(positions, axis=1)
    lens = np.maximum(lengths, 0)[:, None]
    dup = np.zeros(srt.shape, dtype=bool)
    dup[:, 1:] = srt[:, 1:] == srt[:, :-1]
    inside = (srt >= 0) & (srt < lens)
    keep = inside & ~dup
    invalid_mask = ~inside & ~dup & (srt != -1)
    flat_idx = np.where(keep, srt, 0) + (starts + np.arange(rows, dtype=np.int64) * width)[:, None]
    vals = (scores.reshape(-1).take(flat_idx) if scores.size else
            np.zeros(srt.shape, dtype=np.float32))  # no window: nothing is kept anyway
    keep &= vals != -np.inf
    nan = np.zeros(rows, dtype=bool)
    if nan_rows:
        nan[sorted(nan_rows)] = True
        keep[nan] = False
    count = keep.sum(axis=1)
    boundary = np.where(keep, vals, np.float32(np.inf)).min(axis=1, initial=np.float32(np.inf))
    tied = (keep & (vals == boundary[:, None])).sum(axis=1)
    certain = keep & (vals > boundary[:, None])
    invalid = {int(r): tuple(int(p) for p in srt[r][invalid_mask[r]])
               for r in np.flatnonzero(invalid_mask.any(axis=1) & ~nan)}
    return _NormalForm(nan, count, boundary, tied, srt, certain, invalid,
                       "<i4" if width < 1 << 31 else "<i8")


# ---------------------------------------------------------------- the summary text


def summarize_selection(case_id: str, positions: Any, scores: Any, lengths: Any, k: int, *,
                        row_starts: Any = None, nan_rows: Any = None,
                        identity: str | None = None) -> SelectionSummary:
    """The golden text of one case's selection (row-local positions, -1 padded).

    `nan_rows`: the rows whose window holds NaN, if the caller already knows them (the validity
    report's `nan_rows`); otherwise they are found exactly with one pass over the scores.
    `identity`: how the case generator made the scores (recipe, seed, shape), if known."""
    import numpy as np
    import torch

    sc = torch.as_tensor(scores).detach().to("cpu", torch.float32).contiguous().numpy()
    idx = torch.as_tensor(positions).detach().cpu().numpy()
    lens = np.asarray(torch.as_tensor(lengths).detach().cpu().tolist(), dtype=np.int64).reshape(-1)
    starts = (np.zeros_like(lens) if row_starts is None else
              np.asarray(torch.as_tensor(row_starts).detach().cpu().tolist(), dtype=np.int64))
    if idx.ndim != 2 or sc.ndim != 2 or not (idx.shape[0] == sc.shape[0] == lens.size == starts.size):
        from dsakit.errors import UsageError

        raise UsageError(
            f"selection snapshot needs positions (rows, k), scores (rows, width), lengths (rows,): "
            f"got positions {tuple(idx.shape)}, scores {tuple(sc.shape)}, {lens.size} lengths, "
            f"{starts.size} row starts")
    if nan_rows is None:
        nan_rows = _nan_rows_exact(sc, lens, starts)
    form = normal_form(idx, sc, lens, starts, set(nan_rows))
    lens_list = lens.tolist()
    lines = [f"case: {case_id}"]
    if identity:
        lines.append(f"input: {identity}")
    lines += [
        f"shape: {sc.shape[0]} rows x width {sc.shape[1]}, k {k}",
        "lengths: " + (str(lens_list) if len(lens_list) <= 16 else _sha(str(lens_list).encode())),
    ]
    if row_starts is not None:
        lines.append("row_starts: " + str(starts.tolist()))
    lines.append("scores: " + input_digest(sc, lens, starts))
    lines += [form.line(r) for r in range(min(HEAD_ROWS, form.num_rows))]
    lines += _digest_lines(form)
    out = SelectionSummary("\n".join(lines))
    out.rows = form
    return out


def _digest_lines(form: _NormalForm) -> list[str]:
    rows = form.num_rows
    block = -(-rows // MAX_ROW_DIGESTS) if rows else 1
    if block == 1:
        digests = [form.digest(r) for r in range(rows)]
        label = "row digests"
    else:
        digests = [hashlib.sha256("".join(form.digest(r) for r in range(b, min(b + block, rows)))
                                  .encode()).hexdigest()[:DIGEST_HEX] for b in range(0, rows, block)]
        label = f"row-block digests ({block} rows each)"
    out = []
    for first in range(0, len(digests), DIGESTS_PER_LINE):
        chunk = digests[first:first + DIGESTS_PER_LINE]
        out.append(f"{label} {first}..{first + len(chunk) - 1}: " + " ".join(chunk))
    return out


# ---------------------------------------------------------------- mismatch diagnosis


_DIGESTS = re.compile(r"^(row digests|row-block digests \((\d+) rows each\)) (\d+)\.\.(\d+): (.*)$")
_HEAD = re.compile(r"^row (\d+): ")


def _parse(text: str) -> tuple[dict[str, str], dict[int, str], dict[int, str], int]:
    """(input/other keyed lines, spelled-out rows, digests by row or block, rows per digest)."""
    keyed: dict[str, str] = {}
    heads: dict[int, str] = {}
    digests: dict[int, str] = {}
    block = 1
    for line in text.splitlines():
        m = _DIGESTS.match(line)
        if m:
            block = int(m.group(2) or 1)
            for i, d in enumerate(m.group(5).split()):
                digests[int(m.group(3)) + i] = d
            continue
        m = _HEAD.match(line)
        if m:
            heads[int(m.group(1))] = line
            continue
        key, _, value = line.partition(": ")
        keyed[key] = value
    return keyed, heads, digests, block


def regenerate_command(test_file: str | Path | None) -> str:
    """The command that rewrites the goldens of the test file that reads them (the user's own)."""
    if not test_file:
        return "pytest --snapshot-update (on the test file that reads the golden)"
    shown = Path(test_file)
    try:
        shown = shown.resolve().relative_to(Path.cwd().resolve())
    except (OSError, ValueError):
        pass
    return f"python -m pytest {shown} --snapshot-update"


def explain_mismatch(case_id: str, golden: str | None, summary: str, *, validated: bool = True,
                     test_file: str | Path | None = None) -> str:
    """Why `summary` differs from the stored `golden`: the input (a case-generator change, or
    other scores given: not the path's fault), or the selection (which rows, and this path's
    normal form of each). `validated`: the selection passed the validity check against the scores
    summarized. `test_file`: the test reading the golden, named in the command that regenerates it."""
    regenerate = regenerate_command(test_file)
    if golden is None:
        return f"{case_id}: no golden stored (or one of an older format): regenerate with {regenerate}"
    g_keys, g_heads, g_digests, g_block = _parse(golden)
    s_keys, s_heads, s_digests, s_block = _parse(summary)
    changed_input = [k for k in _INPUT_KEYS if g_keys.get(k) != s_keys.get(k)]
    if changed_input:
        source = ("The case generator (dsakit.topk.cases: recipe, seed, shape or the generator code) now "
                  "makes other scores than when the golden was recorded" if "input" in s_keys else
                  "The test now passes other scores (or lengths) than when the golden was recorded")
        lines = [
            f"{case_id}: the INPUT changed: {', '.join(changed_input)} differ from the input "
            f"the golden was written from. {source}; this is not a bug of the path under test. Review "
            f"the input change, then regenerate the goldens on CPU: {regenerate}"]
        for key in changed_input:
            lines.append(f"    golden {key}: {g_keys.get(key, '(absent)')}")
            lines.append(f"    now    {key}: {s_keys.get(key, '(absent)')}")
        return "\n".join(lines)
    rows = getattr(summary, "rows", None)
    if g_block != s_block:
        bad = sorted(set(g_digests) | set(s_digests))
    else:
        bad = sorted(i for i in set(g_digests) | set(s_digests)
                     if g_digests.get(i) != s_digests.get(i))
    bad_rows = sorted({r for i in bad for r in range(i * s_block, (i + 1) * s_block)}
                      | {r for r in set(g_heads) | set(s_heads) if g_heads.get(r) != s_heads.get(r)})
    if rows is not None:
        bad_rows = [r for r in bad_rows if r < rows.num_rows]
    if s_block == 1:
        where = f"{len(bad_rows)} of {rows.num_rows if rows is not None else len(s_digests)} rows"
    else:
        where = f"{len(bad)} of {len(s_digests)} row blocks ({s_block} rows each)"
    lines = [f"{case_id}: selection differs from the golden in {where} (the input matches): "
             f"rows {bad_rows[:32]}{' ...' if len(bad_rows) > 32 else ''}"]
    for r in bad_rows[:_SHOW_ROWS]:
        gold = g_heads.get(r) or f"row {r}: digest {g_digests.get(r // g_block, '(absent)')}"
        if rows is None:
            now = s_heads.get(r) or f"row {r}: digest {s_digests.get(r // s_block, '(absent)')}"
        else:  # this path's normal form of the row, with its digest where the golden has one
            now = rows.line(r) + (f" digest {rows.digest(r)}" if s_block == 1 else "")
        lines.append(f"    golden:    {gold}")
        lines.append(f"    this path: {now}")
    if validated:
        lines.append(
            "  This selection passed the validity check against the scores it was given, and "
            "every valid top-k of one input has the same normal form (ties allowed); so the "
            "scores most likely changed outside the sampled values (a case-generator change: "
            f"review it and regenerate with {regenerate}), or the golden was written from "
            "an invalid selection.")
    return "\n".join(lines)


# ---------------------------------------------------------------- damaged golden files

_RECORD_KEYS = ("case", "shape", "lengths", "scores")  # every summary has these lines


def golden_damage(path: str | Path) -> str | None:
    """What is wrong with a golden file, by line ("line 9: record ... is cut off"), or None when
    it reads as a well-formed file of this format. syrupy itself only says "needs to be
    regenerated" or finds nothing; this names the file's damage."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line_no = data.count(b"\n", 0, error.start) + 1
        column = error.start - (data.rfind(b"\n", 0, error.start) + 1) + 1
        return (f"line {line_no}: byte {data[error.start]:#04x} at column {column} is not UTF-8 text "
                "(the file is garbled)")
    lines = text.splitlines()
    header = f"# serializer version: {SelectionSerializer.VERSION}"
    if not lines:
        return "the file is empty"
    if lines[0] != header:
        if lines[0].startswith("# serializer version: ") and len(lines) > 1:
            return (f"line 1: {lines[0][2:]!r} is an older format; this dsakit reads and writes "
                    f"{SelectionSerializer.VERSION}")
        return f"line 1: {lines[0][:60]!r} is not the header {header!r} (the file is truncated or garbled)"
    name: str | None = None
    keys: set[str] = set()
    start = 0
    for number, line in enumerate(lines[1:], start=2):
        if line.startswith("# name: "):
            if name is not None:
                return f"line {number}: record {name!r} (line {start}) has no closing '# ---'"
            name, keys, start = line[len("# name: "):].strip(), set(), number
        elif line == "# ---":
            if name is None:
                return f"line {number}: '# ---' without a '# name:' record before it"
            missing = [k for k in _RECORD_KEYS if k not in keys]
            if missing:
                return f"line {start}: record {name!r} lacks its {', '.join(missing)} line(s)"
            name = None
        elif line.startswith("  ") and name is not None:
            keys.add(line.strip().partition(":")[0])
        else:
            return f"line {number}: {line[:60]!r} is neither a record marker nor an indented summary line"
    if name is not None:
        return (f"line {len(lines)}: record {name!r} (line {start}) is cut off before its closing "
                "'# ---' (the file is truncated)")
    return None


def damaged_golden_message(path: str | Path, damage: str, test_file: str) -> str:
    return (f"golden file {path} cannot be read: {damage}. Regenerate it on CPU (the reference path "
            f"writes goldens): {regenerate_command(test_file)}; or restore it from git "
            f"(git checkout -- {path})")


def configure_update(config: pytest.Config) -> UpdateGuard | None:
    """pytest_configure under `--snapshot-update`: refuse `--collect-only` (no test runs, so syrupy
    would delete every golden as unused); the guard that keeps goldens when the update stops early
    (`UpdateGuard`, a part of the run's DsakitSession; None in an xdist worker)."""
    if config.option.collectonly:
        raise pytest.UsageError(
            "--snapshot-update with --collect-only would delete every golden (no test runs, so all "
            "read as unused); drop --collect-only to regenerate goldens, or --snapshot-update to list tests")
    if hasattr(config, "workerinput"):  # xdist workers never delete: the controller decides
        return None
    return UpdateGuard(config)


class UpdateGuard:
    """Deletes unused goldens only after a complete update. syrupy removes every record no test
    used once the selection matched what was collected, so an update stopped by -x, --maxfail,
    Ctrl-C or a crashed worker would delete the goldens of every test that never ran (and of the
    one that failed before its assertion). When selection goldens are in play and the session did
    not run every selected test, or a test failed, syrupy's cleanup is switched off for this
    session (`--snapshot-no-cleanup`) before it finishes, and the summary says so. Its two hooks
    keep their own places (before syrupy's finish, after syrupy's report); the session closes it."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.kept: str | None = None
        self._no_cleanup: Any = None

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> Any:
        why = incomplete_update(session)
        if why and _selection_goldens_in_play(session.config) and not session.config.option.no_cleanup:
            self._no_cleanup = session.config.option.no_cleanup
            session.config.option.no_cleanup = True  # read by syrupy's finish and its summary
            self.kept = why
        return (yield)

    @pytest.hookimpl(trylast=True)  # after syrupy's report, whose "N snapshots unused" it explains
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.kept:
            unused = _syrupy_unused(self.config)
            kept = (f"the {unused} record(s) syrupy lists as unused above were kept, not deleted"
                    if unused else "no unused golden was deleted")
            terminalreporter.write_line(
                f"dsakit: --snapshot-update did not run to its end ({self.kept}): {kept}; every record "
                "of a test that did not run or failed is kept (goldens of the tests that passed were "
                "written). Unused goldens are deleted only by an update that runs the whole selection "
                "with no failure.", yellow=True)

    def close(self) -> None:
        if self.kept:
            self.config.option.no_cleanup = self._no_cleanup


def _syrupy_unused(config: pytest.Config) -> int:
    """How many records syrupy's report counts as unused (0 where it cannot say)."""
    try:
        return int(config._syrupy.report.num_unused)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return 0


def incomplete_update(session: pytest.Session) -> str | None:
    """Why this session did not run its whole selection to the end without a failure, or None."""
    syrupy = getattr(session.config, "_syrupy", None)
    # syrupy's ItemStatus per selected test: NOT_RUN's value is False, the others are outcomes
    ran = {nodeid: bool(status.value) for nodeid, status in getattr(syrupy, "_selected_items", {}).items()}
    for report in getattr(syrupy, "_worker_reports", ()):  # the xdist controller: what workers ran
        for nodeid, value in report.get("selected", {}).items():
            ran[nodeid] = ran.get(nodeid, False) or bool(value)
    not_run = sum(1 for done in ran.values() if not done)
    why = []
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        why.append("interrupted")
    stop = session.shouldfail or session.shouldstop
    if stop:
        why.append(str(stop) if isinstance(stop, str) else "stopped early")
    if not_run:
        why.append(f"{not_run} of {len(ran)} selected tests did not run")
    if session.testsfailed:
        why.append(f"{session.testsfailed} failed")
    return "; ".join(why) or None


def _selection_goldens_in_play(config: pytest.Config) -> bool:
    """Whether syrupy discovered selection goldens this session (in this process or, under xdist,
    in a worker): otherwise dsakit leaves syrupy's own cleanup alone."""
    syrupy = getattr(config, "_syrupy", None)
    if syrupy is None:
        return False
    if any(isinstance(ext, SelectionSnapshotExtension) for ext in syrupy._extensions.values()):
        return True
    name = f"{SelectionSnapshotExtension.__module__}.{SelectionSnapshotExtension.__qualname__}"
    return any(name == member for report in syrupy._worker_reports
               for member in report.get("extensions", {}).values())


def _refuse_short_reference(case_id: str, positions: Any, lengths: Any, k: int, nan_rows: set[int]) -> None:
    """A golden comes from a complete selection: the reference path picks min(length, k) positions
    in every row. Validity lets a kernel come back short where NaN costs it slots (the v2 collect
    pass), so without this a NaN row selecting nothing could be recorded as the golden."""
    import torch

    idx = torch.as_tensor(positions).detach().cpu()
    lens = [max(int(x), 0) for x in torch.as_tensor(lengths).detach().cpu().flatten().tolist()]
    for row, length in enumerate(lens):
        picked = int(torch.unique(idx[row][idx[row] != -1]).numel())
        if picked < min(length, k):
            nan = " (its window holds NaN)" if row in nan_rows else ""
            raise AssertionError(
                f"{case_id}: no golden written: row {row}{nan} selects {picked} of min(length {length}, "
                f"k {k}) = {min(length, k)} positions; the path marked reference=True writes goldens and "
                "must select every slot (torch.topk does). Mark a complete path as the reference")


# ---------------------------------------------------------------- the fixture object


class SelectionSnapshot:
    """Returned by the `selection_snapshot` fixture."""

    def __init__(self, snapshot: SnapshotAssertion) -> None:
        self._snapshot = snapshot.use_extension(SelectionSnapshotExtension)

    @property
    def updating(self) -> bool:
        return bool(self._snapshot.update_snapshots)

    def assert_selection(self, case_id: str, positions: Any, scores: Any, lengths: Any, k: int, *,
                         row_starts: Any = None, reference: bool = False,
                         nan_slot_filler: bool = False, identity: str | None = None) -> None:
        """Check validity (readable per-row diff), then match the golden stored under `case_id`.
        `nan_slot_filler`: the path's kernel may fill NaN-cost slots with position == slot (the
        v2 JIT); NaN rows are not part of the golden, so only the validity check reads it."""
        __tracebackhide__ = True
        report = assert_topk_valid(positions, scores, lengths, k, row_starts=row_starts,
                                   nan_slot_filler=nan_slot_filler)
        summary = summarize_selection(case_id, positions, scores, lengths, k, row_starts=row_starts,
                                      nan_rows=report.nan_rows, identity=identity)
        if not self.updating:
            self._refuse_damaged(case_id)
        if self.updating and reference:
            _refuse_short_reference(case_id, positions, lengths, k, report.nan_rows)
        if self.updating and not reference:
            golden, tainted = self._stored(case_id)
            if golden is None:  # a new (or older-format) golden: written from dsakit's reference
                self._write_from_reference(case_id, summary, scores, lengths, k, row_starts, identity, tainted)
            else:
                self._compare_without_writing(case_id, summary, golden)
            return
        assert self._snapshot(name=case_id) == summary, \
            explain_mismatch(case_id, self._stored(case_id)[0], summary, test_file=self._test_file)

    def assert_case(self, case: TopkCase, positions: Any, *, reference: bool = False,
                    nan_slot_filler: bool = False) -> None:
        __tracebackhide__ = True
        self.assert_selection(case.case_id, positions, case.scores("cpu"), case.lengths, case.k,
                              row_starts=case.row_starts, reference=reference,
                              nan_slot_filler=nan_slot_filler,
                              identity=f"recipe={case.recipe} seed={case.seed} shape={case.shape}")

    @property
    def _test_file(self) -> str:
        """The user's test file that reads these goldens (never one of dsakit's)."""
        return str(self._snapshot.test_location.filepath)

    def _refuse_damaged(self, case_id: str) -> None:
        __tracebackhide__ = True
        loc = self._snapshot.test_location
        location = self._snapshot.extension.get_location(test_location=loc, index=case_id)
        damage = golden_damage(location) if Path(location).is_file() else None
        if damage:
            raise AssertionError(damaged_golden_message(location, damage, loc.filepath))

    def _stored(self, case_id: str) -> tuple[str | None, bool]:
        """(the stored golden text or None, whether the file is of an older format)."""
        ext = self._snapshot.extension
        loc = self._snapshot.test_location
        location = ext.get_location(test_location=loc, index=case_id)
        if not Path(location).is_file():
            return None, False
        collection = SelectionSerializer.read_file(location)
        stored = collection.get(ext.get_snapshot_name(test_location=loc, index=case_id))
        tainted = bool(collection.tainted or (stored is not None and stored.tainted))
        if stored is None or stored.data is None or tainted:
            return None, tainted
        return str(stored.data), False

    def _write_from_reference(self, case_id: str, summary: SelectionSummary, scores: Any, lengths: Any,
                              k: int, row_starts: Any, identity: str | None, tainted: bool) -> None:
        """--snapshot-update with no usable golden and no `reference=True` path: the golden is the
        normal form of dsakit's reference top-k (`dsakit.topk.reference`) of the same input, written
        only when this path's selection has that normal form too (ties allowed)."""
        __tracebackhide__ = True
        from dsakit.topk.reference import reference_topk

        expected = summarize_selection(case_id, reference_topk(scores, lengths, k, row_starts=row_starts),
                                       scores, lengths, k, row_starts=row_starts, identity=identity)
        if str(summary) != str(expected):
            raise AssertionError(
                explain_mismatch(case_id, expected, summary, test_file=self._test_file)
                + "\n(no golden written: this path's selection differs from dsakit's reference top-k "
                "of the same input, dsakit.topk.reference; fix the path, or mark the path whose "
                "selection IS the golden with assert_case(..., reference=True))")
        what = "older-format golden" if tainted else "golden"
        assert self._snapshot(name=case_id) == expected, f"{case_id}: writing the {what} failed"

    def _compare_without_writing(self, case_id: str, summary: str, golden: str) -> None:
        """--snapshot-update on a path that may not rewrite the stored golden: an equal selection goes
        through syrupy's assertion (which writes nothing for an equal value and counts the record
        used: a record no assertion touched is deleted as unused at the end of the update)."""
        __tracebackhide__ = True
        if golden == summary:
            assert self._snapshot(name=case_id) == summary, \
                explain_mismatch(case_id, golden, summary, test_file=self._test_file)
        else:
            raise AssertionError(
                    explain_mismatch(case_id, golden, summary, test_file=self._test_file)
                    + "\n(not rewritten: under --snapshot-update only a reference=True path rewrites "
                    "an existing golden)"
                    + f"\n--- golden\n{golden}\n--- this path\n{summary}")
