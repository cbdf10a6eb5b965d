#!/usr/bin/env bash
# Sourced ON the GPU machine (no package registry there) from the repository root, after
# scripts/device/prepare.sh filled .device/ here and the device tool carried it:
# installs the carried wheels, builds pycuda from its source release (about 100 s, cached in /tmp while
# the machine stays warm) and puts cudanalyst on PYTHONPATH. Sets: py, out, site, pkgs, PYTHONPATH.
out="${OUT:-$PWD/.device/out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=python3
site=/tmp/cudanalyst-site
pkgs=/tmp/cudanalyst-pkgs
step() { echo "== $(date +%T) $*"; }

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

if [ ! -d "$site/pycuda" ] && [ -s .device/pycuda-built.tgz ]; then
  # Built on an earlier machine of the same image and brought back (see the build step below).
  tar xzf .device/pycuda-built.tgz -C "$site"
fi
if $py -c "import pycuda" 2>/dev/null; then
  step "pycuda already built on this machine"
else
  step "build pycuda from its source release (about 100 s)"
  t0=$SECONDS
  rm -rf /tmp/pycuda-build && mkdir -p /tmp/pycuda-build
  tar xzf .device/src/pycuda-*.tar.gz -C /tmp/pycuda-build
  ( cd /tmp/pycuda-build/pycuda-* \
    && $py configure.py --cuda-root=/usr/local/cuda-13.0 \
    && $py -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" . ) \
    > "$out/pycuda-build.log" 2>&1 || { echo "pycuda build failed"; tail -40 "$out/pycuda-build.log"; return 1; }
  echo "pycuda built in $((SECONDS - t0)) s"
  # Back through $OUT, so the next machine unpacks it instead of building again (carry .device).
  (cd "$site" && tar czf "$out/pycuda-built.tgz" pycuda pycuda-*.dist-info 2>/dev/null)
fi
$py -c "import pycuda.driver as d; d.init(); print('pycuda', d.get_version(), d.Device(0).name())" || return 1

# Three source roots, one package (setup.py): the core and both components merged into one copy instead of a pip
# install.
step "cudanalyst onto PYTHONPATH"
rm -rf "$pkgs" && mkdir -p "$pkgs"
cp -r src/cudanalyst "$pkgs/cudanalyst"
cp -r operator/cudanalyst/operator runner/cudanalyst/runner "$pkgs/cudanalyst/"
export CUDANALYST_COMPILE_CACHE=/tmp/cudanalyst-compile-cache
# Recordings on this machine evaluate a source once (runner/record/evaluator.py): the study's two agents and the policy
# comparison's arms start from the same baselines.
export CUDANALYST_RECORD_SHARED_EVALUATIONS=/tmp/cudanalyst-shared-evaluations
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
