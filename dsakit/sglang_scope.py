"""One scope that applies SGLang configuration through SGLang's own API and restores all of it.

Owns: server args (`get_context().override_server_args(...).install()` / `.restore()`), the
single-GPU parallel topology (`get_parallel().override(...)`), and SGLANG_* environment flags
(read by `sglang.srt.environ.envs.X.get()` from os.environ on every call). Everything is undone
in `close()` / `__exit__`, in reverse order, even when the body raised — unlike
`envs.X.override()`, which does not restore on exceptions. Imports SGLang only when entered.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
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

    def __enter__(self) -> SGLangScope:
        self._check_env_names()
        self._check_server_args()
        from sglang.srt.runtime_context import get_context, get_parallel

        stack = contextlib.ExitStack()
        try:
            saved_env = {name: os.environ.get(name) for name in self.env}
            stack.callback(_restore_env, saved_env)
            os.environ.update(self.env)
            override = get_context().override_server_args(**self.server_args)
            override.install()
            stack.callback(override.restore)
            if self.parallel:
                stack.enter_context(get_parallel().override(**self.parallel))
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
