#!/usr/bin/env bash
# Every check that needs a GPU, in one command, for a GPU machine (one H100 is enough; the
# whole run fits in RFT_GPU_CHECK_BUDGET_S, 40 minutes by default). In order:
#   1. setup: a GPU environment (.venv-gpu): PyPI's CUDA build of the pinned torch, then this
#      project with the api, worker, embedded, dev, vllm and qlora extras (pyproject.toml) at
#      the main environment's pins, and the SDK;
#   2. tests/gpu: the GPU tests that fit this machine's GPUs (those needing two are skipped,
#      saying so);
#   3. tests/vllm_generation on CUDA (RFT_REQUIRE_VLLM=1: vLLM missing there is an error);
#   4. bench/bench_gpu_vllm.py: the service against bare TRL + vLLM, vLLM's tokens/s.
# The tests run with RFT_REQUIRE_GPUS=<the GPUs the driver lists> (tests/layers.py): a test
# that fits this machine but cannot run (torch sees no CUDA, bitsandbytes missing for QLoRA)
# fails its part instead of skipping. A part that could not run at all (vLLM not installed)
# is reported NOT RUN and fails the check, unless RFT_GPU_WITHOUT_VLLM=1 says it is not wanted.
# It writes one report, gpu-report.md, in $OUT when set, else here, with each part's result,
# time and output tail (and each part's whole log beside it).
#
# Without CUDA it runs what a CPU machine can (each part's syntax / --help / collection),
# says that CUDA is absent, and exits 0.
#
# A GPU machine that reaches no package registry installs from a folder of wheels: fill one
# where the registry is reachable (`--download-wheels DIR`, for the GPU machine's Python
# version: RFT_GPU_PYTHON_VERSION, default 3.12), bring it along, and run with
# `--wheelhouse DIR` (or RFT_GPU_WHEELHOUSE=DIR). RFT_GPU_PYTHON=/path/to/python skips the
# setup and uses that interpreter as it is.
#
# A GPU machine whose Python already holds a CUDA torch (and numpy, pandas, pyarrow,
# accelerate, tokenizers, huggingface_hub...) but neither a registry nor room for torch's wheels:
# `--download-overlay DIR` fills DIR with the rest (scripts/gpu_overlay_requirements.txt, ~95 MB
# with QLoRA's bitsandbytes, no torch, no vLLM); there, `RFT_GPU_PYTHON=python3 bash scripts/gpu_check.sh
# --overlay DIR` installs them beside that Python's packages (pip --target, no dependency
# resolution) and runs the checks with them. vLLM's wheels are too large to bring that way (the
# parts below bring them): its tests are then NOT RUN (a failure, or with RFT_GPU_WITHOUT_VLLM=1 a note), and the bench
# compares with transformers' generate().
#
# One 15-minute window with vLLM in it (docs/gpu-runs.md): `--pack-parts DIR` (where a registry
# is reachable) packs vLLM 0.26.0, the overlay and this project into parts of at most 60 MiB
# (scripts/gpu_parts.sh, scripts/gpu_vllm_parts.txt); on the GPU machine, once the parts sit in
# one folder, `--unpack-parts DIR --window` unpacks them and runs, under RFT_GPU_WINDOW_BUDGET_S
# (570 s): the probe (driver, torch CUDA, dtypes, vLLM's engine modules imported), the vLLM job
# test, the sleep-mode test and a short bench (with vLLM's memory plan beside the peak torch
# measured), rewriting the report after each part.
#
# Usage: bash scripts/gpu_check.sh [--dry-run] [--wheelhouse DIR] [--download-wheels DIR]
#        [--overlay DIR] [--download-overlay DIR] [--pack-parts DIR] [--unpack-parts DIR]
#        [--window]
set -uo pipefail
cd "$(dirname "$0")/.."

