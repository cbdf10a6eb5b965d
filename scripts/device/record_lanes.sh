#!/usr/bin/env bash
# Runs ON the GPU machine: several recordings side by side on one GPU (the study's two agents, the policy comparison's
# arms), each a lane of scripts/device/lanes.sh running scripts/device/pipeline.sh SPEC, all stopped at one deadline.
#   RUN_DEADLINE=590 scripts/device/record_lanes.sh examples/study-real/recordings/1.5b.yaml \
#                                                   examples/study-real/recordings/1.5b-islands-diff.yaml
# Each lane starts its model server once the previous lane's is up ("warming up the model" in its console; at most
# START_WAIT seconds, default 200): two vLLM servers initialising at once on one H200 failed (2026-12-02, "Engine
# core initialization failed"). RUN_DEADLINE counts from this script's start: by then every lane's folder is packed.
# Each lane's RUN_TIMEOUT is what is left of it, less STOP_MARGIN seconds (default 70), when the lane starts: a
# recording stopped by SIGTERM takes up to pipeline.sh's 60 s kill-after to stop, then its folder is packed (H200,
# 2026-12-02: with RUN_DEADLINE=575 and no margin the second lane was still stopping at the call's 600 s limit, and
# its folder came back only from a follow-up call to the still-warm machine). So RUN_DEADLINE is the device call's
# limit less a few seconds. Needs the models prepared (a --prepare call) and, for the GPU tools' queue,
# CUDANALYST_GPU_TOOL_SLOTS as for one recording.
# Recordings time their programs for the agent's fitness; side by side that timing is noisier, as it already is among
# one recording's tasks; the study re-times every frozen program with the kernel stage. DRY_RUN=1 prints the lanes.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: RUN_DEADLINE=SECONDS scripts/device/record_lanes.sh SPEC..." >&2; exit 2; }
end=$(( $(date +%s) + ${RUN_DEADLINE:-590} ))
stop=$(( end - ${STOP_MARGIN:-70} ))
lanes=() previous=""
for i in $(seq 1 $#); do
  spec="${!i}"
  [ -f "$spec" ] || { echo "record_lanes.sh: no spec $spec" >&2; exit 2; }
  id="0.r$i"
  wait_for=""
  if [ -n "$previous" ]; then
    wait_for="for _ in \$(seq $(( ${START_WAIT:-200} / 5 ))); do grep -qs 'warming up the model' '$previous' && break; sleep 5; done; "
  fi
  # What is left of the deadline before the stop margin, at least 1 s: `timeout 0` would mean no limit at all.
  left="\$(( $stop - \$(date +%s) > 1 ? $stop - \$(date +%s) : 1 ))"
  lanes+=("$id:${wait_for}RUN_TIMEOUT=$left bash scripts/device/pipeline.sh $spec")
  previous="${OUT:-$PWD/.device/out}/lane$id/console.log"
done
[ -n "${DRY_RUN:-}" ] && { printf '%s\n' "${lanes[@]}"; exit 0; }
exec bash scripts/device/lanes.sh "${lanes[@]}"
