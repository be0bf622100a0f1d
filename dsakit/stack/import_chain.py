"""Whether SGLang's own import chain loads in this environment (the `sglang:import-chain` gate).

Owns: importing the release's hub modules once per process, the clause naming the release, the
module and the import error when that fails, and telling an error raised while SGLang was being
imported from any other. Imports only inside a running test (importing SGLang takes seconds):
never at collection, in marks or in `dsakit capabilities`.
"""

from __future__ import annotations

import functools
import importlib
import os

from dsakit import active

# The modules every contract suite's SGLang side goes through: ServerArgs (SGLangScope checks
# server args against it; it imports the function-call parsers), the batch types (they import
# srt/configs, hence transformers' config registry), the pools, the backends and the registry that
# picks one. A release lacking one of the files (no DeepSeek-V4 backend) skips it.
HUB_MODULES = (
    "sglang.srt.server_args",
    "sglang.srt.model_executor.forward_batch_info",
    "sglang.srt.mem_cache.memory_pool",
    "sglang.srt.layers.attention.dsa_backend",
    "sglang.srt.layers.attention.deepseek_v4_backend",
    "sglang.srt.layers.attention.attention_registry",
)

COVERED_BY = "an environment with that release's own dependency pins runs these tests"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


@functools.lru_cache(maxsize=1)
def import_failure() -> str | None:
    """None when every hub module imports; else "SGLang X's import chain ... raised ...".

    Cached: a second import of a module that failed half-way re-runs its top level, which fails
    differently (or worse, passes on a half-initialised registry)."""
    from dsakit.errors import UsageError
    from dsakit.stack.sglang_release import installed_release

    try:
        release = installed_release()
    except UsageError as error:
        return str(error)
    failed: dict[str, list[str]] = {}  # error -> the modules whose import raised it
    for module in HUB_MODULES:
        relative = module.split(".", 1)[1].replace(".", "/") + ".py"
        if not release.file(relative).is_file():
            continue
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - any error of SGLang's own top level closes the gate
            failed.setdefault(_first_line(error), []).append(module)
    if not failed:
        return None
    clauses = [f"import {modules[0]}" + (f" (and {len(modules) - 1} more)" if len(modules) > 1 else "")
               + f" raised {error}" for error, modules in failed.items()]
    return f"SGLang {release.version} does not: {'; '.join(clauses)}"


def gate_check() -> str | None:
    """The gate's answer: inside a test (setup, call or teardown) the import outcome; elsewhere
    None, since the check imports SGLang (the requirement says it is checked in tests only)."""
    # PYTEST_CURRENT_TEST alone is inherited by a test's subprocesses (`dsakit capabilities`, a
    # `python -c` a test starts): the run must be this process's own
    if not os.environ.get("PYTEST_CURRENT_TEST") or active.run_in_this_process() is None:
        return None
    return import_failure()


def raised_importing_sglang(error: BaseException) -> bool:
    """Was `error` (or an error it was raised from) raised while an SGLang module of the release
    under test ran its top level, i.e. while SGLang was being imported?"""
    from dsakit.errors import UsageError
    from dsakit.stack.sglang_release import installed_release

    try:
        package = str(installed_release().package_dir) + os.sep
    except UsageError:
        return False
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        tb = current.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code.co_name == "<module>" and os.path.abspath(code.co_filename).startswith(package):
                return True
            tb = tb.tb_next
        current = current.__cause__ or current.__context__
    return False