BUDGET_S="${RFT_GPU_CHECK_BUDGET_S:-2400}"
VENV="${RFT_GPU_VENV:-.venv-gpu}"
WHEELHOUSE="${RFT_GPU_WHEELHOUSE:-}"
REPORT_DIR="${OUT:-.}"
REPORT="$REPORT_DIR/gpu-report.md"
# The main environment's pins (scripts/setup.sh, scripts/setup_vllm.sh). vllm 0.30.0 is the
# release of the `vllm` extra's range that pins this torch (torch==2.13.0) and accepts
# transformers 5.23; PyPI's Linux torch wheel is the CUDA build.
TORCH_PIN="torch==2.13.0"
PINS="vllm==0.30.0 transformers==5.23.0 trl==1.16.0"
EXTRAS="api,worker,embedded,dev,vllm,qlora"
# Caps per part (seconds); each part also stops at the whole run's budget.
SETUP_CAP_S=900
GPU_TESTS_CAP_S="${RFT_GPU_TESTS_CAP_S:-600}"
VLLM_TESTS_CAP_S="${RFT_GPU_VLLM_TESTS_CAP_S:-900}"
BENCH_ARGS="${RFT_GPU_BENCH_ARGS:-}"
OVERLAY_REQUIREMENTS=scripts/gpu_overlay_requirements.txt
# The window (--window): the whole under 10 minutes, each part capped.
WINDOW_BUDGET_S="${RFT_GPU_WINDOW_BUDGET_S:-570}"
UNPACK_CAP_S=60
PROBE_CAP_S=90
VLLM_JOB_CAP_S=210
VLLM_SLEEP_CAP_S=150
VLLM_JOB_TEST="tests/vllm_generation/test_vllm_jobs.py::test_a_job_trains_end_to_end_with_vllm_generating"
VLLM_SLEEP_TEST="tests/vllm_generation/test_vllm_engine_reuse.py::test_an_engine_kept_asleep_is_adopted_asleep_and_samples_as_a_fresh_one"
WINDOW_BENCH_ARGS="${RFT_GPU_WINDOW_BENCH_ARGS:---steps 4 --completion-tokens 64 --generation vllm}"
UNPACK_DEST="${RFT_GPU_UNPACK_DEST:-/tmp}"
# shellcheck source=scripts/gpu_parts.sh
. scripts/gpu_parts.sh
GPUS_PER_JOB="$(sed -n 's/^GPUS_PER_JOB = \([0-9]*\).*/\1/p' tests/gpu/conftest.py)"

dry_run=0
download_to=""
overlay=""
download_overlay_to=""
window=0
pack_to=""
unpack_from=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --wheelhouse) WHEELHOUSE="$2"; shift ;;
    --download-wheels) download_to="$2"; shift ;;
    --overlay) overlay="$2"; shift ;;
    --download-overlay) download_overlay_to="$2"; shift ;;
    --window) window=1 ;;
    --pack-parts) pack_to="$2"; shift ;;
    --unpack-parts) unpack_from="$2"; window=1; shift ;;
    -h | --help) sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

gpu_count() {
  command -v nvidia-smi >/dev/null 2>&1 || { echo 0; return; }
  nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
}

pip_from() {
  # pip_from PYTHON ARGS...: pip install, offline from the wheelhouse when one is given.
  local python="$1"; shift
  if [ -n "$WHEELHOUSE" ]; then
    "$python" -m pip install -q --no-index --find-links "$WHEELHOUSE" "$@"
  else
    "$python" -m pip install -q "$@"
  fi
}

setup_command="python3 -m venv $VENV; pip install $TORCH_PIN (PyPI's CUDA build);"
setup_command+=" pip install -e .[$EXTRAS] -e ./sdk[cli] $PINS"
[ -n "$WHEELHOUSE" ] && setup_command+=" (offline, from $WHEELHOUSE)"
[ -n "${RFT_GPU_PYTHON:-}" ] && setup_command="none: RFT_GPU_PYTHON=$RFT_GPU_PYTHON as it is"
[ -n "${RFT_GPU_PYTHON:-}" ] && [ -n "$overlay" ] && setup_command="pip install --no-deps \
--target /tmp/rft-gpu-overlay $overlay/*.whl, beside RFT_GPU_PYTHON=$RFT_GPU_PYTHON's packages"

