#!/usr/bin/env bash
# Runs ON the GPU machine: copies one carried part (a wheelhouse part or a model part) to /tmp, which
# stays while the machine is warm, so the next call can assemble what no single call can carry.
#   scripts/device/stash.sh .wheelhouse/p00        -> /tmp/cudanalyst-stash/wheelhouse/part00
#   scripts/device/stash.sh .models/NAME/p00       -> /tmp/cudanalyst-stash/models/NAME/NAME.gguf.part00
#   scripts/device/stash.sh --check [SET]          -> every stashed set (or SET: wheelhouse, a model's NAME) whole?
#                                                     exit 9 naming what is missing
# Each part carries its set's list of parts (PARTS, scripts/device/parts_manifest.py): after each part this says
# which of the set are still missing, and --check, the first thing a session's working call runs, refuses a set
# with a part missing or torn (a refused call, or a machine lost between calls, leaves one out without a sound).
# When a model's set becomes whole and .device/wheels is here, its conversion starts in the background
# (convert_ahead.sh; STASH_CONVERT=0 turns that off).
set -euo pipefail
stash="${CUDANALYST_STASH:-/tmp/cudanalyst-stash}"
here="$(dirname "${BASH_SOURCE[0]}")"

missing() {  # DIR [ONLY]: the parts its PARTS lists that are absent, or differ (all, or only the part ONLY: each
  # stash call hashes the part it copied, not the whole set again); nothing when whole or unlisted
  local dir=$1 only=${2:-}
  [ -s "$dir/PARTS" ] || return 0
  (cd "$dir" && while read -r name sum; do
    if [ ! -f "$name" ]; then echo "$name (absent)"
    elif { [ -z "$only" ] || [ "$only" = "$name" ]; } && [ "$(sha256sum < "$name" | cut -d' ' -f1)" != "$sum" ]; then
      echo "$name (torn)"
    fi
  done < PARTS)
}

say() {  # DIR LABEL [ONLY]
  local dir=$1 label=$2 gone total
  total="?"; [ -s "$dir/PARTS" ] && total=$(wc -l < "$dir/PARTS")
  gone=$(missing "$dir" "${3:-}")
  if [ -z "$gone" ]; then echo "$label: whole ($total parts)"
  else echo "$label: $(echo "$gone" | wc -l) of $total parts missing: $(echo $gone)"; return 1; fi
}

src="${1:?a carried part folder, or --check}"
if [ "$src" = --check ]; then
  only="${2:-}" bad=0 seen=0
  if [ -z "$only" ] || [ "$only" = wheelhouse ]; then
    [ -d "$stash/wheelhouse" ] && { seen=1; say "$stash/wheelhouse" wheelhouse || bad=1; }
  fi
  for d in "$stash"/models/*/; do
    [ -d "$d" ] || continue
    [ -z "$only" ] || [ "$only" = "$(basename "$d")" ] || continue
    seen=1; say "${d%/}" "model $(basename "$d")" || bad=1
  done
  [ "$seen" = 1 ] || { echo "nothing stashed on this machine${only:+ for $only} ($stash)"; bad=1; }
  [ "$bad" = 0 ] || exit 9
  exit 0
fi
case "$src" in
  .wheelhouse/*) dest="$stash/wheelhouse"; label=wheelhouse ;;
  .models/*/p*) name="${src#.models/}"; dest="$stash/models/${name%%/*}"; label="model ${name%%/*}" ;;
  *) echo "stash.sh: unknown part $src" >&2; exit 2 ;;
esac
mkdir -p "$dest"
cp -r "$src"/. "$dest"/
if [ -s "$dest/PARTS" ]; then
  part=$(find "$src" -maxdepth 1 -type f ! -name PARTS -printf '%f\n' | head -1)
  if say "$dest" "$label" "$part" && [ "$label" != wheelhouse ] && [ "${STASH_CONVERT:-1}" = 1 ] \
      && [ -d .device/wheels ] && command -v flock > /dev/null; then
    # The set is whole: convert it now, in a session of its own, while the batch stashes the rest
    # (convert_ahead.sh; call 1's --prepare waits on the same lock). Without flock it waits for call 1.
    name=${label#model }
    if [ "$(bash "$here/detached.sh" status "convert-$name" 2>/dev/null)" != running ]; then
      bash "$here/detached.sh" start "convert-$name" "bash $here/convert_ahead.sh $name" > /dev/null \
        && echo "$label: converting in the background (scripts/device/detached.sh status convert-$name)"
    fi
  fi
else
  du -sh "$dest"
fi
