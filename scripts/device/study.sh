#!/usr/bin/env bash
# Runs ON the GPU machine: the study's AttributionRuns (examples/study/, issue 15) one after another inside one
# call's time, each resumable across calls. Needs what pipeline.sh needs (.device carried, the wheelhouse and each
# model's GGUF parts stashed in /tmp by earlier calls: scripts/device/stash.sh).
#   STUDY_BUDGET=540 scripts/device/study.sh examples/study/implicit-1.5b.yaml examples/study/raw-0.5b.yaml ...
# 1. Restores each run-NAME.tgz of $STUDY_RESTORE (default .device/study-runs: put there what earlier calls brought
#    back, it travels with .device) into /tmp/runs, unless this (warm) machine still has that folder: its copy is newer;
#    then, for a spec's folder still absent, the copy kept in git (docs/results/*/in-progress/NAME.tar.xz).
# 2. Per spec, in the order given: skipped when its folder holds an outcome for every planned unit and a report (a
#    missing report is built, no GPU needed), or when its models' parts are not stashed and the LLM stage has units
#    left (said, the others go on; with every unit left holding its candidate, the pass needs no model);
#    else `python -m cudanalyst run SPEC --output /tmp/runs` (the first pass also converts the later specs' models
#    in the background: models.sh prepare_models_ahead), sent SIGTERM (taken as Ctrl-C; SIGINT is
#    ignored by a script's background job) when STUDY_BUDGET seconds (counted from this
#    script's start, set-up included) are nearly spent. Finished units stay in the folder; the next call resumes.
# 3. Brings back $OUT/run-NAME.tgz for each run it touched (its whole folder; over 15 MiB, the candidates of units
#    that already have their outcome are left out: resuming does not read them), $OUT/study-logs.tgz (console and,
#    when a pass stopped early, shard and server logs) and $OUT/study.tsv (name, outcomes, units, state).
# The device tool brings back at most 8 files: with setup.sh's pycuda-built.tgz that leaves 5 runs a call.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/device/study.sh SPEC..." >&2; exit 2; }
budget="${STUDY_BUDGET:-540}"
restore="${STUDY_RESTORE:-.device/study-runs}"
reserve=75        # SIGTERM's grace (cudanalyst run stops its groups within 20 s; --kill-after 30) and the packing
min_run=${STUDY_MIN_RUN:-150}       # a pass shorter than this would spend its time starting the model server
max_bytes=$((${STUDY_MAX_MIB:-15} * 1024 * 1024))  # the device tool brings back 16 MiB a file
runs=/tmp/runs logs=/tmp/study-logs
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1
# shellcheck source=scripts/device/models.sh
source scripts/device/models.sh
vllm_from_wheelhouse || exit 1
mkdir -p "$runs" "$logs"
: > "$out/study.tsv"