print_plan() {
  local gpus="$1"
  echo "gpu_check plan: budget ${BUDGET_S} s on this machine's GPUs; report: $REPORT"
  echo "1. setup [cap ${SETUP_CAP_S} s]: $setup_command"
  echo "2. tests/gpu [cap ${GPU_TESTS_CAP_S} s]: RFT_REQUIRE_GPUS=$gpus pytest tests/gpu -rs;" \
    "tests needing $GPUS_PER_JOB GPUs are skipped with their reason on a machine with fewer," \
    "any other skip fails"
  echo "3. tests/vllm_generation [cap ${VLLM_TESTS_CAP_S} s]: RFT_REQUIRE_VLLM=1" \
    "RFT_REQUIRE_GPUS=$gpus pytest tests/vllm_generation -rs (server mode needs 2 GPUs:" \
    "skipped with its reason on one); NOT RUN, a failure, where vLLM is not installed"
  echo "4. bench [cap: the rest of the budget]: python bench/bench_gpu_vllm.py"
  if [ "$gpus" -gt 0 ]; then
    echo "CUDA here: $gpus GPU(s): parts 1-4 run"
  else
    echo "CUDA here: absent: only the CPU checks run (bash -n of this script, the bench's" \
      "--help, pytest --collect-only of tests/gpu and tests/vllm_generation, the extras in" \
      "pyproject.toml), and the report says CUDA is absent"
  fi
}

print_window_plan() {
  local gpus="$1"
  echo "gpu_check window plan: budget ${WINDOW_BUDGET_S} s; report: $REPORT (rewritten after each part)"
  if [ -n "$unpack_from" ]; then
    echo "1. unpack [cap ${UNPACK_CAP_S} s]: unpack_parts $unpack_from $UNPACK_DEST" \
      "(scripts/gpu_parts.sh), then . $UNPACK_DEST/rft-env.sh"
  else
    echo "1. unpack [cap ${UNPACK_CAP_S} s]: none: vLLM is already importable"
  fi
  echo "2. probe [cap ${PROBE_CAP_S} s]: nvidia-smi, torch CUDA and dtypes, the worker's probe," \
    "import of the [modules] of $GPU_PARTS_LIST"
  echo "3. vllm-job [cap ${VLLM_JOB_CAP_S} s]: RFT_REQUIRE_VLLM=1 RFT_REQUIRE_GPUS=$gpus pytest $VLLM_JOB_TEST"
  echo "4. vllm-sleep [cap ${VLLM_SLEEP_CAP_S} s]: RFT_REQUIRE_VLLM=1 RFT_REQUIRE_GPUS=$gpus pytest $VLLM_SLEEP_TEST"
  echo "5. bench [cap: the rest of the budget]: python bench/bench_gpu_vllm.py $WINDOW_BENCH_ARGS"
}

if [ -n "$pack_to" ]; then
  pack_parts "$pack_to" || exit 1
  echo "parts in $pack_to; on the GPU machine, with every part in one folder P:" \
    "bash scripts/gpu_check.sh --unpack-parts P --window"
  exit 0
fi

if [ -n "$download_overlay_to" ]; then
  # CPython 3.12 manylinux wheels of what a torch-only GPU image lacks, without dependencies
  # (the image's own numpy, pandas, pyarrow, torch... stay).
  version="${RFT_GPU_PYTHON_VERSION:-3.12}"
  platforms=()
  for tag in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
    manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
  done
  mkdir -p "$download_overlay_to"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$version" \
    --implementation cp "${platforms[@]}" -d "$download_overlay_to" \
    -r "$OVERLAY_REQUIREMENTS" || exit 1
  echo "overlay wheels in $download_overlay_to ($(du -sh "$download_overlay_to" | cut -f1)); on" \
    "the GPU machine: RFT_GPU_PYTHON=python3 bash scripts/gpu_check.sh --overlay $download_overlay_to"
  exit 0
