#!/usr/bin/env bash
# Sets up and runs the service on this machine (embedded Postgres and Redis unless
# RFT_DATABASE_URL / RFT_REDIS_URL are set) and trains the demo job through the API.
# Pass --keep-running to leave the service up after the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo needs no browser; the test command installs it.
RFT_SETUP_BROWSER=0 bash scripts/setup.sh
# shellcheck disable=SC1091
. .venv/bin/activate
if [ "${1:-}" = "--keep-running" ]; then
  exec rft-server up --demo
fi
exec rft-server up --demo --exit-after-demo
