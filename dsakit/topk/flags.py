"""The DSA top-k configuration surface of one SGLang release, read from its source (AST).

Owns: which ServerArgs fields pick the top-k backend (and the per-role split where the release
has it), their choices and defaults, the `DSATopKBackend` values and the top-k env flags. Never
imports SGLang or torch; must not decide what a configuration resolves to (`dsakit.topk.rules`).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

from dsakit.stack import sglang_source
from dsakit.stack.sglang_release import SERVER_ARGS_FILES, SGLangRelease, installed_release

TARGET_FIELD = "dsa_topk_backend"
DRAFT_FIELD = "speculative_dsa_topk_backend"
FUSE_FLAG = "SGLANG_DSA_FUSE_TOPK"
V2_FLAG = "SGLANG_OPT_USE_TOPK_V2"
TOPK_ENV_FLAGS = (
    FUSE_FLAG,
    V2_FLAG,
    "SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC",
    "SGLANG_DSA_TOPK_FLASHINFER_TIE_BREAK",
)


@dataclass(frozen=True)
class ServerArgField:
    """One ServerArgs field as declared in source: its choices and default."""

    name: str
    choices: tuple[str, ...]
    default: str | None
    declared_in: str


@dataclass(frozen=True)
class TopkFlags:
    """The top-k surface of one release. `draft` is None where the release has no split."""

    version: str
    target: ServerArgField
    draft: ServerArgField | None
    enum_values: tuple[str, ...]
    env_defaults: dict[str, object]

    @property
    def has_split(self) -> bool:
        return self.draft is not None

    def choices(self, role: str = "target") -> tuple[str, ...]:
        field = self.target if role == "target" or self.draft is None else self.draft
        return field.choices

    @property
    def all_choices(self) -> tuple[str, ...]:
        """Backend names either flag accepts, in declaration order."""
        seen = list(self.target.choices)
        if self.draft is not None:
            seen += [c for c in self.draft.choices if c not in seen]
        return tuple(seen)


def _python_files(release: SGLangRelease) -> list[Path]:
    return release.python_files(SERVER_ARGS_FILES)


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            out[node.target.id] = node.value
    return out


def _strings(node: ast.expr | None, constants: dict[str, ast.expr]) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name) and node.id in constants:
        node = constants[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        values = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return tuple(values)
    return None


def _field_in(path: Path, name: str, root: Path) -> ServerArgField | None:
    tree = sglang_source.tree(path)
    if tree is None:
        return None
    constants = _module_constants(tree)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == name):
            continue
        choices: tuple[str, ...] | None = None
        for call in ast.walk(node.annotation):
            if isinstance(call, ast.Call):
                for kw in call.keywords:
                    if kw.arg == "choices":
                        choices = _strings(kw.value, constants)
        default = node.value.value if isinstance(node.value, ast.Constant) else None
        return ServerArgField(name, choices or (), default if isinstance(default, str) else None,
                              str(path.relative_to(root)))
    return None


def _find_field(release: SGLangRelease, name: str) -> ServerArgField | None:
    for path in _python_files(release):
        found = _field_in(path, name, release.package_dir)
        if found is not None:
            return found
    return None


def _enum_values(release: SGLangRelease) -> tuple[str, ...]:
    from dsakit.stack.sglang_release import DSA_TOPK_BACKEND_FILE

    tree = sglang_source.tree(release.file(DSA_TOPK_BACKEND_FILE))
    if tree is None:
        return ()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "DSATopKBackend":
            return tuple(
                item.value.value
                for item in node.body
                if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant)
                and isinstance(item.value.value, str)
            )
    return ()


def _env_defaults(release: SGLangRelease) -> dict[str, object]:
    from dsakit.stack.sglang_release import ENVIRON_FILE

    tree = sglang_source.tree(release.file(ENVIRON_FILE))
    if tree is None:
        return {}
    out: dict[str, object] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if (isinstance(item, ast.Assign) and len(item.targets) == 1
                    and isinstance(item.targets[0], ast.Name) and item.targets[0].id in TOPK_ENV_FLAGS
                    and isinstance(item.value, ast.Call)):
                first = item.value.args[0] if item.value.args else None
                out.setdefault(item.targets[0].id,
                               first.value if isinstance(first, ast.Constant) else None)
    return out


def topk_flags(release: SGLangRelease | None = None) -> TopkFlags:
    """The top-k surface of `release` (default: the installed SGLang), cached per tree."""
    release = release or installed_release()
    return _topk_flags_cached(release)


@functools.lru_cache(maxsize=8)
def _topk_flags_cached(release: SGLangRelease) -> TopkFlags:
    from dsakit.errors import UsageError

    target = _find_field(release, TARGET_FIELD)
    if target is None:
        raise UsageError(
            f"SGLang {release.version} at {release.package_dir} declares no ServerArgs field "
            f"{TARGET_FIELD!r} (looked in {', '.join(SERVER_ARGS_FILES)}): it has no DSA top-k backend "
            f"flag; SGLang 0.5.17 and 0.5.23 have one"
        )
    return TopkFlags(
        version=release.version,
        target=target,
        draft=_find_field(release, DRAFT_FIELD),
        enum_values=_enum_values(release),
        env_defaults=_env_defaults(release),
    )


# Public alias (`dsakit.release_topk_flags`): `dsakit.topk.flags` is this module once imported.
release_topk_flags = topk_flags
