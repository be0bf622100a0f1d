#!/usr/bin/env bash
# Set up (once, idempotently) and run dsakit's jobs on a fresh machine. Usage:
#   bash scripts/env.sh main   # the contract suites against real SGLang + capability report
#   bash scripts/env.sh test   # dsakit's own tests
# The venv lives in .venv; it is (re)installed when requirements/ or pyproject.toml change.
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-}
case "$job" in main|test) ;; *) echo "usage: bash scripts/env.sh main|test" >&2; exit 2 ;; esac

PY=${PYTHON:-python3}
stamp_of() { cat pyproject.toml requirements/*.txt | sha256sum | cut -d' ' -f1; }
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.dsakit-stamp 2>/dev/null)" != "$(stamp_of)" ]; then
  echo "== dsakit: installing the pinned environment into .venv (torch 2.14.1, SGLang 0.5.23 --no-deps, test tools)"
  [ -x .venv/bin/python ] || "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/cpu-torch.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -r requirements/cpu-sglang-0.5.23.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/test.txt
  # the distribution was called `dsakit` before 0.1.0 was published as pytest-dsakit: drop a stale one
  .venv/bin/python -m pip uninstall -q -y --disable-pip-version-check dsakit >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  stamp_of > .venv/.dsakit-stamp
fi
export PATH="$PWD/.venv/bin:$PATH"

case "$job" in
  main)
    dsakit capabilities
    dsakit contract check
    exec python -m pytest contracts -n 2 --dsakit-report dsakit-report.json
    ;;
  test)
    lint-imports --no-cache --no-logo  # the wing order in pyproject.toml [tool.importlinter]
    exec python -m pytest tests -n 2
    ;;
esac
