#!/usr/bin/env bash
# Runs ON the GPU machine: device scripts side by side, each on a GPU of its own, so that one call's device time
# does the work of several (a recording on GPU 0 while the study's runs go on on GPU 1, say).
#   scripts/device/lanes.sh "0:scripts/device/pipeline.sh examples/h200-recording.yaml" \
#                           "1:scripts/device/study.sh examples/study/summary-0.5b.yaml ..."
# Set-up (setup.sh, vLLM) is done here once; each lane then runs with CUDA_VISIBLE_DEVICES=GPU and its own
# OUT=$OUT/laneGPU, its console in $OUT/laneGPU/console.log. Two lanes may share a GPU when neither times kernels
# (the GPU tests beside a --prepare, on a one-GPU machine): "0.tests:..." "0.prep:..." run in lane0.tests and
# lane0.prep. Every model the lanes serve must already be prepared (a --prepare call with PREPARE_MODELS), so that no
# two lanes convert the same one at once.
# The device tool brings back at most 8 files: at the end, what a lane wrote besides its run-*.tgz is packed into
# $OUT/laneGPU/rest.tgz. Exit status: the first failing lane's.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/device/lanes.sh GPU:COMMAND..." >&2; exit 2; }
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1
# shellcheck source=scripts/device/models.sh
source scripts/device/models.sh
vllm_from_wheelhouse || exit 1
export CUDANALYST_DEVICE_READY=1
base="$out"
pids=() names=()
for lane in "$@"; do
  id=${lane%%:*} command=${lane#*:}
  gpu=${id%%.*}
  dir="$base/lane$id"; mkdir -p "$dir"
  step "lane $id: $command"
  CUDA_VISIBLE_DEVICES=$gpu OUT="$dir" bash -c "$command" > "$dir/console.log" 2>&1 < /dev/null &
  pids+=($!) names+=("$id")
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; code=$?
  echo "== lane ${names[$i]}: exit $code"
  grep -v "━" "$base/lane${names[$i]}/console.log" | tail -n 25
  [ "$rc" = 0 ] && rc=$code
done
for gpu in "${names[@]}"; do
  dir="$base/lane$gpu"
  (cd "$dir" && find . -type f ! -name 'run-*.tgz' ! -name rest.tgz | tar czf rest.tgz -T - \
    && find . -type f ! -name 'run-*.tgz' ! -name rest.tgz -delete && find . -mindepth 1 -type d -empty -delete)
done
ls -la "$base"/lane*
exit "$rc"
