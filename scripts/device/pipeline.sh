#!/usr/bin/env bash
# Runs ON the GPU machine: the whole pipeline of issue 7 on real parts. vLLM serves the spec's local
# model on the GPU, the runner plans, generates, compiles, verifies and times the kernels, and the
# report is built. Needs, stashed in /tmp by earlier calls (scripts/device/stash.sh): the vLLM
# wheelhouse parts (.wheelhouse/p0..p4, from ../shared/gpu-wheelhouse/build.sh) and the model's GGUF
# parts (.models/NAME/p00.., from scripts/device/pack_model.sh NAME); and .device carried in this call
# (scripts/device/prepare.sh).
#   scripts/device/pipeline.sh [SPEC] [--prepare|--bench|--bench-only] [bench/pipeline.py options]
# --prepare stops after the installs, the model and the kernel stage's GPU tests (so the run itself fits
# in a later call's time limit); --bench runs bench/pipeline.py after the run, --bench-only instead of it.
# Every GPU of the machine is used (one lane each, runner/local/executor.py); `--gpus 1,2` among the bench
# options measures 1 against 2 GPUs in one bench run. RUN_TIMEOUT / BENCH_TIMEOUT (seconds) bound the run and
# the bench with SIGINT, so what they finished still comes back (the bench's JSON is rewritten after each
# side). The bench's JSON is also kept in /tmp; the next bench call on the same machine prints its ratios
# against it (--against), so two calls of 1 and 2 GPUs still give their ratio.
set -uo pipefail
spec="${1:-examples/h200-pipeline.yaml}"
stash=/tmp/cudanalyst-stash
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1

step "vLLM from the wheelhouse"
if ! PYTHONPATH="$PYTHONPATH:/tmp/vllm-site" $py -c "import vllm" 2>/dev/null; then
  t0=$SECONDS
  mkdir -p /tmp/vllm-wheels /tmp/vllm-site
  cat "$stash"/wheelhouse/part* | tar xf - -C /tmp/vllm-wheels || { echo "wheelhouse parts missing or torn"; exit 1; }
  $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/vllm-site /tmp/vllm-wheels/*.whl \
    || { echo "vLLM install failed"; exit 1; }
  echo "vLLM installed in $((SECONDS - t0)) s"
fi
# Our own wheels first (pydantic etc. as carried), then vLLM's, then the image's.
export PYTHONPATH="$pkgs:$site:/tmp/vllm-site"
# vLLM's compile cache in /tmp too: a later call on the same machine starts its servers sooner.
export VLLM_USE_FLASHINFER_SAMPLER=0 CUDANALYST_CACHE=/tmp/cudanalyst-cache VLLM_CACHE_ROOT=/tmp/vllm-cache
$py -c "import vllm, pydantic; print('vllm', vllm.__version__, 'pydantic', pydantic.__version__)" || exit 1

# Every local model the spec names, from its stashed GGUF parts to a Hugging Face folder.
models=$($py -c "
import sys, yaml; from cudanalyst.api import load_run; from cudanalyst.api.recording import load_recording
if yaml.safe_load(open(sys.argv[1]))['kind'] == 'TrajectoryRecording':  # issue 14: one model, the agent's
    m = load_recording(sys.argv[1]).spec.model; print(m.model if m.serve == 'local' else ''); sys.exit(0)
s = load_run(sys.argv[1]).spec
print(' '.join(sorted({m.model for m in (s.models.planner, s.models.resolved_coder, s.models.resolved_summarizer) if m.serve == 'local'})))" "$spec") || exit 1
command=run; [ "$(sed -n 's/^kind: *//p' "$spec")" = TrajectoryRecording ] && command=record
for name in $models; do
  step "model $name: GGUF parts -> Hugging Face folder"
  parts="$stash/models/$name"
  if [ ! -s "/tmp/$name.gguf" ]; then
    ls "$parts"/*.part* >/dev/null 2>&1 || { echo "no stashed parts in $parts (scripts/device/stash.sh .models/$name/pNN)"; exit 1; }
    cat "$parts"/*.part* > "/tmp/$name.gguf.tmp" && mv "/tmp/$name.gguf.tmp" "/tmp/$name.gguf" || exit 1
  fi
  $py scripts/prepare_model.py "$name" --gguf "/tmp/$name.gguf" 2>&1 | grep -v "it/s]" | tail -6
  [ "${PIPESTATUS[0]}" = 0 ] || exit 1
done

if [ "${2:-}" = "--prepare" ]; then
  step "the kernel stage's GPU tests"
  # Deselected: it runs the installed `cudanalyst-runner` command; here cudanalyst is on PYTHONPATH, not installed.
  # PREPARE_TESTS narrows the tests when device time is short (e.g. tests/gpu/test_local_lanes.py alone);
  # PREPARE_TIMING=0 skips bench/timing.py.
  # shellcheck disable=SC2086
  $py -m pytest ${PREPARE_TESTS:-tests/gpu tests/test_kernel_stage_cpu.py tests/test_llm_shard.py tests/test_references.py} \
    -m "gpu or not gpu" -q \
    --deselect tests/test_llm_shard.py::test_refusing_endpoint_fails_the_shard_with_reasons_and_exit_1 \
    -p no:cacheprovider -rA --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log" | tail -15
  if [ "${PREPARE_TIMING:-1}" != 0 ]; then
    step "bench/timing.py"
    $py bench/timing.py 2>&1 | tee "$out/bench-timing.log"
  fi
  step "prepared"
  exit 0
fi

rc=0
if [ "${2:-}" != "--bench-only" ]; then
  step "the pipeline: cudanalyst $command $spec"
  t0=$SECONDS
  timeout --signal=INT "${RUN_TIMEOUT:-0}" $py -m cudanalyst "$command" "$spec" --output /tmp/runs 2>&1 | tee "$out/pipeline.log"
  rc=${PIPESTATUS[0]}
  echo "pipeline wall time $((SECONDS - t0)) s, exit $rc"
  name=$($py -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['metadata']['name'])" "$spec")
  tar czf "$out/run-$name.tgz" -C /tmp/runs "$name" && ls -la "$out"
  cp /tmp/cudanalyst-"$name"-*/*.log "$out"/ 2>/dev/null
fi

if [ "${2:-}" = "--bench" ] || [ "${2:-}" = "--bench-only" ]; then
  step "bench/pipeline.py"
  work="/tmp/bench-pipeline-$(date +%H%M%S)"   # a bench starts from an empty folder, every call its own
  previous=/tmp/cudanalyst-bench-previous.json
  against=(); [ -s "$previous" ] && against=(--against "$previous")
  timeout --signal=INT --kill-after=30 "${BENCH_TIMEOUT:-0}" $py bench/pipeline.py --spec "$spec" --workdir "$work" \
    --json "$out/bench-pipeline.json" "${against[@]}" "${@:3}" 2>&1 | tee "$out/bench-pipeline.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  [ -s "$out/bench-pipeline.json" ] && cp "$out/bench-pipeline.json" "$previous"
  mkdir -p "$out/bench-logs"
  (cd "$work/logs" && find . -name 'shard-*.log' -exec cp --parents {} "$out/bench-logs/" \;) 2>/dev/null
  for log in "$work"/logs/vllm-*.log "$work"/logs/gpu*/vllm-*.log; do
    [ -f "$log" ] && tail -n 200 "$log" > "$out/bench-logs/server-$(basename "$(dirname "$log")")-$(basename "$log")"
  done
fi
exit "$rc"
