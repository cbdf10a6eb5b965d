#!/usr/bin/env bash
# Sourced ON the GPU machine (no package registry there) from the repository root, after
# scripts/device/prepare.sh filled .device/ here and the device tool carried it:
# installs the carried wheels, builds pycuda from its source release (about 100 s, cached in /tmp while
# the machine stays warm) and puts cudanalyst on PYTHONPATH. Sets: py, out, site, pkgs, PYTHONPATH; defines
# pycuda_ready. With PYCUDA_BACKGROUND=1 the build runs beside what the caller does next (pipeline.sh --prepare: vLLM's
# install and the models' conversion need no pycuda), and the caller calls pycuda_ready before anything that does.
out="${OUT:-$PWD/.device/out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=python3
site="${SETUP_SITE:-/tmp/cudanalyst-site}"  # the tests move both
pkgs="${SETUP_PKGS:-/tmp/cudanalyst-pkgs}"
step() { echo "== $(date +%T) $*"; }
build_pycuda() {
  local t0=$SECONDS
  rm -rf /tmp/pycuda-build && mkdir -p /tmp/pycuda-build
  tar xzf .device/src/pycuda-*.tar.gz -C /tmp/pycuda-build
  ( cd /tmp/pycuda-build/pycuda-* \
    && $py configure.py --cuda-root=/usr/local/cuda-13.0 \
    && $py -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" . ) \
    > "$out/pycuda-build.log" 2>&1 || { echo "pycuda build failed"; tail -40 "$out/pycuda-build.log"; return 1; }
  echo "pycuda built in $((SECONDS - t0)) s"
  # Back through $OUT, so the next machine unpacks it instead of building again (carry .device).
  (cd "$site" && tar czf "$out/pycuda-built.tgz" pycuda pycuda-*.dist-info 2>/dev/null) || true  # a copy to keep; not needed here
}
# pycuda_ready: waits for a build started in the background, then checks that pycuda sees the GPU.
pycuda_ready() {
  if [ -n "${pycuda_build_pid:-}" ]; then
    wait "$pycuda_build_pid" || return 1
    pycuda_build_pid=
  fi
  $py -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())"
}

if [ "${CUDANALYST_DEVICE_READY:-}" = 1 ]; then
  # scripts/device/lanes.sh did all of the below once for every lane; doing it again in each would race.
  export PYTHONPATH="$pkgs:$site" CUDANALYST_COMPILE_CACHE=/tmp/cudanalyst-compile-cache
  export CUDANALYST_RECORD_SHARED_EVALUATIONS=/tmp/cudanalyst-shared-evaluations
  return 0
fi
step "install wheels"
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .device/wheels/*.whl \
  || { echo "wheel install failed"; return 1; }
export PYTHONPATH="$pkgs:$site"

# Three source roots, one package (setup.py): the core and both components merged into one copy instead of a pip
# install. Before pycuda's build, which it does not need, so the build can run beside what does (below).
step "cudanalyst onto PYTHONPATH"
rm -rf "$pkgs" && mkdir -p "$pkgs"
cp -r src/cudanalyst "$pkgs/cudanalyst"
cp -r operator/cudanalyst/operator runner/cudanalyst/runner "$pkgs/cudanalyst/"
export CUDANALYST_COMPILE_CACHE=/tmp/cudanalyst-compile-cache
# Recordings on this machine evaluate a source once (runner/record/evaluator.py): the study's two agents and the policy
# comparison's arms start from the same baselines.
export CUDANALYST_RECORD_SHARED_EVALUATIONS=/tmp/cudanalyst-shared-evaluations

if [ ! -d "$site/pycuda" ] && [ -s .device/pycuda-built.tgz ]; then
  # Built on an earlier machine of the same image and brought back (see the build step below).
  tar xzf .device/pycuda-built.tgz -C "$site"
fi
pycuda_build_pid=
if $py -c "import pycuda" 2>/dev/null; then
  step "pycuda already built on this machine"
elif [ "${PYCUDA_BACKGROUND:-0}" = 1 ]; then
  # The caller goes on (vLLM's install, the model's conversion: 88 s on 2026-12-02, beside the build's 107) and
  # calls pycuda_ready before anything that needs it.
  step "build pycuda from its source release, in the background (about 100 s)"
  build_pycuda &
  pycuda_build_pid=$!
else
  step "build pycuda from its source release (about 100 s)"
  build_pycuda || return 1
fi
if [ -z "$pycuda_build_pid" ]; then pycuda_ready || return 1; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
