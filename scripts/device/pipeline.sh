#!/usr/bin/env bash
# Runs ON the GPU machine: the whole pipeline of issue 7 on real parts. vLLM serves the spec's local
# model on the GPU, the runner plans, generates, compiles, verifies and times the kernels, and the
# report is built. Needs, stashed in /tmp by earlier calls (scripts/device/stash.sh): the vLLM
# wheelhouse parts (.wheelhouse/p0..pN, from ../shared/gpu-wheelhouse/build.sh OUTDIR "$(python3 scripts/device/part_size.py)") and the model's GGUF
# parts (.models/NAME/p00.., from scripts/device/pack_model.sh NAME); and .device carried in this call
# (scripts/device/prepare.sh).
#   scripts/device/pipeline.sh [SPEC] [--prepare|--bench|--bench-only] [bench/pipeline.py options]
# --prepare stops after the installs, the model and the kernel stage's GPU tests (so the run itself fits
# in a later call's time limit); --bench runs bench/pipeline.py after the run, --bench-only instead of it.
# Every GPU of the machine is used (one lane each, runner/cudanalyst/runner/local/executor.py); `--gpus 1,2` among the bench
# options measures 1 against 2 GPUs in one bench run. RUN_TIMEOUT / BENCH_TIMEOUT (seconds) bound the run and
# the bench (the run with SIGTERM, which `cudanalyst run`/`record` take as Ctrl-C even where SIGINT is ignored, as it
# is for a background job of a script: scripts/device/lanes.sh; the bench with SIGINT), so what they finished still comes back (the bench's JSON is rewritten after each
# side). The bench's JSON is also kept in /tmp; the next bench call on the same machine prints its ratios
# against it (--against), so two calls of 1 and 2 GPUs still give their ratio. The run (or recording) folder comes
# back as $OUT/run-NAME.tgz; put it in .device/runs/ (or commit it to docs/results/DIR/recordings/NAME.tar.xz, for a later session)
# and a later machine resumes it instead of starting again.
set -uo pipefail
spec="${1:-examples/h200-pipeline.yaml}"
# --prepare builds pycuda beside vLLM's install and the models' conversion, which do not need it.
[ "${2:-}" = "--prepare" ] && PYCUDA_BACKGROUND=1
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1

# shellcheck source=scripts/device/models.sh
source scripts/device/models.sh
vllm_from_wheelhouse || exit 1
# Every local model the spec names, from its stashed GGUF parts to a Hugging Face folder.
# PREPARE_MODELS adds others (another call's lanes, scripts/device/lanes.sh, may then share them without racing).
models="$(spec_models "$spec") ${PREPARE_MODELS:-}" || exit 1
command=run; [ "$(sed -n 's/^kind: *//p' "$spec")" = TrajectoryRecording ] && command=record
# shellcheck disable=SC2086
prepare_models $models || exit 1
pycuda_ready || exit 1

if [ "${2:-}" = "--prepare" ]; then
  # PREPARE_TESTS=none leaves the GPU tests to a lane of a later call (scripts/device/gpu_tests.sh), beside other work.
  [ "${PREPARE_TESTS:-}" = none ] || CUDANALYST_DEVICE_READY=1 OUT="$out" bash scripts/device/gpu_tests.sh
  if [ "${PREPARE_TIMING:-1}" != 0 ]; then
    step "bench/timing.py"
    $py bench/timing.py 2>&1 | tee "$out/bench-timing.log"
  fi
  step "prepared"
  exit 0
fi

