#!/usr/bin/env bash
# Runs ON the GPU machine: the policy comparison of issue 30 (docs/policy.md). Its recordings (one per arm and seed,
# scripts/policy_comparison.py specs) inside one call's time (or a keep_running.sh job's), each resumable across
# calls, then `measure` (the kernel stage's verify and compare) once every picked recording is finished.
#   POLICY_BUDGET=540 scripts/device/policy.sh examples/policy/comparison-h200.yaml [GLOB]
# GLOB picks recordings by name (default: all; e.g. 'pc-*-s0' for one seed, so lanes.sh can split the arms or
# seeds over GPUs). Needs what pipeline.sh needs (.device carried; the wheelhouse and both models' GGUF parts
# stashed by earlier calls: scripts/device/stash.sh).
# 1. Restores $POLICY_RESTORE/policy-runs*.tgz (default .device/policy-runs: what earlier calls brought back) into
#    /tmp/runs, unless this warm machine still has the folder; then, for a recording still absent, the copy an
#    earlier session kept in git (docs/results/*/recordings/NAME.tar.xz: scripts/recording_archive.py keep).
# 2. Per picked recording not yet imported: `cudanalyst record SPEC --output /tmp/runs`, SIGTERM (taken as Ctrl-C)
#    when POLICY_BUDGET seconds (from this script's start) are nearly spent; its wall seconds are added to
#    /tmp/runs/times.tsv. Without the comparison's sharedServers, one after another, each serving its own model
#    (its GPU time: the GPU held by it alone). With them, scripts/serve_models.py serves the models once on their
#    ports and the recordings run side by side, POLICY_SIDE_BY_SIDE at once (default 6: eleven at once on a 16-core
#    machine made each tool run 5-8x slower, docs/results/policy-2026-12-05), so a recording's wall seconds are its
#    time on a GPU it shared with the others. POLICY_IMPORTTIME=1: the servers' Python imports timed (-X importtime,
#    in $OUT/policy-logs-GLOB.tgz, servers/).
# 3. Every picked recording with its trajectory and no measured rows yet (neither /tmp/runs/COMPARISON-measured/NAME.jsonl
#    of this machine nor docs/results/*/measured/NAME.jsonl kept in git): measure, alone on the GPU once the
#    recordings have stopped -> /tmp/runs/COMPARISON-measured/NAME.jsonl, one recording at a time (keep_running.sh
#    snapshots the folder each call when FOLDER names it), within what is left of POLICY_BUDGET; a copy in
#    $OUT/measured-GLOB.tgz.
# 4. Brings back $OUT/policy-runs-GLOB.tgz (each folder with its last checkpoint only: what a resume and `measure`
#    read) and the consoles in $OUT/policy-logs-GLOB.tgz.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/device/policy.sh COMPARISON.yaml [GLOB]" >&2; exit 2; }
comparison=$1 pick=${2:-*}
tag=$(echo "$pick" | tr -c 'A-Za-z0-9\n-' '_')
budget="${POLICY_BUDGET:-540}" restore="${POLICY_RESTORE:-.device/policy-runs}"
reserve=90 min_run=${POLICY_MIN_RUN:-150}
runs=/tmp/runs specs=/tmp/policy-specs-$tag logs=/tmp/policy-logs
# pycuda's build (a fresh machine's) beside vLLM's install and the models' conversion, which do not need it.
PYCUDA_BACKGROUND=1
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1
# shellcheck source=scripts/device/models.sh
source scripts/device/models.sh
vllm_from_wheelhouse || exit 1
mkdir -p "$runs" "$logs"
$py scripts/policy_comparison.py specs "$comparison" --out "$specs" || exit 2
cname=$($py -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$comparison")
measured="$runs/$cname-measured"
# Both models at once (a lock each; 88 s and 109 s one after the other on the H200, ninth session).
convert=()
# POLICY_SERVE names the models this call needs (default both; "large" when the picked arms are the large model's).
serve="${POLICY_SERVE:-large small}"
for m in $($py -c "
import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); print(*(c[w]['model'] for w in sys.argv[2:]))" "$comparison" $serve); do
  prepare_models "$m" > "$logs/prepare-$m.log" 2>&1 &
  convert+=($!)
done
for pid in "${convert[@]}"; do wait "$pid" || { cat "$logs"/prepare-*.log; exit 1; }; done
cat "$logs"/prepare-*.log
pycuda_ready || exit 1

for t in "$restore"/policy-runs*.tgz; do
  [ -e "$t" ] || continue
  for name in $(tar tzf "$t" | sed -n 's|^\([^/]*\)/spec.json$|\1|p'); do
    if [ -d "$runs/$name" ]; then echo "restore: $name kept from this machine"
    else tar xzf "$t" -C "$runs" "$name" && echo "restore: $name from $t"; fi
  done
  tar xzf "$t" -C "$runs" --skip-old-files --wildcards 'times-*.tsv' 2>/dev/null || true  # a warm machine's own win
done

# Then what earlier sessions kept in git (.device/ does not outlive a session): scripts/recording_archive.py keep
# splits a policy-runs-GLOB.tgz into docs/results/<page>/recordings/NAME.tar.xz and times-NAME.tsv.
for spec in "$specs"/$pick.yaml; do
  [ -e "$spec" ] || continue
  name=$(basename "$spec" .yaml)
  [ -d "$runs/$name" ] && continue
  $py scripts/recording_archive.py restore "$name" "$runs" || exit 2
  for t in docs/results/*/recordings/"times-$name.tsv"; do
    [ -e "$t" ] && [ -d "$runs/$name" ] && [ ! -e "$runs/times-$name.tsv" ] && cp "$t" "$runs/"
  done
done

# Shared servers (the comparison's sharedServers): the models are served once, on the ports every recording's spec
# names, and the recordings run side by side (POLICY_SIDE_BY_SIDE at once, default 6); without them, one
# after another, each with its own server.
shared=$($py -c "import sys, yaml; print(int(bool(yaml.safe_load(open(sys.argv[1])).get('sharedServers'))))" "$comparison")
picked=() todo=()
# A seed at a time (names end in -sSEED): with a GLOB of several seeds the servers start once, and a seed's arms start
# before the next seed's (and are measured first), so with POLICY_SIDE_BY_SIDE at a seed's size its arms share a load.
# shellcheck disable=SC2086
for spec in $(printf '%s\n' "$specs"/$pick.yaml | awk -F- '{print $NF "\t" $0}' | sort -V | cut -f2-); do
  [ -e "$spec" ] || { echo "no recording matches $pick"; exit 2; }
  name=$(basename "$spec" .yaml); picked+=("$name")
  if [ -d "$runs/$name/trajectory" ]; then echo "$name: recorded before this call"; else todo+=("$name"); fi
done
side="${POLICY_SIDE_BY_SIDE:-1}"; [ "$shared" = 1 ] && side="${POLICY_SIDE_BY_SIDE:-6}"
server_pid=""
if [ "$shared" = 1 ] && [ "${#todo[@]}" -gt 0 ]; then
  step "the comparison's models, served once for ${#todo[@]} recording(s) side by side (at most $side at once)"
  rm -f /tmp/policy-servers.ready
  mkdir -p "$logs/servers"
  [ "${POLICY_IMPORTTIME:-0}" = 1 ] && export PYTHONPROFILEIMPORTTIME=1
  # shellcheck disable=SC2086
  $py scripts/serve_models.py "$comparison" --which $serve --log-dir "$logs/servers" --ready /tmp/policy-servers.ready \
    > "$logs/servers.log" 2>&1 &
  server_pid=$!
  unset PYTHONPROFILEIMPORTTIME
  # Every server's start over before any recording starts (serve_models.py writes the file then).
  while [ ! -e /tmp/policy-servers.ready ] && kill -0 "$server_pid" 2>/dev/null; do sleep 2; done
  grep -v "import time" "$logs/servers.log"
fi

served() {  # NAME: every endpoint the recording's spec names answers (serve_models.py lists those that do)
  local url
  for url in $(grep -o "endpoint: *[\"']*http://[^ ,}\"']*" "$specs/$1.yaml" | grep -o 'http://.*' | sort -u); do
    grep -qx "$url" /tmp/policy-servers.ready 2>/dev/null || return 1
  done
}

record_one() {  # NAME LEFT: one recording's pass, its wall seconds added to its times file
  local t0=$SECONDS rc
  timeout --signal=TERM --kill-after=60 "$2" $py -m cudanalyst record "$specs/$1.yaml" --output "$runs" \
    > "$logs/$1.log" 2>&1
  rc=$?
  printf '%s\t%s\n' "$1" "$((SECONDS - t0))" >> "$runs/times-$1.tsv"
  echo "== $1: exit $rc after $((SECONDS - t0)) s"; tail -n 12 "$logs/$1.log"
  [ -d "$runs/$1/trajectory" ] || echo "$1: stopped (exit $rc), resumes next call"
}
pids=()
for name in "${todo[@]}"; do
  while [ "$(jobs -rp | grep -cvx "${server_pid:-none}")" -ge "$side" ]; do sleep 2; done
  if [ -n "$server_pid" ] && ! served "$name"; then
    echo "$name: not started, its model server is not up:"; tail -n 20 "$logs/servers.log"; continue
  fi
  left=$((budget - SECONDS - reserve))
  if [ "$left" -lt "$min_run" ]; then echo "$name: not started, $left s left"; continue; fi
  step "$name: cudanalyst record ($left s at most)"
  record_one "$name" "$left" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
if [ -n "$server_pid" ]; then kill -TERM "$server_pid" 2>/dev/null; wait "$server_pid"; grep -v "import time" "$logs/servers.log" | tail -n 30; fi

# A recording's GPU seconds: the sum of its passes.
cat "$runs"/times-*.tsv 2>/dev/null | awk -F'\t' '{s[$1]+=$2} END {for (n in s) printf "%s\t%d\n", n, s[n]}' > "$runs/times.tsv"
# A recording measured before, on this machine or in git (docs/results/*/measured/NAME.jsonl), is not measured again.
tomeasure=()
for name in "${picked[@]}"; do
  [ -d "$runs/$name/trajectory" ] && [ ! -e "$measured/$name.jsonl" ] || continue
  kept=$(ls -d docs/results/*/measured/"$name".jsonl 2>/dev/null | sort -r | head -n 1)
  if [ -n "$kept" ]; then echo "$name: measured before ($kept)"; else tomeasure+=("$runs/$name"); fi
done
left=$((budget - SECONDS - 30))
if [ "${#tomeasure[@]}" -gt 0 ] && [ "${POLICY_MEASURE:-1}" = 1 ] && [ "$left" -gt 60 ]; then
  step "measure ${#tomeasure[@]} recording(s): the kernel stage re-verifies and re-times every recorded program ($left s at most)"
  # One recording's rows at a time (NAME.jsonl, whole or absent): a budget or a machine lost mid-way costs one.
  timeout --signal=TERM --kill-after=20 "$left" $py scripts/policy_comparison.py measure "${tomeasure[@]}" \
    --comparison "$comparison" --out "$measured" 2>&1 | tee "$logs/measure-$tag.log" | tail -n 25
elif [ "${#tomeasure[@]}" -gt 0 ]; then
  echo "measure: ${#tomeasure[@]} recording(s) left unmeasured ($left s left, POLICY_MEASURE=${POLICY_MEASURE:-1})"
fi

step "pack"
# Each recording's own logs (OpenEvolve's per task, iterations without a child and why), from its newest folder: a
# stopped or failed pass leaves it (one that finishes removes it). The last 2 MB of each.
for n in "${picked[@]}"; do
  kept=$(ls -td /tmp/cudanalyst-record-"$n"-*/ 2>/dev/null | head -n 1)
  [ -n "$kept" ] || continue
  mkdir -p "$logs/$n-tasks"
  for f in "$kept"task-*.log; do [ -e "$f" ] && tail -c 2000000 "$f" > "$logs/$n-tasks/$(basename "$f")"; done
done
: > /tmp/policy-exclude
for n in "${picked[@]}"; do
  for task_dir in "$runs/$n"/openevolve/*/checkpoints; do
    [ -d "$task_dir" ] || continue
    last=$(ls "$task_dir" | sed -n 's/^checkpoint_//p' | sort -n | tail -1)
    ls "$task_dir" | grep -v "^checkpoint_$last$" | sed "s|^|${task_dir#"$runs"/}/|" >> /tmp/policy-exclude
  done
done
existing=(); for n in "${picked[@]}"; do [ -d "$runs/$n" ] && existing+=("$n"); done
(cd "$runs" && tar czf "$out/policy-runs-$tag.tgz" -X /tmp/policy-exclude "${existing[@]}" times-*.tsv 2>/dev/null)
tar czf "$out/policy-logs-$tag.tgz" -C "$logs" .
cp "$runs/times.tsv" "$out/times-$tag.tsv" 2>/dev/null
# One archive, not a file per recording: a call brings back only so many files (the rest are left out).
[ -d "$measured" ] && tar czf "$out/measured-$tag.tgz" -C "$measured" .
bring_back_vllm_cache
ls -la "$out"
