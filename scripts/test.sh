#!/usr/bin/env bash
# The README's test command. On a machine with only Python 3.11+ and Go it installs the
# Python dependencies into .venv, builds (or reuses) the control-plane binaries, then runs
# ruff, mypy --strict, the import-linter layering contracts and the whole pytest suite,
# which starts its own local control plane. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-env.sh

step() { printf '\n== %s\n' "$*"; }
# One command per line: under `set -e` a failure on the left of `&&` does not stop the
# script, and a lint error once went unnoticed that way.
step "lint (ruff)";            .venv/bin/ruff check .
step "format (ruff)";          .venv/bin/ruff format --check .
step "types (mypy --strict)";  .venv/bin/mypy
step "layering (import-linter)"; .venv/bin/lint-imports
step "tests (pytest)";         .venv/bin/pytest -ra "$@"
