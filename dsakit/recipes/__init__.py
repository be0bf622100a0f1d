"""The CPU recipe shipped with the package: torch + real SGLang (installed --no-deps), pinned, for
a machine without a GPU; `dsakit env` prints it (the test tools are the `test` extra).

Owns the recipe files (package data beside this module; the SGLang one is named by the release
table's pinned release) and their order of installation. Never imports torch or SGLang; installs
nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsakit.stack.sglang_release import PINNED_RELEASE, SUPPORTED_RELEASES

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Step:
    """One `pip install -r FILE` of the recipe."""

    name: str  # what `dsakit env --show NAME` takes
    file: str
    no_deps: bool
    why: str

    @property
    def path(self) -> Path:
        return HERE / self.file


# in installation order: torch with its dependencies first, then SGLang without its own (its full
# dependency set is gigabytes of GPU wheels; the file lists its import chain, pinned)
STEPS = (
    Step("torch", "cpu-torch.txt", False, f"torch as SGLang {PINNED_RELEASE} pins it (a CUDA build that also runs on CPU)"),
    Step("sglang", f"cpu-sglang-{PINNED_RELEASE}.txt", True, f"real SGLang {PINNED_RELEASE} and its import chain, "
         "without its GPU dependencies"),
)


def step(name: str) -> Step:
    from dsakit.errors import UsageError

    for candidate in STEPS:
        if candidate.name == name:
            return candidate
    raise UsageError(f"env --show {name!r}: no such recipe file; expected one of "
                     f"{', '.join(s.name for s in STEPS)}")


def commands(python: str = "python") -> list[str]:
    """The shell lines that build the CPU environment into the active venv."""
    lines = []
    for item in STEPS:
        flag = " --no-deps" if item.no_deps else ""
        lines.append(f"# {item.why}")
        lines.append(f"{python} -m pip install{flag} -r {item.path}")
    return lines


def run_env(show: str | None) -> int:
    """`dsakit env`: the recipe as commands (0), or one recipe file's text with --show NAME."""
    if show is not None:
        print(step(show).path.read_text(encoding="utf-8"), end="")
        return 0
    print(f"# dsakit's CPU recipe: torch + real SGLang {PINNED_RELEASE} on a machine without a GPU.")
    print(f"# SGLang releases dsakit supports: {', '.join(SUPPORTED_RELEASES)} (README: SGLang releases).")
    print("# Run in a fresh venv (python -m venv .venv && . .venv/bin/activate); then pytest your suite.")
    print("\n".join(commands()))
    from dsakit import __version__

    # pytest-dsakit is not on PyPI yet: the file a user was given (or built) is what pip can install
    print("# the test tools (pytest-xdist, pytest-split, syrupy + numpy for goldens), with dsakit from its")
    print("# wheel or sdist ('pytest-dsakit[test]' once it is published):")
    print(f"python -m pip install 'pytest_dsakit-{__version__}-py3-none-any.whl[test]'")
    return 0
