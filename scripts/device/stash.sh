#!/usr/bin/env bash
# Runs ON the GPU machine: copies one carried part (a wheelhouse part or a model part) to /tmp, which
# stays while the machine is warm, so the next call can assemble what no single call can carry.
#   scripts/device/stash.sh .wheelhouse/p0         -> /tmp/cudanalyst-stash/wheelhouse/part00
#   scripts/device/stash.sh .models/NAME/p00       -> /tmp/cudanalyst-stash/models/NAME/NAME.gguf.part00
set -euo pipefail
src="${1:?carried folder}"
case "$src" in
  .wheelhouse/*) dest=/tmp/cudanalyst-stash/wheelhouse ;;
  .models/*/p*) name="${src#.models/}"; dest="/tmp/cudanalyst-stash/models/${name%%/*}" ;;
  *) echo "stash.sh: unknown part $src" >&2; exit 2 ;;
esac
mkdir -p "$dest"
cp -r "$src"/. "$dest"/
du -sh /tmp/cudanalyst-stash/* /tmp/cudanalyst-stash/models/* 2>/dev/null || true
