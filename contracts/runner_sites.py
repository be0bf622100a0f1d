"""Where the real ModelRunner of each supported SGLang release sets each attribute (declared data).

Owns reading `runner_sites.json` (written by `python scripts/runner_sites.py --write` from the source
scan) and the one wording of a site for a release, saying so when that tree's files differ from the
release's. Must not parse SGLang source (it hashes files) nor import dsakit.sglang_facts.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsakit.stack import sglang_release
from dsakit.errors import UsageError
from dsakit.stack.sglang_release import SERVER_ARGS_FILES, SGLangRelease

TABLE_FILE = Path(__file__).with_name("runner_sites.json")
FORMAT = 1
_CHECK = "`dsakit contract check` reads it"


@dataclass(frozen=True)
class RunnerSite:
    """An attribute's site as a phrase for messages, and the `file:line` a declaration's `set_by`
    takes (None where the released ModelRunner does not set the attribute itself)."""

    phrase: str
    set_by: str | None = None


def file_digest(path: Path) -> str:
    """`sha256:<hex>` of the file's bytes ("" when it cannot be read)."""
    try:
        stat = path.stat()
    except OSError:
        return ""
    return _digest(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _digest(path: Path, mtime_ns: int, size: int) -> str:  # keyed by the stamp: an edit is read again
    try:
        return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def load_table(path: Path = TABLE_FILE) -> dict[str, Any]:
    """The table: {"format": 1, "releases": {version: row}} (see scripts/runner_sites.py)."""
    table: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    if table.get("format") != FORMAT:
        raise UsageError(f"{path}: format {table.get('format')!r}, expected {FORMAT}: regenerate it with "
                         "`python scripts/runner_sites.py --write`")
    return table


def releases(table: dict[str, Any] | None = None) -> tuple[str, ...]:
    """The SGLang releases the table has, oldest first."""
    found = (table or load_table())["releases"]
    return tuple(sorted(found, key=sglang_release.release_key))


def tree_digests(release: SGLangRelease, files: list[str]) -> dict[str, str]:
    """`file_digest` of each of `files` (relative to the package dir's parent) in this tree."""
    return {relative: file_digest(release.package_dir.parent / relative) for relative in files}


def server_args_files(release: SGLangRelease) -> list[str]:
    """The ServerArgs files this tree has (a listing, not a parse), relative to the package dir's parent."""
    return [str(path.relative_to(release.package_dir.parent)) for path in release.python_files(SERVER_ARGS_FILES)]


def _differing(release: SGLangRelease, declared: dict[str, str], listed: list[str] | None = None) -> list[str]:
    """The files (base names) whose digest in this tree is not the release's: edited, missing or new."""
    here = tree_digests(release, sorted(set(declared) | set(listed or ())))
    return [Path(relative).name for relative, digest in here.items() if declared.get(relative) != digest]


def _how(name: str, owner: str) -> str:
    """How the runner's class gives it `name`: a method of its own, a class-body name, a method's assignment."""
    if owner.endswith(f".{name}"):
        return f"defines it: {owner}"
    return f"sets it in {owner}" if "." in owner else f"sets it in the {owner} class body"


def _runner_phrase(name: str, attribute: str, row: dict[str, Any], version: str) -> RunnerSite:
    """The released tree's answer (its files as the table read them)."""
    found = next(((file, sites[name]) for file, sites in row["runner"].items() if name in sites), None)
    if found is None:
        it = "it" if name == attribute else name
        return RunnerSite(f"never sets {it} (SGLang {version})")  # after "the real ModelRunner: "
    site, owner = f"{found[0]}:{found[1][0]}", found[1][1]
    if name == attribute:
        return RunnerSite(f"{site} (ModelRunner {_how(name, owner)})", site)
    field = attribute.partition(".")[2].split(".", 1)[0]
    if name != "server_args":
        return RunnerSite(f"ModelRunner sets {name} at {site} (in {owner}); where {name}.{field} is set "
                          "is not in dsakit's table")
    declared = next((f"{file}:{fields[field]}" for file, fields in row["server_args"].items() if field in fields),
                    None)
    if declared is None:
        return RunnerSite(f"not a ServerArgs field: SGLang {version} declares no server_args.{field} "
                          f"(ModelRunner sets server_args itself at {site})")
    return RunnerSite(f"{declared} (ServerArgs field {field}; ModelRunner sets server_args at {site})", declared)


def _as_released(answer: RunnerSite, name: str, attribute: str, row: dict[str, Any], version: str,
                 changed: list[str]) -> RunnerSite:
    """The released answer, worded as no more than that: this tree's files differ from the release's
    (a PR tree may set what the release never does, so "never sets it" is not claimed of it)."""
    differs = f"this tree's {', '.join(changed)} {'differs' if len(changed) == 1 else 'differ'} ({_CHECK})"
    if not any(name in sites for sites in row["runner"].values()):
        it = "it" if name == attribute else name
        return RunnerSite(f"never sets {it} in SGLang {version} as released; {differs}")
    return RunnerSite(f"{answer.phrase} in SGLang {version} as released; {differs}", answer.set_by)


def runner_site(attribute: str, release: SGLangRelease | None = None,
                table: dict[str, Any] | None = None) -> RunnerSite:
    """Where the real ModelRunner of `release` (default: the SGLang imported here) sets `attribute`
    (its first dotted part; a ServerArgs field below server_args). Never raises: a missing SGLang or
    a release the table lacks becomes a phrase."""
    if table is None:
        try:
            table = load_table()
        except (OSError, ValueError, UsageError) as error:  # a broken install: a phrase, not a traceback
            return RunnerSite(f"unknown (cannot read dsakit's table of ModelRunner sites: {error}; "
                              "reinstall dsakit)")
    known = ", ".join(releases(table))
    if release is None:
        try:
            release = sglang_release.installed_release()
        except UsageError:
            return RunnerSite(f"unknown (SGLang is not installed here; dsakit's table of ModelRunner sites "
                              f"has SGLang {known})")
    row = table["releases"].get(release.version)
    if row is None:
        which = "this tree's version is unknown" if release.version == "unknown" else f"not {release.version}"
        return RunnerSite(f"unknown: dsakit's table of ModelRunner sites has SGLang {known}, {which} "
                          "(`dsakit contract check` reads this tree)")
    name = attribute.split(".", 1)[0]
    answer = _runner_phrase(name, attribute, row, release.version)
    changed = _differing(release, row["runner_files"])
    if name == "server_args" and name != attribute:
        changed += _differing(release, row["server_args_files"], server_args_files(release))
    return _as_released(answer, name, attribute, row, release.version, changed) if changed else answer
