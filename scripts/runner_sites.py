"""Regenerate or check contracts/runner_sites.json: where each supported SGLang release's real
ModelRunner sets each attribute (the strict mock's wording reads it; nothing parses SGLang there).

    python scripts/runner_sites.py --write              # scan every supported release, write the table
    python scripts/runner_sites.py --check              # exit 1 naming the releases whose row is stale
    python scripts/runner_sites.py --write --tree 0.5.21=DIR ...   # an unpacked wheel instead of a download

Each release is read from its wheel (`pip download --no-deps sglang==X` into a temporary folder,
removed at the end, or --downloads DIR to keep them), or from --tree. Exit codes: 0 ok, 1 stale
(--check), 2 usage error (a bad --tree, a wheel pip cannot fetch).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "contracts" / "runner_sites.json"  # this checkout's, whichever dsakit.contracts imports
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's dsakit, whatever the interpreter has installed


def _unpacked(version: str, downloads: Path) -> Path:
    """The wheel of `version` unpacked (its sglang/ folder) under `downloads`."""
    from scripts.release_wheel import WheelUnavailable, unpacked_release

    try:
        return unpacked_release(version, downloads / version)
    except WheelUnavailable as error:
        print(f"error: no SGLang {version} wheel: `pip download --no-deps sglang=={version}` failed "
              f"(offline? pass --tree {version}=DIR): {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _trees(given: list[str]) -> dict[str, Path]:
    trees: dict[str, Path] = {}
    for item in given:
        version, sep, folder = item.partition("=")
        if not sep or not folder:
            print(f"error: --tree {item!r}: expected VERSION=DIR (e.g. 0.5.21=/path/to/unpacked/wheel)",
                  file=sys.stderr)
            raise SystemExit(2)
        trees[version] = Path(folder)
    return trees


def rows(versions: tuple[str, ...], trees: dict[str, Path], downloads: Path) -> dict[str, dict[str, object]]:
    from dsakit.errors import UsageError
    from dsakit.stack.sglang_release import release_from_tree
    from dsakit.sglang_facts.runner_site_scan import release_row

    found: dict[str, dict[str, object]] = {}
    for version in versions:
        try:
            release = release_from_tree(trees.get(version) or _unpacked(version, downloads))
        except UsageError as error:
            print(f"error: SGLang {version}: {error}", file=sys.stderr)
            raise SystemExit(2) from None
        if release.version != version:
            print(f"error: the tree given for {version} is SGLang {release.version}", file=sys.stderr)
            raise SystemExit(2)
        found[version] = release_row(release)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/runner_sites.py", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="write contracts/runner_sites.json")
    mode.add_argument("--check", action="store_true", help="exit 1 when the table is not a fresh scan")
    parser.add_argument("--tree", action="append", default=[], metavar="VERSION=DIR",
                        help="read VERSION from this unpacked tree instead of downloading its wheel")
    parser.add_argument("--downloads", type=Path, help="keep the downloaded wheels here (default: a temp folder)")
    args = parser.parse_args(argv)
    trees = _trees(args.tree)
    from dsakit.stack.sglang_release import SUPPORTED_RELEASES
    from dsakit.sglang_facts.runner_site_scan import render, table

    with tempfile.TemporaryDirectory(prefix="dsakit-runner-sites-") as temp:
        fresh = table(rows(SUPPORTED_RELEASES, trees, args.downloads or Path(temp)))
    if args.write:
        from dsakit.output_paths import output_file

        output_file(TABLE, "the runner-site table").write_text(render(fresh))  # atomic: whole or the old one
        print(f"wrote {TABLE.relative_to(ROOT)}: SGLang {', '.join(fresh['releases'])}")
        return 0
    current = json.loads(TABLE.read_text(encoding="utf-8"))["releases"]
    stale = [v for v in fresh["releases"] if current.get(v) != fresh["releases"][v]] + \
        [v for v in current if v not in fresh["releases"]]
    if stale:
        print(f"{TABLE.relative_to(ROOT)} is stale for SGLang {', '.join(stale)}: run "
              "`python scripts/runner_sites.py --write`", file=sys.stderr)
        return 1
    print(f"{TABLE.relative_to(ROOT)} is a fresh scan of SGLang {', '.join(fresh['releases'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
