#!/usr/bin/env bash
# Runs ON the GPU machine, as every call of a session: one long job (a recording, a study role) detached from the
# calls (scripts/device/detached.sh), so that it runs through the session's back-to-back calls instead of stopping
# at each call's limit and starting its model server again in the next.
#   JOB=rec1 FOLDER="study-real-1-5b study-real-main" CALL_SECONDS=580 scripts/device/keep_running.sh COMMAND...
# The first call starts COMMAND in a copy of the working tree (/tmp/detached/JOB.tree) with OUT=/tmp/detached/JOB/out
# (where its own end-of-run files go: pipeline.sh's run-FOLDER.tgz, evaluation times, logs). Every call waits for it
# until CALL_SECONDS (default 580, counted from this script's start) are nearly spent, then brings back a snapshot of
# each run folder /tmp/runs/FOLDER there is as $OUT/run-FOLDER.tgz (scripts/recording_archive.py snapshot: progress
# first, so it resumes; a folder that is no recording, e.g. a comparison's measured rows, as it is), so a machine
# taken away loses at most one call. Once the job has ended, its own files come back: its folders as it packed them
# ($OUT/run-NAME.tgz), vLLM's compiled artefacts where it made new ones
# ($OUT/vllm-cache.tgz; these also from the first call after they are made), the rest in $OUT/job-rest.tgz; while it
# runs, each call also brings back its console and its small files so far ($OUT/job-progress.tgz). Bound
# the job itself (RUN_TIMEOUT for pipeline.sh, or scripts/device/chain.sh's SECONDS) to what the session has left,
# so it stops and packs before the last call. While it runs, the calls run nothing else that sets the machine up
# (setup.sh copies cudanalyst's package afresh, under the job's feet). Exit 0 once the job has ended, 3 while it
# runs (call again within the machine's 30 s), 2 on bad input.
set -uo pipefail
job="${JOB:?JOB: a name for the job}"
folder="${FOLDER:?FOLDER: the run folders under /tmp/runs, space-separated}"
here="$(cd "$(dirname "$0")" && pwd)"
dir="${DETACHED_DIR:-/tmp/detached}/$job"
out="${OUT:-$PWD/.device/out}"
mkdir -p "$out"
runs="${RUNS_DIR:-/tmp/runs}"
bash "$here/detached.sh" status "$job" >/dev/null
if [ $? = 2 ]; then  # not started on this machine yet
  [ $# -ge 1 ] || { echo "keep_running.sh: $job is not running: name the command to start it" >&2; exit 2; }
  # From a copy of the working tree: each call syncs the tree afresh, and would remove what the job writes in it
  # (recordings/ for a study role) and replace the scripts it is running.
  tree="$dir.tree"
  rm -rf "$tree" && mkdir -p "$(dirname "$tree")" && cp -a "$PWD" "$tree" || exit 2
  # Each word of COMMAND quoted as given (chain.sh's steps are words with spaces in them).
  bash "$here/detached.sh" start "$job" \
    "cd $(printf %q "$tree") && mkdir -p $(printf %q "$dir/out") && export OUT=$(printf %q "$dir/out") && $(printf '%q ' "$@")" \
    || exit 2
fi
# Leave the snapshot and the transfer a margin inside the call.
bash "$here/detached.sh" wait "$job" "$(( ${CALL_SECONDS:-580} - SECONDS - 25 > 0 ? ${CALL_SECONDS:-580} - SECONDS - 25 : 0 ))"
state=$?
for f in $folder; do  # each of the job's folders that exists yet
  [ -d "$runs/$f" ] || continue
  if [ -e "$runs/$f/spec.json" ]; then python3 "$here/../recording_archive.py" snapshot "$f" "$runs" "$out/run-$f.tgz"
  # A folder of whole files, no recording: a comparison's measured rows (policy.sh writes each NAME.jsonl whole),
  # which a machine lost mid-measure would otherwise take with it.
  else tar czf "$out/run-$f.tgz" -C "$runs" "$f"; fi
done
# vLLM's compiled artefacts as soon as the job's servers have made new ones, not only at the job's end: a machine
# lost mid-job (a call more than the machine's 30 s late) would otherwise take them with it, and the next session's
# servers would start cold again. models.sh only defines functions and paths when sourced.
# shellcheck source=scripts/device/models.sh
[ "$state" != 0 ] && source "$here/models.sh" && bring_back_vllm_cache
# And what the job has finished so far: its console and its small files (a bench's JSON, written after each of its
# runs, and each run's console beside it), not its archives. On 2026-12-05 a machine that stopped answering in a
# job's second call took a whole run's figures with it (they were in the job's folder, packed only at its end).
if [ "$state" != 0 ]; then
  (cd "$dir" && { echo ./console.log; find ./out -type f -size -1024k ! -name '*.tgz' 2>/dev/null; } \
    | tar czf "$out/job-progress.tgz" -T - 2>/dev/null)
fi
if [ "$state" = 0 ]; then
  # Its folders as it packed them once stopped (over the snapshots: the same names), and the rest in one file: the
  # device tool brings back at most 8 files, each under 16 MiB.
  # vLLM's compiled artefacts (study.sh, up to 15 MiB) come back as their own file, as a plain call brings them:
  # inside job-rest.tgz they would take it over the limit, and the logs with it.
  for f in "$dir"/out/run-*.tgz "$dir"/out/vllm-cache.tgz; do [ -e "$f" ] && cp "$f" "$out/"; done
  (cd "$dir" && find . -type f ! -path './out/run-*.tgz' ! -path './out/vllm-cache.tgz' \
    | tar czf "$out/job-rest.tgz" -T -) \
    && echo "keep_running.sh: $job has ended; its folders are in run-*.tgz, its other files in job-rest.tgz"
  exit 0
fi
exit 3
