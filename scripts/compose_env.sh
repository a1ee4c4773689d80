#!/usr/bin/env bash
# Writes the credentials docker-compose.yml needs into .env (mode 600), generating each one
# that is not there yet; an existing value is never changed (Postgres keeps the password it
# was initialised with in its volume). Hex values: safe inside the URLs compose builds.
set -euo pipefail
cd "$(dirname "$0")/.."

touch .env
chmod 600 .env
for name in RFT_POSTGRES_PASSWORD RFT_REDIS_PASSWORD RFT_INFERENCE_TOKEN RFT_METRICS_TOKEN; do
  if ! grep -q "^${name}=" .env; then
    echo "${name}=$(python3 -c 'import secrets; print(secrets.token_hex(24))')" >> .env
    echo "generated ${name} in .env"
  fi
done
