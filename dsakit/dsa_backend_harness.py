"""Build the real `DeepseekSparseAttnBackend` from a strict mock runner, inside an SGLang scope.

Owns: the server args a DSA backend is built with (per role, with or without speculative
decoding) and keeping the SGLangScope open while a test drives the backend (its metadata code
reads the runtime context too). Imports SGLang lazily.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from dsakit.sglang_scope import SGLangScope

# flashmla_sparse is SGLang's DSA default on SM 9.0 and allocates no kernel state at __init__.
DSA_SERVER_ARGS: dict[str, Any] = {
    "model_path": "dsakit/mock-deepseek-v32",
    "dsa_prefill_backend": "flashmla_sparse",
    "dsa_decode_backend": "flashmla_sparse",
}

# EAGLE/MTP with a chain of 3 steps and 4 draft tokens: what DeepSeek MTP runs.
SPECULATIVE_SERVER_ARGS: dict[str, Any] = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}


@contextmanager
def dsa_backend(
    runner: Any,
    *,
    speculative: bool = False,
    server_args: Mapping[str, Any] | None = None,
    env: Mapping[str, str | bool | int] | None = None,
    **backend_kwargs: Any,
) -> Iterator[Any]:
    """`with dsa_backend(runner, speculative=True) as backend:` — scope stays open in the body."""
    from sglang.srt.layers.attention.dsa_backend import DeepseekSparseAttnBackend

    args = {**DSA_SERVER_ARGS, **(SPECULATIVE_SERVER_ARGS if speculative else {}), **(server_args or {})}
    with SGLangScope(server_args=args, env=env):
        if speculative and "speculative_num_steps" not in backend_kwargs:
            backend_kwargs["speculative_num_steps"] = args["speculative_num_steps"]
        yield DeepseekSparseAttnBackend(runner, **backend_kwargs)
