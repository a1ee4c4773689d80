#!/usr/bin/env bash
# Parts of at most 60 MiB that bring vLLM, this project's other dependencies and the project
# itself to a GPU machine with no package registry and at most 64 MiB per transfer: a Python
# 3.12 image that already holds torch 2.11.0+cu130 (docs/gpu-runs.md: the sequence of
# transfers, and why vLLM 0.26.0 and what is trimmed). The part list: scripts/gpu_vllm_parts.txt.
#
#   bash scripts/gpu_parts.sh pack OUTDIR       # where a registry is reachable (~180 MB down)
#   bash scripts/gpu_parts.sh unpack PARTS DEST # on the GPU machine (scripts/gpu_check.sh
#                                               # --unpack-parts PARTS runs the same function)
# pack gives OUTDIR/part-00, part-01... and OUTDIR/unpack.sh (the unpack function below, alone).
# unpack gives DEST/rft (the project), DEST/vsite (vLLM's site folder), DEST/ovl (the overlay)
# and DEST/rft-env.sh (the exports that use them). Sourced, this file only defines functions.

GPU_PARTS_LIST="${GPU_PARTS_LIST:-scripts/gpu_vllm_parts.txt}"
GPU_PART_SIZE="${GPU_PART_SIZE:-60M}"

# parts_section NAME: the entries of one [NAME] section of the part list, comments dropped.
parts_section() {
  awk -v want="[$1]" '
    { sub(/#.*/, ""); gsub(/^[ \t]+|[ \t]+$/, "") }
    /^\[.*\]$/ { inside = ($0 == want); next }
    inside && $0 != "" { print }
  ' "$GPU_PARTS_LIST"
}

# pack_parts OUTDIR: download, trim, compress and split (run in the project checkout).
pack_parts() {
  local out="${1:?usage: pack_parts OUTDIR}" work tag
  work="$(mktemp -d)"
  local platforms=()
  for tag in manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
    manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
    manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$tag")
  done
  local pyflags=(--only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")
  local wanted
  mapfile -t wanted < <(parts_section vllm; parts_section wheels)
  mkdir -p "$work/payload" "$work/vdl" "$out" &&
    python3 -m pip --isolated download -q --no-deps "${pyflags[@]}" -d "$work/vdl" \
      "${wanted[@]}" &&
    python3 -m pip --isolated install -q --no-deps --no-compile "${pyflags[@]}" \
      --target "$work/vsite" "$work"/vdl/*.whl || { rm -rf "$work"; return 1; }
  local trims pattern
  mapfile -t trims < <(parts_section trim)
  (
    cd "$work/vsite/vllm" || exit 1
    shopt -s globstar nullglob
    for pattern in "${trims[@]}"; do
      # shellcheck disable=SC2086 # the pattern is a glob
      rm -rf $pattern
    done
  ) || { rm -rf "$work"; return 1; }
  tar -C "$work/vsite" -cf - . | xz -T0 -6 >"$work/payload/vsite.tar.xz" &&
    bash scripts/gpu_check.sh --download-overlay "$work/payload/ovl" >/dev/null &&
    parts_section overlay-skip | while read -r name; do
      rm -f "$work/payload/ovl/$name"-*.whl
    done &&
    git archive --format=tar.gz -o "$work/payload/project.tar.gz" HEAD &&
    tar -C "$work" -cf "$work/bundle.tar" payload || { rm -rf "$work"; return 1; }
  rm -f "$out"/part-*
  split -b "$GPU_PART_SIZE" -d "$work/bundle.tar" "$out/part-"
  rm -rf "$work"
  write_unpack_script "$out/unpack.sh"
  ls -l "$out"
}

# write_unpack_script FILE: unpack_parts alone, for a machine without the project's scripts.
write_unpack_script() {
  {
    echo '#!/usr/bin/env bash'
    echo '# unpack.sh PARTS_DIR [DEST]: scripts/gpu_parts.sh unpack_parts, on its own.'
    echo 'set -uo pipefail'
    declare -f unpack_parts
    echo 'unpack_parts "$@"'
  } >"$1"
  chmod +x "$1"
}

# unpack_parts PARTS_DIR [DEST]: the project in DEST/rft, vLLM in DEST/vsite, the overlay in
# DEST/ovl (DEST: /tmp), and DEST/rft-env.sh with the exports that use them.
unpack_parts() {
  local parts="${1:?usage: unpack_parts PARTS_DIR [DEST]}" dest="${2:-/tmp}"
  mkdir -p "$dest/rft" "$dest/vsite" "$dest/ovl" &&
    cat "$parts"/part-* | tar -C "$dest" -xf - &&
    tar -C "$dest/rft" -xzf "$dest/payload/project.tar.gz" &&
    xz -T0 -dc "$dest/payload/vsite.tar.xz" | tar -C "$dest/vsite" -xf - &&
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$dest/ovl" \
      "$dest"/payload/ovl/*.whl || return 1
  rm -rf "$dest/payload"
  # vLLM 0.26's sampler imports flashinfer, which is not carried: PyTorch's sampler instead.
  cat >"$dest/rft-env.sh" <<ENV
export PYTHONPATH="$dest/vsite:$dest/ovl:\${PYTHONPATH:-}"
export PATH="$dest/ovl/bin:\$PATH"
export VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1
ENV
  echo "unpacked into $dest: rft, vsite, ovl; exports in $dest/rft-env.sh"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -uo pipefail
  cd "$(dirname "$0")/.." || exit 1
  case "${1:-}" in
    pack) pack_parts "${2:?usage: gpu_parts.sh pack OUTDIR}" ;;
    unpack) unpack_parts "${2:?usage: gpu_parts.sh unpack PARTS_DIR [DEST]}" "${3:-/tmp}" ;;
    *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
fi
