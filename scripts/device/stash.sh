#!/usr/bin/env bash
# Runs ON the GPU machine: copies one carried part (a wheelhouse part or a Gemma chunk package) to /tmp,
# which stays while the machine is warm, so the next call can assemble what no single call can carry.
#   scripts/device/stash.sh .wheelhouse/p0      -> /tmp/cudanalyst-stash/wheelhouse/part00
#   scripts/device/stash.sh .gemma/g1           -> /tmp/cudanalyst-stash/gemma/<package folders>
set -euo pipefail
src="${1:?carried folder}"
case "$src" in
  .wheelhouse/*) dest=/tmp/cudanalyst-stash/wheelhouse ;;
  .gemma/*) dest=/tmp/cudanalyst-stash/gemma ;;
  *) echo "stash.sh: unknown part $src" >&2; exit 2 ;;
esac
mkdir -p "$dest"
cp -r "$src"/. "$dest"/
du -sh /tmp/cudanalyst-stash/* 2>/dev/null
