"""Benchmark: what one selection snapshot costs (serialize + compare) for a long-context case.

A 128-row x k=2,048 selection from a 1M-token context (scores 128 x 1,048,576 float32 = 512 MiB,
seeded; row lengths 1M minus a few tokens per row; the selection is torch.topk of the masked
scores). The selection goes through the real `selection_snapshot` fixture machinery inside a
generated pytest module, run as a subprocess twice: with `--snapshot-update` (writes the golden
through syrupy's amber writer at session end) and without (reads the golden back and compares).
Inside the test each stage is timed `--repeats` times (perf_counter, best and median):

  summarize     dsakit.topk.snapshot.summarize_selection as `assert_selection` calls it: the
                serialized golden text, with the rows whose window holds NaN taken from the
                validity report (`TopkReport.nan_rows`; that check scans every window anyway)
    .digest     of which the input digest alone (`input_digest`: sha256 of a fixed sample of the
                scores: every stride-th value + the ends of every window)
    .normalize  of which the vectorized normal form alone (`normal_form`: sort, one gather of the
                selected scores, masks)
  summarize.standalone  summarize_selection without `nan_rows` (finds NaN rows itself: one extra
                fused pass over the whole score matrix); not part of the fixture call
  match         `snapshot.use_extension(SelectionSnapshotExtension)(name=case) == summary`: the
                extension's serializer, syrupy's read of the golden file and the comparison
  serialize+compare = summarize + match (target: < 20 ms)
  validity      assert_topk_valid (runs before the snapshot in `assert_selection`; not snapshot
                cost, shown because it dominates the fixture call)
  assert_selection  the whole fixture call as a suite makes it (validity + summarize + match)

`--profile` adds a cProfile of `--repeats` x (summarize + match) in the compare run (top functions
by internal time). Also reports the golden file's size (target <= 4 KB). Tensor generation,
torch.load and pytest start-up are outside every timed region.

    python bench/bench_snapshot.py [--rows 128] [--context 1048576] [--k 2048] [--repeats 5]
                                   [--profile] [--show-golden] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

TEST_MODULE = '''
import cProfile
import io
import json
import os
import pstats
import statistics
import time

import numpy as np
import torch

from dsakit.topk.snapshot import (SelectionSnapshotExtension, input_digest, normal_form,
                                       summarize_selection)
from dsakit.topk.checks import assert_topk_valid

DATA = torch.load(os.environ["BENCH_DATA"])
SCORES, LENGTHS, POSITIONS, K = DATA["scores"], DATA["lengths"], DATA["positions"], DATA["k"]
REPEATS = int(os.environ["BENCH_REPEATS"])
CASE = "bench-128x2048-of-1m"
# what assert_selection hands the snapshot: the validity report's NaN rows (untimed here: the
# validity stage below times that check)
NAN_ROWS = assert_topk_valid(POSITIONS, SCORES, LENGTHS, K).nan_rows
SC, LENS = SCORES.numpy(), np.asarray(LENGTHS, dtype=np.int64)
STARTS, IDX = np.zeros_like(LENS), POSITIONS.numpy()


def timed(fn):
    out = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return {"best_ms": 1e3 * min(out), "median_ms": 1e3 * statistics.median(out),
            "all_ms": [1e3 * x for x in out]}


def summarize():
    return summarize_selection(CASE, POSITIONS, SCORES, LENGTHS, K, nan_rows=NAN_ROWS)


def test_snapshot_cost(snapshot, selection_snapshot):
    snap = snapshot.use_extension(SelectionSnapshotExtension)
    summary = summarize()
    assert summary == summarize_selection(CASE, POSITIONS, SCORES, LENGTHS, K)  # same text
    stages = {
        "summarize": timed(summarize),
        "summarize.digest": timed(lambda: input_digest(SC, LENS, STARTS)),
        "summarize.normalize": timed(lambda: normal_form(IDX, SC, LENS, STARTS, NAN_ROWS)),
        "summarize.standalone": timed(
            lambda: summarize_selection(CASE, POSITIONS, SCORES, LENGTHS, K)),
    }
    profile = None
    if snap.update_snapshots:
        assert snap(name=CASE) == summary  # recorded; syrupy writes the file at session end
    else:
        def match():
            assert snap(name=CASE) == summary
        stages["match"] = timed(match)
        stages["validity"] = timed(lambda: assert_topk_valid(POSITIONS, SCORES, LENGTHS, K))
        stages["assert_selection"] = timed(lambda: selection_snapshot.assert_selection(
            CASE, POSITIONS, SCORES, LENGTHS, K, reference=True))
        if os.environ.get("BENCH_PROFILE"):
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(REPEATS):
                assert snap(name=CASE) == summarize()
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
            profile = buf.getvalue()
    with open(os.environ["BENCH_OUT"], "w") as fh:
        json.dump({"stages": stages, "summary_chars": len(summary), "profile": profile,
                   "torch_threads": torch.get_num_threads()}, fh)
'''


def make_data(path: Path, rows: int, context: int, k: int, seed: int) -> float:
    import torch

    start = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn((rows, context), generator=gen, dtype=torch.float32)
    lengths = [context - 37 * r for r in range(rows)]  # decode rows of one 1M-token batch
    valid = torch.arange(context)[None, :] < torch.tensor(lengths)[:, None]
    positions = torch.topk(scores.masked_fill(~valid, float("-inf")), k, dim=1).indices
    # a kernel's order, not torch's sorted one
    positions = torch.gather(positions, 1, torch.argsort(torch.rand((rows, k), generator=gen), dim=1))
    torch.save({"scores": scores, "lengths": lengths, "positions": positions.to(torch.int32), "k": k},
               path)
    return time.perf_counter() - start


def run_pytest(root: Path, data: Path, repeats: int, out: Path, update: bool,
               profile: bool = False) -> None:
    env = dict(os.environ, BENCH_DATA=str(data), BENCH_REPEATS=str(repeats), BENCH_OUT=str(out))
    if profile:
        env["BENCH_PROFILE"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-c", str(root / "pytest.ini"), "--rootdir", str(root),
           "-q", "-p", "no:cacheprovider", str(root / "test_snapshot_cost.py")]
    if update:
        cmd.append("--snapshot-update")
    proc = subprocess.run(cmd, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout[-4000:]}")


def measure(rows: int, context: int, k: int, repeats: int, seed: int,
            profile: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dsakit-bench-snap-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        (root / "test_snapshot_cost.py").write_text(textwrap.dedent(TEST_MODULE))
        data = root / "data.pt"
        gen_s = make_data(data, rows, context, k, seed)
        run_pytest(root, data, repeats, root / "update.json", update=True)
        golden = root / "__snapshots__" / "test_snapshot_cost" / "selections.topksel"
        if not golden.is_file():
            raise SystemExit(f"no golden written at {golden}")
        run_pytest(root, data, repeats, root / "compare.json", update=False, profile=profile)
        res: dict[str, Any] = json.loads((root / "compare.json").read_text())
        res["update_run_stages"] = json.loads((root / "update.json").read_text())["stages"]
        res["golden_bytes"] = golden.stat().st_size
        res["golden_text"] = golden.read_text()
    st = res["stages"]
    res["serialize_plus_compare"] = {
        key: st["summarize"][key] + st["match"][key] for key in ("best_ms", "median_ms")}
    res.update(rows=rows, context=context, k=k, repeats=repeats, data_gen_s=gen_s,
               scores_mib=rows * context * 4 / 2**20)
    return res


def markdown(res: dict[str, Any]) -> str:
    st = res["stages"]
    lines = [
        f"{res['rows']} rows x k={res['k']} from a {res['context']:,}-token context "
        f"(scores {res['scores_mib']:.0f} MiB float32); best / median of {res['repeats']}, "
        f"torch threads {res['torch_threads']}",
        "",
        "| stage | best | median |",
        "|---|---|---|",
    ]
    order = ["summarize", "summarize.digest", "summarize.normalize", "summarize.standalone", "match",
             "validity", "assert_selection"]
    for key in order:
        lines.append(f"| {key} | {st[key]['best_ms']:.1f} ms | {st[key]['median_ms']:.1f} ms |")
    spc = res["serialize_plus_compare"]
    lines.append(f"| **serialize + compare** (summarize + match) | **{spc['best_ms']:.1f} ms** "
                 f"| {spc['median_ms']:.1f} ms |")
    lines += ["", f"golden file: {res['golden_bytes']} bytes (target <= 4096); serialize + compare "
              f"{spc['best_ms']:.1f} ms best (target < 20 ms)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=128)
    ap.add_argument("--context", type=int, default=1 << 20)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--show-golden", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile summarize + match")
    args = ap.parse_args(argv)
    res = measure(args.rows, args.context, args.k, args.repeats, args.seed, args.profile)
    print(markdown(res))
    if res.get("profile"):
        print("\n" + res["profile"])
    if args.show_golden:
        print("\n" + res["golden_text"])
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
