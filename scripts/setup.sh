#!/usr/bin/env bash
# Creates .venv with the API, the CPU worker, the embedded servers and the dev tools, and
# installs bubblewrap (the reward sandbox) when it is missing and we are allowed to.
# Re-running is cheap: the dependencies are installed once per machine and pin set, outside
# the checkout (scripts/python_env.sh); a fresh clone links to them.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/python_env.sh
. scripts/python_env.sh

# The dependencies, installed once per machine and pin set (scripts/python_env.sh). The CPU
# build of torch first: an unpinned torch would pull several GB of CUDA packages.
install_main_dependencies() {
  pip_with "$1" "torch==2.13.0"
  pip_with "$1" -e ".[api,worker,embedded,dev,deepspeed]"
  pip_with "$1" -e "./sdk[cli]"
}
thin_env .venv main "$(env_key "$(declare -f install_main_dependencies)")" \
  install_main_dependencies
install_project .venv
# shellcheck disable=SC1091
. .venv/bin/activate

# apt_install PACKAGE...: install Debian packages when we are root on a Debian-like system.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 \
         && apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; }
}

if ! command -v bwrap >/dev/null 2>&1; then
  echo "installing bubblewrap for the reward-function sandbox..."
  apt_install bubblewrap \
    || echo "warning: bubblewrap (bwrap) is missing and could not be installed; reward code" \
      "will not run. Install it, or set RFT_SANDBOX_ISOLATION=none on a development machine" \
      "(insecure)." >&2
fi

# The egress tests build a "public" host in a network namespace of their own (ip) serving
# HTTPS with a throwaway certificate (openssl); both are in Debian's base images.
for tool in ip:iproute2 openssl:openssl; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    apt_install "${tool##*:}" || echo "warning: ${tool##*:} could not be installed; the egress" \
      "tests will be skipped (and fail under RFT_REQUIRE_ALL_LAYERS=1, as in CI)" >&2
  fi
done

# The dashboard's browser tests drive Debian's Chromium (never a downloaded browser).
if [ "${RFT_SETUP_BROWSER:-1}" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  echo "installing chromium for the dashboard's browser tests..."
  apt_install chromium fonts-liberation \
    || echo "warning: chromium could not be installed; the browser tests will be skipped" \
      "(and fail under RFT_REQUIRE_ALL_LAYERS=1, as in CI)" >&2
fi
