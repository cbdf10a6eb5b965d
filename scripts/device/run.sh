#!/usr/bin/env bash
# Runs ON the GPU machine (which reaches no package registry), from the repository root, after
# scripts/device/prepare.sh has filled .device/ here and the device tool carried it there.
#   scripts/device/run.sh smoke   # install, build pycuda, a smoke test of the worker and the tools
#   scripts/device/run.sh full    # install, build pycuda, all GPU tests, both benchmarks
# Logs go to $OUT (or ./.device/out when OUT is unset).
set -uo pipefail
mode="${1:-full}"
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1

if [ "$mode" = smoke ]; then
  step "smoke test"
  $py scripts/device/smoke.py 2>&1 | tee "$out/smoke.log"
  exit "${PIPESTATUS[0]}"
fi

step "GPU tests"
$py -m pytest tests/gpu tests/test_kernel_stage_cpu.py -m "gpu or not gpu" -q -p no:cacheprovider -o addopts="" \
  --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log"
rc=${PIPESTATUS[0]}
step "bench/timing.py"
$py bench/timing.py 2>&1 | tee "$out/bench-timing.log"
step "bench/eval_throughput.py"
$py bench/eval_throughput.py 2>&1 | tee "$out/bench-throughput.log"
step "summary"
grep -E "passed|failed|error" "$out/gpu-tests.log" | tail -1
exit "$rc"
