"""The source scan behind the declared ModelRunner sites (`dsakit.contracts.runner_sites`' table).

Owns one release's row of that table, read with `runner_source` (the runner's assignments and their
methods, the ServerArgs fields, the digests of the files read), and the table's text. Must not be
what the mock reads: the mock reads the table. `python scripts/runner_sites.py --write` runs it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dsakit.contracts.runner_sites import FORMAT, releases, server_args_files, tree_digests
from dsakit.stack.sglang_release import SGLangRelease
from dsakit.sglang_facts.runner_source import (
    runner_assignments,
    runner_files,
    runner_owners,
    server_args_fields,
)


def release_row(release: SGLangRelease) -> dict[str, Any]:
    """{"runner": {file: {name: [line, owner]}}, "server_args": {file: {field: line}}, and the
    digests of the files each was read from}: what `runner_site` words for this release."""
    owners = runner_owners(release)
    runner: dict[str, dict[str, list[Any]]] = {}
    for name, site in sorted(runner_assignments(release).items()):
        runner.setdefault(site.file, {})[name] = [site.line, owners[name]]
    fields: dict[str, dict[str, int]] = {}
    for name, site in sorted(server_args_fields(release).items()):
        fields.setdefault(site.file, {})[name] = site.line
    return {
        "runner_files": tree_digests(release, list(runner_files(release))),
        "runner": runner,
        "server_args_files": tree_digests(release, server_args_files(release)),
        "server_args": fields,
    }


def table(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The whole table from each release's row."""
    return {"format": FORMAT, "releases": {version: rows[version] for version in releases({"releases": rows})}}


def render(whole: dict[str, Any]) -> str:
    """The table's JSON text: one attribute a line, so a regeneration diffs by attribute."""
    text = json.dumps(whole, indent=1, sort_keys=False)
    return re.sub(r'\[\n\s+(\d+),\n\s+("[^"\n]*")\n\s+\]', r"[\1, \2]", text) + "\n"
