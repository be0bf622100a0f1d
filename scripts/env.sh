#!/usr/bin/env bash
# Set up (once, idempotently) and run dsakit's jobs on a fresh machine. Usage:
#   bash scripts/env.sh main                   # the contract suites against the pinned SGLang + capability report
#   bash scripts/env.sh main --sglang 0.5.21   # the same against another SGLang release (see below)
#   bash scripts/env.sh test                   # dsakit's own tests
# The venv lives in .venv; it is (re)installed when requirements/ or pyproject.toml change.
# --sglang X: the release's wheel (`pip download --no-deps sglang==X`, kept in .cache/sglang-X)
# is unpacked and put on PYTHONPATH over the venv's pinned SGLang; tests whose SGLang import
# chain does not load with the venv's pins skip as [sglang:import-chain]. Report:
# dsakit-report-X.json (dsakit-report.json for the pinned release).
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: bash scripts/env.sh main [--sglang VERSION] | test   (VERSION like 0.5.21)" >&2; exit 2; }
job=${1:-}
case "$job" in main|test) ;; *) usage ;; esac
shift
release=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sglang) [ $# -ge 2 ] || usage; release=$2; shift 2 ;;
    --sglang=*) release=${1#--sglang=}; shift ;;
    *) echo "scripts/env.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -n "$release" ]; then
  [ "$job" = main ] || { echo "scripts/env.sh: --sglang applies to the main job only" >&2; exit 2; }
  [[ "$release" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "scripts/env.sh: --sglang '$release' is not a release number (e.g. 0.5.21)" >&2; exit 2; }
fi

PY=${PYTHON:-python3}
# the release the CPU recipe pins: the release table's (dsakit/stack/sglang_release.py), read before any venv
pinned=$("$PY" scripts/releases.py pinned)
stamp_of() { cat pyproject.toml requirements/*.txt | sha256sum | cut -d' ' -f1; }
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.dsakit-stamp 2>/dev/null)" != "$(stamp_of)" ]; then
  echo "== dsakit: installing the pinned environment into .venv ($(grep -m1 '^torch==' requirements/cpu-torch.txt), SGLang $pinned --no-deps, test tools)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/cpu-torch.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r "requirements/cpu-sglang-$pinned.txt"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/test.txt
  # the distribution was called `dsakit` before 0.1.0 was published as pytest-dsakit: drop a stale one
  .venv/bin/python -m pip uninstall -q -y --disable-pip-version-check dsakit >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  stamp_of > .venv/.dsakit-stamp
fi
export PATH="$PWD/.venv/bin:$PATH"

report=dsakit-report.json
# the pinned release's import chain must load: a skip behind sglang:import-chain fails the job
must_run=(--dsakit-must-run sglang:import-chain)
if [ -n "$release" ]; then
  tree=".cache/sglang-$release/tree"
  if [ ! -f "$tree/sglang/__init__.py" ]; then
    echo "== dsakit: SGLang $release from its wheel (pip download --no-deps) into $tree"
    rm -rf ".cache/sglang-$release"
    python scripts/release_wheel.py "$release" ".cache/sglang-$release" >/dev/null \
      || { rm -rf ".cache/sglang-$release"
           echo "scripts/env.sh: cannot download sglang==$release (offline, or no such release)" >&2; exit 2; }
  fi
  export PYTHONPATH="$PWD/$tree${PYTHONPATH:+:$PYTHONPATH}"
  report="dsakit-report-$release.json"
  must_run=()
fi

case "$job" in
  main)
    dsakit capabilities
    dsakit contract check
    exec python -m pytest contracts -n 2 --dsakit-report "$report" "${must_run[@]}"
    ;;
  test)
    # the wing order in pyproject.toml [tool.importlinter], on the package as an install lays it out
    python scripts/installed_layout.py lint-imports --no-cache --no-logo
    exec python -m pytest tests -n 2
    ;;
esac
