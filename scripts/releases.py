"""The SGLang release table (`dsakit.stack.sglang_release`) for the checkout's shell scripts.

    python scripts/releases.py pinned        # the release the CPU recipe pins (scripts/env.sh installs it)
    python scripts/releases.py others        # every other supported release, oldest first (.ci/run sweeps them)
    python scripts/releases.py supported     # every supported release, oldest first

One release per line. Reads this checkout's dsakit without installing or importing anything
else (standard library only), so scripts/env.sh can ask before its venv exists. Exit codes: 0
ok, 2 usage error.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's dsakit, whatever the interpreter has installed

QUESTIONS = ("pinned", "others", "supported")


def answer(question: str) -> tuple[str, ...]:
    from dsakit.stack.sglang_release import PINNED_RELEASE, SUPPORTED_RELEASES

    if question == "pinned":
        return (PINNED_RELEASE,)
    if question == "others":
        return tuple(r for r in SUPPORTED_RELEASES if r != PINNED_RELEASE)
    return SUPPORTED_RELEASES


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in QUESTIONS:
        print(f"usage: python scripts/releases.py {{{' | '.join(QUESTIONS)}}}", file=sys.stderr)
        return 2
    print("\n".join(answer(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