fi

if [ -n "$download_to" ]; then
  # Run where a registry is reachable: every wheel the GPU setup installs, for the GPU
  # machine's Python (binary wheels only, manylinux x86_64), plus this project and its SDK.
  version="${RFT_GPU_PYTHON_VERSION:-3.12}"
  mkdir -p "$download_to"
  requirements="$(python3 - "$EXTRAS" <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
# rft-sdk is ./sdk, built into a wheel below, never downloaded.
wanted, seen = sys.argv[1].split(","), set()
out = [r for r in project["dependencies"] if not r.startswith("rft-sdk")]
while wanted:
    extra = wanted.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for requirement in extras[extra]:
        if requirement.startswith("rft-service["):
            wanted += requirement[len("rft-service[") : -1].split(",")
        else:
            out.append(requirement)
sdk = tomllib.load(open("sdk/pyproject.toml", "rb"))["project"]
out += sdk["dependencies"] + sdk["optional-dependencies"]["cli"]
print("\n".join(out))
EOF
)" || exit 1
  platforms=()
  for tag in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64 linux_x86_64; do
    platforms+=(--platform "$tag")
  done
  # --isolated: this machine's own pip settings (local find-links, CPU builds) stay out.
  mapfile -t requirement_list <<<"$requirements"
  python3 -m pip --isolated download -d "$download_to" --only-binary=:all: \
    --python-version "$version" "${platforms[@]}" \
    "$TORCH_PIN" $PINS "setuptools>=69" wheel pip "${requirement_list[@]}" || exit 1
  python3 -m pip wheel -q --no-deps -w "$download_to" . ./sdk || exit 1
  echo "wheels for Python $version in $download_to; on the GPU machine:" \
    "bash scripts/gpu_check.sh --wheelhouse $download_to"
  exit 0
fi

GPUS="$(gpu_count)"
if [ "$dry_run" = 1 ] && [ "$window" = 1 ]; then
  print_window_plan "$GPUS"
  exit 0
elif [ "$dry_run" = 1 ]; then
  print_plan "$GPUS"
  exit 0
fi

mkdir -p "$REPORT_DIR"
started=$SECONDS
rows=()
details=()

remaining() { echo $((BUDGET_S - (SECONDS - started))); }

# part NAME CAP_S COMMAND...: runs COMMAND under the smaller of CAP_S and the budget left,
# its output in $REPORT_DIR/gpu-NAME.log; adds a report row.
part() {
  local name="$1" cap="$2"; shift 2
  local left log="$REPORT_DIR/gpu-$name.log" rc t0 summary
  left="$(remaining)"
  [ "$cap" -gt "$left" ] && cap="$left"
  if [ "$cap" -lt 60 ]; then
    rows+=("| $name | not run: under a minute of the ${BUDGET_S} s budget left | 0 s |")
    echo "== $name: not run (budget spent)"
    return 1
  fi
  echo "== $name (at most ${cap} s): $*"
  t0=$SECONDS
  timeout --kill-after=30 "$cap" "$@" >"$log" 2>&1
  rc=$?
  local took=$((SECONDS - t0))
  if [ "$name" = bench ]; then
    summary="$(grep -E 's/step|tokens/s|memory' "$log" | paste -sd ';' -)"
  else
    summary="$(grep -E '(passed|failed|skipped|error|no tests ran|tests collected)' "$log" \
      | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')"
  fi
  if [ "$rc" != 0 ]; then
    # What went wrong is usually on the last line (an error, pytest's usage error).
    local last
    last="$(grep -v '^[[:space:]]*$' "$log" | grep -vF "$summary" | tail -n 1 | cut -c1-240)"
    [ -n "$last" ] && summary="${summary:+$summary; }$last"
  fi
  summary="${summary//|/\\|}"
  local result
  case "$rc" in
    0) result="ok" ;;
    5) result="failed: no tests ran" ;;
    124 | 137) result="timed out after ${cap} s" ;;
    *) result="failed (exit $rc)" ;;
  esac
  [ -n "$summary" ] && result="$result: $summary"
  rows+=("| $name | $result | ${took} s |")
  details+=("### $name" "" "\`$*\` (exit $rc, ${took} s; whole log: gpu-$name.log)" "" '```'
    "$(tail -n 40 "$log")" '```' "")
  echo "   $result (${took} s)"
  # The report so far, so a run cut short still leaves one.
  write_report "in progress: stopped after part $name"
  return "$rc"
}

