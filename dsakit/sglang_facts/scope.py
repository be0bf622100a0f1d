"""One scope that applies SGLang configuration through SGLang's own API and restores all of it.

Owns: server args, the single-GPU parallel topology and SGLANG_* flags, undone in reverse order on
exit even when the body raised; and `sglang_state()`, a comparable snapshot of exactly that state
for leak checks. Imports SGLang only when entered; must not decide what to configure.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from dsakit.errors import UsageError

# Names accepted by get_parallel().override() in both 0.5.17 and 0.5.23 (world_size/world_rank
# are 0.5.17-only).
SINGLE_GPU_PARALLEL: dict[str, int] = {
    "tp_size": 1, "tp_rank": 0, "pp_size": 1, "pp_rank": 0,
    "attn_tp_size": 1, "attn_tp_rank": 0, "attn_cp_size": 1, "attn_cp_rank": 0,
    "attn_dcp_size": 1, "attn_dcp_rank": 0, "attn_dp_size": 1, "attn_dp_rank": 0,
}


def _parallel_field_names() -> frozenset[str] | None:
    """The parallel fields `get_parallel().override` accepts on this release (None: unknown).

    The default topology is filtered to them (a future release may drop a name); an explicit
    `parallel=` mapping is checked against them and refused with a UsageError instead."""
    from sglang.srt import runtime_context

    probe = getattr(runtime_context, "_parallel_fields", None)  # 0.5.23
    if callable(probe):
        return frozenset(probe())
    names = getattr(runtime_context, "_PARALLEL_FIELDS", None)  # 0.5.17
    return frozenset(names) if names is not None else None


def _env_text(value: str | bool | int) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class SGLangScope:
    """`with SGLangScope(server_args={...}, env={...}): ...` — see the module docstring.

    server_args  ServerArgs fields, published as a fresh ServerArgs for the scope
    env          SGLANG_* flags; each must be a flag SGLang's `envs` declares
    parallel     parallel-topology overrides (default: one GPU, no TP/DP/CP)
    """

    def __init__(
        self,
        server_args: Mapping[str, Any] | None = None,
        env: Mapping[str, str | bool | int] | None = None,
        parallel: Mapping[str, int] | None = None,
    ) -> None:
        self.server_args = dict(server_args or {})
        self.env = {name: _env_text(value) for name, value in (env or {}).items()}
        self._default_parallel = parallel is None
        self.parallel = dict(SINGLE_GPU_PARALLEL if parallel is None else parallel)
        self._stack: contextlib.ExitStack | None = None

    def _check_env_names(self) -> None:
        from sglang.srt.environ import envs

        unknown = [name for name in self.env if not hasattr(type(envs), name) and not hasattr(envs, name)]
        if unknown:
            raise UsageError(
                f"unknown SGLang environment flag(s) {', '.join(sorted(unknown))}: "
                "expected names declared in sglang.srt.environ.envs (e.g. SGLANG_DSA_FUSE_TOPK)"
            )

    def _check_server_args(self) -> None:
        from sglang.srt.server_args import ServerArgs

        fields = server_arg_fields(ServerArgs)
        unknown = sorted(set(self.server_args) - fields)
        if unknown:
            raise UsageError(
                f"unknown server arg(s) {', '.join(unknown)} for this SGLang's ServerArgs "
                f"(e.g. dsa_topk_backend, dsa_decode_backend, speculative_dsa_topk_backend where the release has it)"
            )

    def _parallel_for_release(self) -> dict[str, int]:
        known = _parallel_field_names()
        if known is None:
            return self.parallel
        if self._default_parallel:
            return {name: value for name, value in self.parallel.items() if name in known}
        unknown = sorted(set(self.parallel) - known)
        if unknown:
            raise UsageError(
                f"unknown parallel field(s) {', '.join(unknown)} for this SGLang; it declares "
                f"e.g. {', '.join(sorted(known & set(SINGLE_GPU_PARALLEL)))}"
            )
        return self.parallel

    def __enter__(self) -> SGLangScope:
        if self._stack is not None:
            raise UsageError("this SGLangScope is already entered; build a new one per use")
        self._check_env_names()
        self._check_server_args()
        parallel = self._parallel_for_release()
        from sglang.srt.runtime_context import get_context, get_parallel

        stack = contextlib.ExitStack()
        try:
            saved_env = {name: os.environ.get(name) for name in self.env}
            stack.callback(_restore_env, saved_env)
            os.environ.update(self.env)
            override = get_context().override_server_args(**self.server_args)
            override.install()
            stack.callback(override.restore)
            if parallel:
                stack.enter_context(get_parallel().override(**parallel))
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


def server_arg_fields(server_args_class: type) -> frozenset[str]:
    """Field names of ServerArgs: a msgspec Struct in 0.5.23, a dataclass in 0.5.17."""
    struct_fields = getattr(server_args_class, "__struct_fields__", None)
    if struct_fields is not None:
        return frozenset(struct_fields)
    import dataclasses

    return frozenset(f.name for f in dataclasses.fields(server_args_class))


def _restore_env(saved: Mapping[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@dataclass(frozen=True)
class SGLangState:
    """What an `SGLangScope` may touch, captured for before/after comparison (`==`).

    Context objects are compared by identity (`id`), which is exact while the context holds them.
    """

    env: tuple[tuple[str, str], ...]
    server_args: int | None
    config_bags: int | None
    overrides_log: tuple[object, ...]
    publish_role: object
    parallel_overrides: tuple[tuple[str, object], ...]
    parallel_config: int | None

    def diff(self, other: SGLangState) -> list[str]:
        """Human lines naming each field that differs (empty when equal)."""
        lines = []
        for name in self.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                if name == "env":
                    a, b = dict(mine), dict(theirs)
                    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
                    lines.append(f"env: {', '.join(f'{k}: {a.get(k)!r} -> {b.get(k)!r}' for k in changed)}")
                else:
                    lines.append(f"{name}: {mine!r} -> {theirs!r}")
        return lines


def _ident(value: object) -> int | None:
    return None if value is None else id(value)


def sglang_state() -> SGLangState:
    """Snapshot of the SGLANG_* environment, the runtime context's server-args slot and the
    parallel overrides. Imports SGLang's runtime context."""
    from sglang.srt.runtime_context import get_context, get_parallel

    ctx = get_context()
    parallel = get_parallel()
    overrides = getattr(parallel, "_overrides", {}) or {}
    log = getattr(ctx, "_overrides_log", None) or ()
    return SGLangState(
        env=tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("SGLANG_"))),
        server_args=_ident(getattr(ctx, "_server_args", None)),
        config_bags=_ident(getattr(ctx, "_config_bags", None)),
        overrides_log=tuple(id(entry) for entry in log),
        publish_role=getattr(ctx, "_publish_role", None),
        parallel_overrides=tuple(sorted((k, repr(v)) for k, v in dict(overrides).items())),
        parallel_config=_ident(getattr(parallel, "_config", None)),
    )
