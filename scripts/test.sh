#!/usr/bin/env bash
# Sets up and runs every check: ruff, mypy and the whole pytest suite (real Postgres, Redis,
# Celery worker and TRL training on the tiny model).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
ruff check .
ruff format --check .
mypy
python -m pytest "$@"