write_report() {
  local status="$1"
  {
    echo "# GPU check"
    echo
    echo "- when: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "- machine: $(hostname); GPUs: $GPUS"
    if [ "$GPUS" -gt 0 ]; then
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null \
        | sed 's/^/- GPU: /'
    fi
    echo "- $status"
    echo "- total: $((SECONDS - started)) s of a ${BUDGET_S} s budget"
    for line in "${notes[@]}"; do echo "- $line"; done
    echo
    echo "| part | result | time |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    printf '%s\n' "${details[@]}"
  } >"$REPORT"
  echo "report: $REPORT"
}

notes=()
print_plan "$GPUS"

if [ "$GPUS" -eq 0 ]; then
  # No CUDA: check that each part is at least well-formed, with whatever Python is here.
  py=python3
  [ -x .venv/bin/python ] && py=.venv/bin/python
  part syntax 120 bash -n scripts/gpu_check.sh
  part bench-help 120 "$py" bench/bench_gpu_vllm.py --help
  part collect 300 "$py" -m pytest -q --collect-only -p no:cacheprovider tests/gpu \
    tests/vllm_generation
  part extras 60 "$py" -c "
import tomllib
extras = tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']
missing = set('$EXTRAS'.split(',')) - set(extras)
assert not missing, f'pyproject.toml lacks the extras {missing}'
print('extras present: $EXTRAS')"
  failed=0
  for row in "${rows[@]}"; do
    case "$row" in *"| ok"*) ;; *) failed=1 ;; esac
  done
  notes+=("nothing GPU-side was run: no CUDA GPU here (nvidia-smi lists none)")
  write_report "CUDA: absent. Only the CPU-reachable checks ran ($([ "$failed" = 0 ] \
    && echo 'all passed' || echo 'some failed: see below')); run this on a GPU machine."
  echo "CUDA is absent: only the CPU checks ran (report: $REPORT)"
  exit "$failed"
fi

# Reward code runs in bubblewrap; a GPU image without it (and without apt) runs it unsandboxed:
# these are our own tests' reward functions.
if ! command -v bwrap >/dev/null 2>&1; then
  export RFT_SANDBOX_ISOLATION=none
  notes+=("bubblewrap is not installed: reward code ran with RFT_SANDBOX_ISOLATION=none")
fi

# The window: what fits one lent 15-minute session, vLLM included.
if [ "$window" = 1 ]; then
  BUDGET_S="$WINDOW_BUDGET_S"
  print_window_plan "$GPUS"
  write_report "in progress: the window started"
  PY="${RFT_GPU_PYTHON:-python3}"
  if [ -n "$unpack_from" ]; then
    part unpack "$UNPACK_CAP_S" bash -c "$(declare -f unpack_parts); unpack_parts \"\$1\" \"\$2\"" \
      unpack "$unpack_from" "$UNPACK_DEST"
    # shellcheck disable=SC1091 # written by unpack_parts
    [ -f "$UNPACK_DEST/rft-env.sh" ] && . "$UNPACK_DEST/rft-env.sh"
    notes+=("vLLM from the parts: $UNPACK_DEST/vsite; the overlay: $UNPACK_DEST/ovl")
  fi
  export PYTHONPATH="$PWD:$PWD/sdk/src${PYTHONPATH:+:$PYTHONPATH}"
  export VLLM_USE_FLASHINFER_SAMPLER="${VLLM_USE_FLASHINFER_SAMPLER:-0}"
  mapfile -t engine_modules < <(parts_section modules)
  part probe "$PROBE_CAP_S" "$PY" -c "
