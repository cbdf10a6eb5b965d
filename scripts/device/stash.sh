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
# Once the wheelhouse and a model are both whole and .device/wheels is here, the model's conversion starts in the
# background (convert_ahead.sh; STASH_CONVERT=0 turns that off).
set -euo pipefail
stash="${CUDANALYST_STASH:-/tmp/cudanalyst-stash}"
here="$(dirname "${BASH_SOURCE[0]}")"

missing() {  # DIR [ONLY]: the parts its PARTS lists that are absent, or differ (all, or only the part ONLY: each
  # stash call hashes the part it copied, not the whole set again; --names-only, no part's name, hashes none);
  # nothing when whole or unlisted
  local dir=$1 only=${2:-}
  [ -s "$dir/PARTS" ] || return 0
  (cd "$dir" && while read -r name sum; do
    if [ ! -f "$name" ]; then echo "$name (absent)"
    elif { [ -z "$only" ] || [ "$only" = "$name" ]; } && [ "$(sha256sum < "$name" | cut -d' ' -f1)" != "$sum" ]; then
      echo "$name (torn)"
    fi
  done < PARTS)
}

present() {  # DIR: every part its PARTS lists is here (names only, no part hashed: the conversion checks them)
  [ -s "$1/PARTS" ] && [ -z "$(missing "$1" --names-only)" ]
}

convert_whole_models() {
  # Once the wheelhouse and a model are both here whole, that model's conversion starts in a session of its own
  # (convert_ahead.sh) while the batch stashes the rest; call 1's --prepare waits on the same lock. It needs
  # .device/wheels (the batch's first call carries .device) and flock; STASH_CONVERT=0 turns it off.
  [ "${STASH_CONVERT:-1}" = 1 ] && [ -d .device/wheels ] && command -v flock > /dev/null || return 0
  present "$stash/wheelhouse" || return 0
  local d name
  for d in "$stash"/models/*/; do
    [ -d "$d" ] && present "${d%/}" || continue
    name=$(basename "$d")
    [ "$(bash "$here/detached.sh" status "convert-$name" 2>/dev/null)" = "not started" ] || continue
    bash "$here/detached.sh" start "convert-$name" "bash $here/convert_ahead.sh $name" > /dev/null \
      && echo "model $name: converting in the background (scripts/device/detached.sh status convert-$name)"
  done
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
  say "$dest" "$label" "$part" || true  # the set fills up call by call
  convert_whole_models
else
  du -sh "$dest"
fi
