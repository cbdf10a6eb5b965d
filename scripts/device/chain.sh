#!/usr/bin/env bash
# Runs ON the GPU machine: device steps one after another within one deadline, as the job of
# scripts/device/keep_running.sh: finish a recording, then run a study role on it alone on the GPU, then start the
# next recording, say, in one session without a call's limit between them.
#   scripts/device/chain.sh SECONDS "STEP" "STEP" ...
# Each STEP is a command (bash -c) run with RUN_TIMEOUT, STUDY_BUDGET and BENCH_TIMEOUT set to what is left of SECONDS (counted
# from this script's start) less MARGIN (default 120: its set-up, pipeline.sh's 60 s to stop, then its packing), which
# scripts/device/pipeline.sh (its run, its bench) and scripts/device/study.sh take as their bound. A step starts only with MIN_STEP
# seconds (default 240: a model server's start and a few minutes of work) left; a failed step is said and the next
# one goes on. Exit status: the first failed step's, 0 when every step that ran succeeded.
set -uo pipefail
[ $# -ge 2 ] && [[ "$1" =~ ^[0-9]+$ ]] || { echo "usage: scripts/device/chain.sh SECONDS STEP..." >&2; exit 2; }
end=$((SECONDS + $1))
shift
rc=0
for step in "$@"; do
  left=$((end - SECONDS - ${MARGIN:-120}))
  if [ "$left" -lt "${MIN_STEP:-240}" ]; then
    echo "== chain: $left s left, under ${MIN_STEP:-240}: not started: $step"
    continue
  fi
  echo "== chain $(date +%H:%M:%S): $left s for: $step"
  RUN_TIMEOUT=$left STUDY_BUDGET=$left BENCH_TIMEOUT=$left bash -c "$step"
  code=$?
  echo "== chain $(date +%H:%M:%S): exit $code: $step"
  [ "$code" = 0 ] || [ "$rc" != 0 ] || rc=$code
done
exit "$rc"