import importlib, subprocess, sys, torch
from workers.training.cuda import probe_cuda
print(subprocess.run(['nvidia-smi'], capture_output=True, text=True).stdout)
print('torch', torch.__version__, 'CUDA', torch.version.cuda, '| devices', torch.cuda.device_count())
print('capability', torch.cuda.get_device_capability(0), '| bf16', torch.cuda.is_bf16_supported())
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    x = torch.ones(64, 64, device='cuda', dtype=dtype)
    print('matmul', dtype, 'ok' if float((x @ x)[0, 0]) == 64 else 'WRONG')
probe = probe_cuda()
print('worker probe:', probe, '|', probe.problem() or 'ok')
assert probe.usable_gpus > 0 and probe.problem() is None, 'the worker would not use this GPU'
for name in sys.argv[1:]:
    importlib.import_module(name)
    print('imported', name)
import vllm
print('vllm', vllm.__version__)" "${engine_modules[@]}"
  for test in vllm-job vllm-sleep; do
    node="$VLLM_JOB_TEST" cap="$VLLM_JOB_CAP_S"
    [ "$test" = vllm-sleep ] && node="$VLLM_SLEEP_TEST" cap="$VLLM_SLEEP_CAP_S"
    part "$test" "$cap" env RFT_REQUIRE_VLLM=1 RFT_REQUIRE_GPUS="$GPUS" "$PY" -m pytest -q -rs \
      -p no:cacheprovider "$node"
  done
  # shellcheck disable=SC2086 # WINDOW_BENCH_ARGS: several arguments
  part bench "$BUDGET_S" env PYTHONUNBUFFERED=1 "$PY" bench/bench_gpu_vllm.py $WINDOW_BENCH_ARGS
  failed=0
  for row in "${rows[@]}"; do
    case "$row" in *"| ok"*) ;; *) failed=1 ;; esac
  done
  verdict="Every part passed."
  [ "$failed" = 1 ] && verdict="Some parts did not pass or did not run: see below."
  write_report "window, CUDA: $GPUS GPU(s). $verdict"
  echo "$verdict"
  exit "$failed"
fi

setup() {
  set -e
  local python="$VENV/bin/python"
  [ -x "$python" ] || python3 -m venv "$VENV"
  pip_from "$python" --upgrade pip setuptools wheel
  # The torch pin first, alone: PyPI's Linux wheel of it is the CUDA build.
  pip_from "$python" "$TORCH_PIN"
  # ./sdk in the same command: the service's rft-sdk requirement resolves to it.
  # shellcheck disable=SC2086 # PINS: several requirements
  pip_from "$python" -e ".[$EXTRAS]" -e "./sdk[cli]" "$TORCH_PIN" $PINS
  "$python" -c "import torch, vllm; assert torch.cuda.is_available(), 'torch sees no CUDA';
print('torch', torch.__version__, 'CUDA', torch.version.cuda, '| vllm', vllm.__version__)"
}

if [ -n "${RFT_GPU_PYTHON:-}" ] && [ -n "$overlay" ]; then
  PY="$RFT_GPU_PYTHON"
  site=/tmp/rft-gpu-overlay
  part setup 300 "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade \
    --target "$site" "$overlay"/*.whl
  # The overlay first, then this checkout and its SDK (no editable install without resolving).
  export PYTHONPATH="$site:$PWD:$PWD/sdk/src${PYTHONPATH:+:$PYTHONPATH}"
  export PATH="$site/bin:$PATH"
  notes+=("setup: $PY with the overlay wheels of $overlay (pip --target $site, no deps)")
elif [ -n "${RFT_GPU_PYTHON:-}" ]; then
  PY="$RFT_GPU_PYTHON"
  rows+=("| setup | skipped: RFT_GPU_PYTHON=$PY used as it is | 0 s |")
else
  PY="$VENV/bin/python"
  export VENV WHEELHOUSE TORCH_PIN PINS EXTRAS
  if ! part setup "$SETUP_CAP_S" bash -c "$(declare -f pip_from setup); setup"; then
    notes+=("setup failed: without a registry, bring wheels (--download-wheels, --wheelhouse)")
  fi
