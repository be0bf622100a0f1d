"""One SGLang release's wheel, downloaded and unpacked: `WHERE/wheels/sglang-X-*.whl` and
`WHERE/tree/sglang/`.

The one place that fetches a release for a checkout: scripts/env.sh (`--sglang X`),
scripts/runner_sites.py and the tests' `sglang_release_tree` fixture call it. The tree appears
whole or not at all (unpacked beside it under this process's id, then renamed), so a process killed
mid-unpack, or a second one unpacking at the same time, leaves no half tree.

    python scripts/release_wheel.py VERSION WHERE    # prints WHERE/tree; exit 2 where pip cannot fetch it
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path


class WheelUnavailable(Exception):
    """`pip download --no-deps sglang==X` found no wheel; the message is pip's last line."""


def unpacked_release(version: str, where: Path, timeout: float | None = None) -> Path:
    """`WHERE/tree`, the folder holding SGLang `version`'s `sglang/`, downloaded and unpacked unless
    it is there already. Raises WheelUnavailable where pip cannot fetch the wheel (offline, no such
    release)."""
    tree = where / "tree"
    if (tree / "sglang" / "__init__.py").is_file():
        return tree
    wheels = where / "wheels"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
         "--disable-pip-version-check", f"sglang=={version}", "-d", str(wheels)],
        capture_output=True, text=True, timeout=timeout, check=False)
    found = sorted(wheels.glob(f"sglang-{version}-*.whl")) if done.returncode == 0 else []
    if not found:
        raise WheelUnavailable((done.stderr.strip().splitlines() or ["pip found no wheel"])[-1])
    partial = where / f"tree.partial-{os.getpid()}"
    try:
        with zipfile.ZipFile(found[0]) as wheel:
            wheel.extractall(partial, [n for n in wheel.namelist() if n.startswith("sglang/")])
        partial.rename(tree)
    except OSError:
        if not (tree / "sglang" / "__init__.py").is_file():  # not another process's rename
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return tree


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/release_wheel.py VERSION WHERE   (VERSION like 0.5.21)", file=sys.stderr)
        return 2
    version, where = argv
    try:
        print(unpacked_release(version, Path(where)))
    except WheelUnavailable as error:
        print(f"scripts/release_wheel.py: no SGLang {version} wheel: `pip download --no-deps sglang=={version}` "
              f"failed (offline, or no such release): {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