for t in "$restore"/run-*.tgz; do
  [ -e "$t" ] || continue
  name=$(basename "$t" .tgz); name=${name#run-}
  if [ -d "$runs/$name" ]; then echo "restore: $name kept from this machine"
  else tar xzf "$t" -C "$runs" && echo "restore: $name from $t" || echo "restore: $t is torn, not restored"; fi
done

# Then, per spec, a copy an earlier session kept in git (docs/results/*/in-progress/NAME.tar.xz:
# scripts/recording_archive.py keep), where neither this machine nor .device/study-runs has the folder: a role that
# spans sessions (main at two rollouts resumes from its pilot's folder, secret.json included).
for spec in "$@"; do
  name=$($py -c 'import sys; from cudanalyst.api import load_run; print(load_run(sys.argv[1]).metadata.name)' "$spec" 2>/dev/null) || continue
  $py scripts/recording_archive.py restore "$name" "$runs" | grep -v "no saved copy restored" || true
done

state_of() {  # NAME OUTCOMES UNITS report|noreport LLM_LEFT, from the spec's plan and the run folder
  $py - "$1" "$runs" <<'PY'
import pathlib, sys
from cudanalyst.api import load_run
from cudanalyst.planned_run import plan_run
run = load_run(sys.argv[1])
folder = pathlib.Path(sys.argv[2]) / run.metadata.name
units = {u.key for u in plan_run(run).units}
have = {p.stem for p in (folder / "outcomes").glob("*.json")}
written = {p.stem for p in (folder / "candidates").glob("*.json")}
print(run.metadata.name, len(units & have), len(units), "report" if (folder / "report/report.json").is_file() else "noreport",
      len(units - have - written))  # units the LLM stage has left: none, and the pass needs no model (cudanalyst run)
PY
}

pack() {  # the run folder as $OUT/run-NAME.tgz, under the device tool's 16 MiB a file
  local name=$1 tgz="$out/run-$1.tgz"
  tar czf "$tgz" -C "$runs" "$name"
  if [ "$(stat -c %s "$tgz")" -gt "$max_bytes" ]; then
    (cd "$runs/$name/outcomes" && ls) | sed -n "s|^\(.*\)\.json$|$name/candidates/\1.json|p" > "/tmp/exclude-$name"
    tar czf "$tgz" -C "$runs" -X "/tmp/exclude-$name" "$name"
    echo "pack: $name over ${STUDY_MAX_MIB:-15} MiB, candidates of units with an outcome left out"
  fi
  if [ "$(stat -c %s "$tgz")" -gt "$max_bytes" ]; then
    tar czf "$tgz" -C "$runs" --exclude="$name/candidates" "$name"
    echo "pack: $name still over ${STUDY_MAX_MIB:-15} MiB, every candidate left out (the next pass writes the missing ones again)"
  fi
  ls -la "$tgz"
}

ahead_pid=""
i=0
for spec in "$@"; do
  i=$((i + 1))
  if ! read -r name done_units planned report llm_left < <(state_of "$spec"); then
    printf '%s\t\t\t%s\n' "$spec" "not a valid spec (above)" >> "$out/study.tsv"; continue
  fi
  state=""
  if [ "$done_units" = "$planned" ] && [ "$report" = report ]; then
    state="done before this call"
  elif [ "$done_units" = "$planned" ]; then
    step "$name: every unit done, building the report"
    $py -m cudanalyst report "$runs/$name" 2>&1 | tee "$logs/$name-report.log" | tail -3
    state="done (report built)"; pack "$name"
  else
    left=$((budget - SECONDS - reserve))
    # shellcheck disable=SC2046
    if [ "$left" -lt "$min_run" ]; then
      state="not started: ${left} s left of the budget"
    elif [ "$llm_left" != 0 ] && ! prepare_models $(spec_models "$spec"); then
      state="skipped: a model's parts are not stashed"
    else
      if [ -z "$ahead_pid" ] && [ "$i" -lt $# ]; then  # the later specs' models, while this pass runs
        prepare_models_ahead "${@:$((i + 1))}" > "$logs/convert-ahead.log" 2>&1
        [ "$ahead_pid" = none ] || echo "converting the later specs' models in the background (study-logs/convert-ahead.log)"
      fi
      left=$((budget - SECONDS - reserve))
      step "$name: cudanalyst run $spec ($done_units/$planned units done, SIGTERM in $left s)"
      # Not through a pipe: a process left holding it would keep the pipe open, and this script waiting.
      timeout --signal=TERM --kill-after=30 "$left" $py -m cudanalyst run "$spec" --output "$runs" > "$logs/$name.log" 2>&1 &
      pid=$!
      tail -n +1 -f --pid="$pid" "$logs/$name.log" | grep --line-buffered -v "━"
      wait "$pid"; rc=$?
      # A pass that stopped keeps its shard and server logs in /tmp/cudanalyst-NAME-*/ (executor.work_dir).
      for d in /tmp/cudanalyst-"$name"-*/; do
        [ -d "$d" ] || continue
        mkdir -p "$logs/$name-$(basename "$d")"
        for f in "$d"*.log "$d"*/*.log; do [ -f "$f" ] && tail -n 300 "$f" > "$logs/$name-$(basename "$d")/$(basename "$f")"; done
      done
      read -r _ done_units planned report _ < <(state_of "$spec")
      state="exit $rc$([ "$rc" = 124 ] && echo ' (stopped at the budget; the next call resumes)')"
      pack "$name"
    fi
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$done_units" "$planned" "$state" >> "$out/study.tsv"
  echo "== $name: $done_units/$planned units, $state"
done
# A conversion still running ahead is for specs this call had no time for: stop it (the folder is renamed into place
# only when whole, so a later call converts again), rather than hold the call open.
if [[ "$ahead_pid" =~ ^[0-9]+$ ]] && kill -0 "$ahead_pid" 2>/dev/null; then
  pkill -TERM -P "$ahead_pid" 2>/dev/null; kill "$ahead_pid" 2>/dev/null; echo "stopped the conversion ahead (unfinished)"
fi
tar czf "$out/study-logs.tgz" -C /tmp study-logs
bring_back_vllm_cache
step "study: $SECONDS s of $budget"
column -t -s $'\t' "$out/study.tsv" 2>/dev/null || cat "$out/study.tsv"