fi

if [ "$GPUS" -lt "$GPUS_PER_JOB" ]; then
  echo "tests/gpu: this machine has $GPUS GPU(s); the tests needing $GPUS_PER_JOB" \
    "(GPUS_PER_JOB in tests/gpu/conftest.py) are skipped, pytest says which"
  notes+=("tests/gpu: $GPUS GPU(s) here; tests needing $GPUS_PER_JOB GPUs skipped")
fi
# What this machine is, as the worker sees it: the driver, torch's CUDA, the start-up check.
part probe 120 "$PY" -c "
import os, torch, transformers, trl
from workers.training.cuda import probe_cuda
print('torch', torch.__version__, 'built for CUDA', torch.version.cuda, '| available',
      torch.cuda.is_available(), '| devices', torch.cuda.device_count())
print('transformers', transformers.__version__, '| trl', trl.__version__)
print('/proc/driver/nvidia present:', os.path.isdir('/proc/driver/nvidia'))
probe = probe_cuda()
print('worker probe:', probe)
print('worker start-up check:', probe.problem() or 'ok')
assert probe.usable_gpus > 0 and probe.problem() is None, 'the worker would not use this GPU'"
# RFT_REQUIRE_GPUS: a test this machine's GPUs fit fails rather than skips (tests/layers.py).
part tests-gpu "$GPU_TESTS_CAP_S" env RFT_REQUIRE_GPUS="$GPUS" "$PY" -m pytest -q -rs \
  -p no:cacheprovider tests/gpu
if "$PY" -c "import vllm" >/dev/null 2>&1; then
  part tests-vllm "$VLLM_TESTS_CAP_S" env RFT_REQUIRE_VLLM=1 RFT_REQUIRE_GPUS="$GPUS" "$PY" \
    -m pytest -q -rs -p no:cacheprovider tests/vllm_generation
elif [ "${RFT_GPU_WITHOUT_VLLM:-0}" = 1 ]; then
  rows+=("| tests-vllm | NOT RUN (RFT_GPU_WITHOUT_VLLM=1): vLLM is not installed for $PY; nothing on the vLLM path ran | 0 s |")
  notes+=("NOT RUN: tests/vllm_generation (vLLM is not installed; RFT_GPU_WITHOUT_VLLM=1)")
  echo "== tests-vllm: NOT RUN: vLLM is not installed for $PY (RFT_GPU_WITHOUT_VLLM=1)" >&2
else
  rows+=("| tests-vllm | NOT RUN, a failure: vLLM is not installed for $PY; nothing on the vLLM path ran (RFT_GPU_WITHOUT_VLLM=1 if that is intended) | 0 s |")
  notes+=("NOT RUN: tests/vllm_generation (vLLM is not installed)")
  echo "== tests-vllm: NOT RUN: vLLM is not installed for $PY: the check fails" >&2
fi
# shellcheck disable=SC2086 # BENCH_ARGS: several arguments
part bench "$BUDGET_S" env PYTHONUNBUFFERED=1 "$PY" bench/bench_gpu_vllm.py $BENCH_ARGS

failed=0
not_run=()
for row in "${rows[@]}"; do
  case "$row" in
    *"| ok"* | *"| skipped"*) ;;
    *"| NOT RUN (RFT_GPU_WITHOUT_VLLM=1)"*) not_run+=("$(echo "$row" | cut -d'|' -f2 | xargs)") ;;
    *) failed=1 ;;
  esac
done
if [ "$failed" = 1 ]; then
  verdict="Some parts did not pass or did not run: see below."
elif [ "${#not_run[@]}" -gt 0 ]; then
  verdict="Every part that ran passed; NOT RUN: ${not_run[*]}."
else
  verdict="Every part passed."
fi
write_report "CUDA: $GPUS GPU(s). $verdict"
echo "$verdict"
exit "$failed"
