#!/usr/bin/env bash
# Runs ON the GPU machine (which reaches no package registry), from the repository root, after
# scripts/device/prepare.sh has filled .device/ here and the device tool carried it there.
#   scripts/device/run.sh smoke   # install, build pycuda, a smoke test of the worker and the tools
#   scripts/device/run.sh full    # install, build pycuda, all GPU tests, both benchmarks
# Logs go to $OUT (or ./.device/out when OUT is unset).
set -uo pipefail
mode="${1:-full}"
out="${OUT:-$PWD/.device/out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=python3
site=/tmp/cudanalyst-site
pkgs=/tmp/cudanalyst-pkgs
step() { echo "== $(date +%T) $*"; }

step "install wheels"
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .device/wheels/*.whl \
  || { echo "wheel install failed"; exit 1; }
export PYTHONPATH="$pkgs:$site"

step "build pycuda from its source release (about 90 s)"
t0=$SECONDS
rm -rf /tmp/pycuda-build && mkdir -p /tmp/pycuda-build
tar xzf .device/src/pycuda-*.tar.gz -C /tmp/pycuda-build
( cd /tmp/pycuda-build/pycuda-* \
  && $py configure.py --cuda-root=/usr/local/cuda-13.0 \
  && $py -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" . ) \
  > "$out/pycuda-build.log" 2>&1 || { echo "pycuda build failed"; tail -40 "$out/pycuda-build.log"; exit 1; }
echo "pycuda built in $((SECONDS - t0)) s"
$py -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())" || exit 1

# The distribution maps folders onto subpackages (setup.py); mirror that layout instead of a pip install.
step "cudanalyst onto PYTHONPATH"
rm -rf "$pkgs" && mkdir -p "$pkgs"
cp -r src/cudanalyst "$pkgs/cudanalyst"
cp -r runner "$pkgs/cudanalyst/runner"
cp -r operator "$pkgs/cudanalyst/operator"
export CUDANALYST_COMPILE_CACHE=/tmp/cudanalyst-compile-cache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader

if [ "$mode" = smoke ]; then
  step "smoke test"
  $py scripts/device/smoke.py 2>&1 | tee "$out/smoke.log"
  exit "${PIPESTATUS[0]}"
fi

step "GPU tests"
$py -m pytest tests/gpu tests/test_kernel_stage_cpu.py -m "gpu or not gpu" -q -p no:cacheprovider \
  --junitxml="$out/gpu-tests.xml" 2>&1 | tee "$out/gpu-tests.log"
rc=${PIPESTATUS[0]}
step "bench/timing.py"
$py bench/timing.py 2>&1 | tee "$out/bench-timing.log"
step "bench/eval_throughput.py"
$py bench/eval_throughput.py 2>&1 | tee "$out/bench-throughput.log"
step "summary"
grep -E "passed|failed|error" "$out/gpu-tests.log" | tail -1
exit "$rc"
