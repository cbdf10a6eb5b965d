#!/usr/bin/env bash
# Runs ON the GPU machine, started by stash.sh (scripts/device/detached.sh, job convert-NAME) once a model's parts
# and the wheelhouse are both stashed whole: converts the model's GGUF parts into its Hugging Face folder while the
# session's other parts are still being stashed. Call 1's `--prepare` takes the same lock (models.sh), so it waits
# for this and then finds the folder cached, instead of spending 90-110 s of the session's device time converting
# (the eleventh session: 98 s for the 0.5B). Where this fails, call 1 converts again and says why.
#   scripts/device/convert_ahead.sh NAME    from the repository root; needs .device/wheels (the batch's first call
#                                           carries .device) and the wheelhouse and the model stashed whole
# The conversion needs what call 1 has: our wheels, then the wheelhouse's (gguf comes with vLLM's), then the image's.
# They go into a site of this script's own, so that call 1's installs never change a package under it.
set -uo pipefail
name=${1:?usage: scripts/device/convert_ahead.sh NAME}
py=${CONVERT_PY:-python3}
site=${CONVERT_SITE:-/tmp/cudanalyst-convert-site}
step() { echo "== $(date +%T) $*"; }
# shellcheck source=scripts/device/models.sh
source "$(dirname "${BASH_SOURCE[0]}")/models.sh"
install() {  # what call 1's setup.sh and vllm_from_wheelhouse install, once per machine
  ls .device/wheels/*.whl > /dev/null 2>&1 || { echo "convert_ahead: no .device/wheels here (carry .device in the batch's first call)"; return 2; }
  $py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site/own" .device/wheels/*.whl \
    || { echo "convert_ahead: wheel install failed"; return 1; }
  install_wheelhouse "$site/vllm" "$site/wheelhouse" && touch "$site/.installed"
}
t0=$SECONDS
# One install for every model converted ahead on this machine (two models can complete at once).
{ flock 8 && { [ -e "$site/.installed" ] || install; }; } 8> "$site.lock" || exit $?
export PYTHONPATH="$site/own:$site/vllm" CUDANALYST_CACHE="${CUDANALYST_CACHE:-/tmp/cudanalyst-cache}"  # call 1's
prepare_models "$name" || { echo "convert_ahead: $name not converted (above); call 1 converts it again"; exit 1; }
echo "convert_ahead: $name converted in $((SECONDS - t0)) s (the install included)"
