#!/usr/bin/env bash
# Runs ON the GPU machine: the kernel stage's GPU tests, their summary in $OUT/gpu-tests.log and $OUT/gpu-tests.xml.
# Called by pipeline.sh --prepare, or as a lane of its own (scripts/device/lanes.sh "1:bash scripts/device/gpu_tests.sh")
# so that the tests share a call with work on the other GPU. PREPARE_TESTS narrows the tests when device time is short
# (e.g. tests/gpu/test_local_lanes.py alone).
set -uo pipefail
# shellcheck source=scripts/device/setup.sh
source scripts/device/setup.sh || exit 1
# shellcheck source=scripts/device/models.sh
source scripts/device/models.sh
# vLLM's site brings openai, which the runner's LLM client and OpenEvolve import: without it the tests fail to collect.
vllm_from_wheelhouse || exit 1
step "the kernel stage's GPU tests"
# Deselected: it runs the installed `cudanalyst-runner` command; here cudanalyst is on PYTHONPATH, not installed.
# One process, no pyproject addopts: the GPU tests time kernels (pytest-xdist's workers would time them side by side).
# --durations: which tests the 7 minutes go to, so a session short of device time knows what PREPARE_TESTS can hold.
# shellcheck disable=SC2086
$py -m pytest ${PREPARE_TESTS:-tests/gpu tests/test_kernel_stage_cpu.py tests/test_llm_shard.py tests/test_references.py} \
  -m "gpu or not gpu" -q \
  --deselect tests/test_llm_shard.py::test_refusing_endpoint_fails_the_shard_with_reasons_and_exit_1 \
  -p no:cacheprovider -o addopts="" -rA --durations=25 --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log" | tail -15
exit "${PIPESTATUS[0]}"
