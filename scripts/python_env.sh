# Sourced by scripts/setup.sh and scripts/setup_vllm.sh: a checkout's virtual environment whose
# dependencies are installed once per machine and pin set, outside the checkout.
#
# Installing the dependencies (torch, TRL, DeepSpeed, vLLM's CPU build...) takes 3-5 minutes of
# CPU; on a fresh clone (CI, a new worktree) that was paid again for the same pins. Here they
# go to a dependency environment under the user's cache folder,
# ``rft/envs/<kind>-<key>``, the key a hash of what decides what gets installed (the
# pyproject files, the install commands, the Python). The checkout's own environment (.venv,
# .venv-vllm) is a thin one: a .pth file adds the dependency environment's site-packages, and
# the project and the SDK are installed editable, so the code that runs is always this
# checkout's. A dependency environment never holds the project itself (it is uninstalled after
# the dependencies are resolved), so no checkout can import another's code through it.
# A change of pins builds a new dependency environment; the two newest of a kind are kept.

# find_python: the interpreter new environments are made with ($PYTHON, else python3.11...).
find_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  for candidate in python3.11 python3.12 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then echo "$candidate"; return; fi
  done
  echo "no python3 found (set PYTHON)" >&2
  return 1
}

# Some machines' pip configs name extra indexes that do not exist; pip warns for every package.
# PYTHONWARNINGS: setuptools' build backend warns on every editable install of ours (a
# BuildBackendWarning about folders named like the package); nothing for the user to act on.
# Usage: pip_with PYTHON ARGS...
pip_with() {
  local python="$1"
  shift
  PYTHONWARNINGS=ignore "$python" -m pip install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "neither a file nor a directory" || true; }
}

# thin_env VENV KIND KEY INSTALL: makes VENV a thin environment over the dependency environment
# KIND-KEY, building that first (INSTALL PYTHON installs the project's dependencies with PYTHON,
# the dependency environment's interpreter, e.g. by installing the project editable; the project
# is uninstalled afterwards). Cheap when both are already there.
thin_env() {
  local venv="$1" kind="$2" key="$3" install="$4"
  local python_bin cache deps
  python_bin="$(find_python)"
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/rft/envs"
  deps="$cache/$kind-$key"
  mkdir -p "$cache"
  (
    # One builder at a time per dependency environment (two clones set up at once wait).
    flock 9
    if [ ! -f "$deps/.complete" ]; then
      local started=$SECONDS
      rm -rf "$deps"
      "$python_bin" -m venv "$deps"
      pip_with "$deps/bin/python" --upgrade pip wheel "setuptools>=69"
      "$install" "$deps/bin/python"
      "$deps/bin/python" -m pip uninstall -y -q rft-service rft-sdk 2>&1 \
        | { grep -v "not installed" || true; }
      date -u +%FT%TZ > "$deps/.complete"
      echo "built the $kind dependency environment in $((SECONDS - started)) s: $deps"
    fi
    touch "$deps"  # used now: the pruning below (by modification time) keeps it
    # The two most recently used of this kind stay; older ones are removed unless a setup holds
    # them right now (a checkout still linked to one rebuilds it at its next setup).
    ls -1dt "$cache/$kind"-*/ 2>/dev/null | tail -n +3 | while read -r old; do
      old="${old%/}"
      [ "$old" = "$deps" ] && continue
      ( flock -n 8 && rm -rf "$old" "$old.lock" ) 8>"$old.lock" || true
    done
  ) 9>"$deps.lock"

  if [ "$(cat "$venv/.rft-deps" 2>/dev/null)" != "$deps" ]; then
    rm -rf "$venv"
    # No pip of its own: the dependency environment's pip (and setuptools) serve it.
    "$python_bin" -m venv --without-pip "$venv"
    local venv_python site deps_site
    venv_python="$(cd "$venv" && pwd)/bin/python"
    site="$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    deps_site="$("$deps/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    # addsitedir, not a bare path line: the dependency environment's own .pth files must run.
    echo "import site; site.addsitedir('$deps_site')" > "$site/_rft_dependencies.pth"
    # Its commands (ruff, mypy, celery, mkdocs...) run with this environment's interpreter.
    local tool name
    for tool in "$deps"/bin/*; do
      [ -f "$tool" ] || continue
      name="${tool##*/}"
      case "$name" in
        python* | activate* | Activate*) continue ;;
      esac
      if head -n 1 "$tool" | grep -qx "#!$deps/bin/python[0-9.]*"; then
        { echo "#!$venv_python"; tail -n +2 "$tool"; } > "$venv/bin/$name"
        chmod +x "$venv/bin/$name"
      else
        ln -s "$tool" "$venv/bin/$name"
      fi
    done
    echo "$deps" > "$venv/.rft-deps"
    rm -f "$venv/.rft-installed"
  fi
}

# install_project VENV: this checkout's service and SDK, editable, into VENV (a thin_env), when
# their pyproject files changed since the last time.
install_project() {
  local venv="$1" stamp="$1/.rft-installed" wanted
  wanted="$(cat pyproject.toml sdk/pyproject.toml | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    pip_with "$venv/bin/python" --no-deps --no-build-isolation -e . -e ./sdk
    echo "$wanted" > "$stamp"
  fi
}

# env_key TEXT...: the dependency environment's key for what installs it (the pyproject files,
# the install function's text, the Python that builds it).
env_key() {
  { cat pyproject.toml sdk/pyproject.toml; printf '%s\n' "$@"; "$(find_python)" -VV; } \
    | sha256sum | cut -c1-16
}