rc=0
name=$($py -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['metadata']['name'])" "$spec")
if [ "${2:-}" != "--bench-only" ]; then
  step "the pipeline: cudanalyst $command $spec"
  # A run folder an earlier machine brought back ($OUT/run-NAME.tgz) resumes here, unless this warm machine still
  # has its own, newer copy: from .device/runs/ (this session's copy), else from docs/results/*/recordings/NAME.tar.xz,
  # where an earlier session committed it (scripts/recording_archive.py: ignored folders do not outlive a session).
  $py scripts/recording_archive.py restore "$name" /tmp/runs || exit 2
  t0=$SECONDS
  timeout --signal=TERM --kill-after=60 "${RUN_TIMEOUT:-0}" $py -m cudanalyst "$command" "$spec" --output /tmp/runs 2>&1 | tee "$out/pipeline.log"
  rc=${PIPESTATUS[0]}
  echo "pipeline wall time $((SECONDS - t0)) s, exit $rc"
  tar czf "$out/run-$name.tgz" -C /tmp/runs "$name" && ls -la "$out"
  if [ "$command" = record ]; then  # where the evaluations' time went, this pass and the earlier ones
    $py scripts/evaluation_times.py "/tmp/runs/$name" --json "$out/evaluation-times.json" || true
  fi
  cp /tmp/cudanalyst-"$name"-*/*.log "$out"/ 2>/dev/null
  # A recording's own logs (each task's OpenEvolve log, the model server's) are in its newest
  # /tmp/cudanalyst-record-NAME-* folder: they say why a task did not checkpoint. The last 2 MB of each.
  logs=$(ls -td /tmp/cudanalyst-record-"$name"-*/ 2>/dev/null | head -n 1)
  if [ -n "$logs" ]; then
    kept=$(mktemp -d)
    for f in "$logs"*.log; do [ -f "$f" ] && tail -c 2000000 "$f" > "$kept/$(basename "$f")"; done
    tar czf "$out/record-logs.tgz" -C "$kept" . && rm -rf "$kept"
  fi
fi

if [ "${2:-}" = "--bench" ] || [ "${2:-}" = "--bench-only" ]; then
  step "bench/pipeline.py"
  work="/tmp/bench-pipeline-$(date +%H%M%S)"   # a bench starts from an empty folder, every call its own
  started=/tmp/bench-started-$$; touch "$started"  # what the bench's runs write in /tmp is newer than this
  previous=/tmp/cudanalyst-bench-previous.json
  against=(); [ -s "$previous" ] && against=(--against "$previous")
  timeout --signal=INT --kill-after=30 "${BENCH_TIMEOUT:-0}" $py bench/pipeline.py --spec "$spec" --workdir "$work" \
    --json "$out/bench-pipeline.json" "${against[@]}" "${@:3}" 2>&1 | tee "$out/bench-pipeline.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  [ -s "$out/bench-pipeline.json" ] && cp "$out/bench-pipeline.json" "$previous"
  # Every log of the bench's runs as one archive ($OUT brings back at most 8 files): the sides' shard and server
  # logs; for --user-clock, each run's console and timings, its shards' and server's logs (a folder
  # /tmp/cudanalyst-NAME-* per run) and the GPU workers' and timer's logs, so a run cut short still says where it was.
  logs=/tmp/bench-logs-$$; mkdir -p "$logs"
  (cd "$work/logs" && find . -name 'shard-*.log' -exec cp --parents {} "$logs/" \;) 2>/dev/null
  for log in "$work"/logs/vllm-*.log "$work"/logs/gpu*/vllm-*.log; do
    [ -f "$log" ] && tail -n 200 "$log" > "$logs/server-$(basename "$(dirname "$log")")-$(basename "$log")"
  done
  cp "$work"/run-*.log "$work"/timings-*.json "$logs/" 2>/dev/null
  find /tmp -maxdepth 1 -newer "$started" \( -name "cudanalyst-$name-*" -o -name 'cudanalyst-gpu*-*.log' \) \
    -exec cp -r {} "$logs/" \; 2>/dev/null
  # The last 2 MB of each (a server's log of a long run), so the archive stays under what a call brings back.
  find "$logs" -type f -size +2M -exec sh -c 'tail -c 2000000 "$1" > "$1.tail" && mv "$1.tail" "$1"' _ {} \;
  tar czf "$out/bench-logs.tgz" -C "$logs" . && rm -rf "$logs" "$started"
fi
bring_back_vllm_cache
exit "$rc"
