#!/usr/bin/env bash
# Runs ON the GPU machine, started by stash.sh (scripts/device/detached.sh, job convert-NAME) when a model's last
# part lands: converts its GGUF parts into the Hugging Face folder while the session's other parts are still being
# stashed. Call 1's `--prepare` takes the same lock (models.sh), so it waits for this and then finds the folder
# cached, instead of spending 90-110 s of the session's device time converting (the eleventh session: 98 s for the
# 0.5B). Where this fails, call 1 converts again and says why.
#   scripts/device/convert_ahead.sh NAME    from the repository root; needs .device/wheels (the batch's first call
#                                           carries .device) and the model's parts stashed whole
set -uo pipefail
name=${1:?usage: scripts/device/convert_ahead.sh NAME}
py=${CONVERT_PY:-python3}
site=${CONVERT_SITE:-/tmp/cudanalyst-convert-site}  # its own: call 1's setup.sh installs into /tmp/cudanalyst-site
step() { echo "== $(date +%T) $*"; }
if [ ! -e "$site/.installed" ]; then
  ls .device/wheels/*.whl > /dev/null 2>&1 || { echo "convert_ahead: no .device/wheels here (carry .device in the batch's first call)"; exit 2; }
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .device/wheels/*.whl \
    || { echo "convert_ahead: wheel install failed"; exit 1; }
  touch "$site/.installed"
fi
export PYTHONPATH="$site" CUDANALYST_CACHE="${CUDANALYST_CACHE:-/tmp/cudanalyst-cache}"  # the folder call 1 looks in
# shellcheck source=scripts/device/models.sh
source "$(dirname "${BASH_SOURCE[0]}")/models.sh"
t0=$SECONDS
prepare_models "$name" || { echo "convert_ahead: $name not converted (above); call 1 converts it again"; exit 1; }
echo "convert_ahead: $name converted in $((SECONDS - t0)) s"
