"""The release x device x outcome table, from `--dsakit-report` files (one run per SGLang release).

Usage: python bench/releases_table.py REPORT.json... [--per-simulated-device] [--output FILE]
Each report gives one row for the session's device (real or simulated) and one row for the tests
parametrized over simulated devices (`device=KEY` in the test id: dsakit_simulate), or one such row
per simulated device with --per-simulated-device. Exit codes: 0 written, 2 a file is missing or not
a dsakit report (the message names it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
_SIMULATED_ID = re.compile(r"[\[-]device=([a-z0-9]+)[\]-]")


class BadReport(Exception):
    pass


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadReport(f"{path}: no such file; give the --dsakit-report files of the runs") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadReport(f"{path}: not a JSON --dsakit-report file ({error})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), dict) or "device" not in data:
        raise BadReport(f"{path}: not a --dsakit-report file (expected 'device', 'sglang' and 'tests' keys)")
    return data


def rows_of(report: dict[str, Any], per_device: bool = True) -> list[tuple[str, str, Counter[str]]]:
    """(release, device, outcome counts): the session's device, then the simulated devices (each,
    or together as one row)."""
    release = str(report.get("sglang") or "not installed")
    device = report["device"]
    own = f"{device.get('description', device.get('key'))} ({'simulated' if device.get('simulated') else 'real'})"
    by_device: dict[str, Counter[str]] = {own: Counter()}
    for test_id, test in report["tests"].items():
        match = _SIMULATED_ID.search(test_id)
        key = f"{match.group(1)} (simulated)" if match else own
        by_device.setdefault(key, Counter())[str(test.get("outcome"))] += 1
    rows = [(release, name, counts) for name, counts in by_device.items()]
    simulated = [row for row in rows if row[1] != own]
    if per_device or not simulated:
        return rows
    together: Counter[str] = Counter()
    for _, _, counts in simulated:
        together.update(counts)
    keys = ", ".join(sorted(name.split(" ", 1)[0] for _, name, _ in simulated))
    return [rows[0], (release, f"{len(simulated)} simulated ({keys})", together)]


def table(reports: list[dict[str, Any]], per_device: bool = True) -> str:
    from dsakit.stack.sglang_release import release_order

    rows = sorted((row for report in reports for row in rows_of(report, per_device)),
                  key=lambda r: (release_order(r[0]), "simulated" in r[1], r[1]))
    head = "| SGLang | device | " + " | ".join(OUTCOMES) + " | total |"
    rule = "|---|---|" + "---:|" * (len(OUTCOMES) + 1)
    lines = [head, rule]
    for release, device, counts in rows:
        cells = [str(counts.get(o, 0)) for o in OUTCOMES]
        lines.append(f"| {release} | {device} | " + " | ".join(cells) + f" | {sum(counts.values())} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--per-simulated-device", action="store_true",
                        help="one row per simulated device (default: one row for all of them)")
    parser.add_argument("--output", type=Path, help="write the markdown table here (default: print it)")
    args = parser.parse_args(argv)
    try:
        text = table([_load(path) for path in args.reports], per_device=args.per_simulated_device)
    except BadReport as error:
        print(f"releases_table: {error}", file=sys.stderr)
        return 2
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
