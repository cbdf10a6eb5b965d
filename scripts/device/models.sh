#!/usr/bin/env bash
# Sourced ON the GPU machine after scripts/device/setup.sh (uses py, step): vLLM from the stashed wheelhouse and
# the spec's local models from their stashed GGUF parts, shared by pipeline.sh and study.sh. Defines:
#   install_wheelhouse SITE WHEELS  the stashed wheelhouse's wheels into SITE (vllm_from_wheelhouse, convert_ahead.sh)
#   vllm_from_wheelhouse      install vLLM (once per machine) and export PYTHONPATH and vLLM's cache settings
#   spec_models SPEC          the local models an AttributionRun (or TrajectoryRecording) serves, space-separated
#   prepare_models NAME...    each model's GGUF parts -> a Hugging Face folder (scripts/prepare_model.py, cached)
#   prepare_models_ahead SPEC...  the same for the specs' models, in the background (study.sh, during a pass)
#   seed_vllm_store           the store of vLLM's compiled artefacts, from .device/vllm-cache*.tgz (vllm_from_wheelhouse)
#   bring_back_vllm_cache     $OUT/vllm-cache.tgz: the archives of vLLM's compiled artefacts this machine made
stash="${CUDANALYST_STASH:-/tmp/cudanalyst-stash}"
gguf_dir="${CUDANALYST_GGUF_DIR:-/tmp}"  # the joined GGUFs and the conversion locks (the tests move it)
# vLLM's compiled artefacts across sessions (issue 32): a folder store that the runner fetches a model's cache from
# before a cold start and puts it into after one (runner/.../llm/compile_cache.py), seeded from what an earlier
# session brought back (.device/vllm-cache.tgz and .device/vllm-cache-*.tgz, carried with .device). Without it every
# session's first server start compiles again (82-120 s cold on the H200).
vllm_store="${VLLM_STORE:-/tmp/cudanalyst-vllm-store}"  # the tests move it
vllm_site="${VLLM_SITE:-/tmp/vllm-site}"                  # and this

install_wheelhouse() {  # SITE WHEELS: the stashed wheelhouse unpacked into WHEELS and installed into SITE
  mkdir -p "$1" "$2"
  cat "$stash"/wheelhouse/part* | tar xf - -C "$2" || { echo "wheelhouse parts missing or torn"; return 1; }
  $py -m pip install -q --no-index --no-deps --no-compile --target "$1" "$2"/*.whl \
    || { echo "vLLM's wheels: install into $1 failed"; return 1; }
}

vllm_from_wheelhouse() {
  step "vLLM from the wheelhouse"
  # Once per machine: each `import vllm` takes about 14 s, and a warm machine's later calls (ninth session: 29 s
  # of each call's budget) need neither the check nor the import when the first call left its marker.
  local marker="$vllm_site/.cudanalyst-installed"
  if [ ! -e "$marker" ]; then
    local t0=$SECONDS
    if ! PYTHONPATH="$PYTHONPATH:$vllm_site" $py -c "import vllm" 2>/dev/null; then
      install_wheelhouse "$vllm_site" /tmp/vllm-wheels || return 1
      echo "vLLM installed in $((SECONDS - t0)) s"
      # Its bytecode, beside what the caller does next (pycuda's build, the models' conversion): installed with
      # --no-compile, the machine's first model server compiled vLLM's modules in both of its processes, about 19
      # and 22 s of imports before vLLM did any work (H200, 2026-12-04, -X importtime; a user's pip compiles at
      # install). Out of the job table, so that scripts counting their jobs (policy.sh) do not count it.
      ( t1=$SECONDS; nice $py -m compileall -q -j 0 "$vllm_site" > /dev/null 2>&1
        echo "$((SECONDS - t1)) s" > "$vllm_site/.cudanalyst-compiled" ) &
      disown
    fi
  fi
  # Our own wheels first (pydantic etc. as carried), then vLLM's, then the image's.
  export PYTHONPATH="$pkgs:$site:$vllm_site"
  # vLLM's compile cache in /tmp too: a later call on the same machine starts its servers sooner.
  export VLLM_USE_FLASHINFER_SAMPLER=0 CUDANALYST_CACHE=/tmp/cudanalyst-cache VLLM_CACHE_ROOT=/tmp/vllm-cache
  seed_vllm_store
  if [ -e "$marker" ]; then
    $py -c "from importlib.metadata import version as v; print('vllm', v('vllm'), 'pydantic', v('pydantic'), '(installed by an earlier call)')"
  else
    $py -c "import vllm, pydantic; print('vllm', vllm.__version__, 'pydantic', pydantic.__version__)" && mkdir -p "$vllm_site" && touch "$marker"
  fi
}

spec_models() {
  $py -c "
import sys, yaml; from cudanalyst.api import load_run; from cudanalyst.api.recording import load_recording
if yaml.safe_load(open(sys.argv[1]))['kind'] == 'TrajectoryRecording':  # the agent's model, and a policy's planner
    r = load_recording(sys.argv[1]).spec; ms = [r.model] + ([r.planner] if r.planner and r.policy and r.policy.models.planner else [])
    print(' '.join(sorted({m.model for m in ms if m.serve == 'local'}))); sys.exit(0)
s = load_run(sys.argv[1]).spec
print(' '.join(sorted({m.model for m in (s.models.planner, s.models.resolved_coder, s.models.resolved_summarizer) if m.serve == 'local'})))" "$1"
}

prepare_models() {
  local name
  for name in "$@"; do
    step "model $name: GGUF parts -> Hugging Face folder"
    # One conversion of a model at a time (study.sh converts the next specs' models ahead, in the background); a
    # caller that waits here then finds the folder cached.
    if command -v flock > /dev/null; then
      { flock 9 && prepare_one "$name"; } 9> "$gguf_dir/cudanalyst-prepare-$name.lock" || return 1
    else
      prepare_one "$name" || return 1
    fi
  done
}

prepare_one() {
  local name=$1 parts="$stash/models/$1"
  if [ ! -s "$gguf_dir/$name.gguf" ]; then
    ls "$parts"/*.part* >/dev/null 2>&1 || { echo "no stashed parts in $parts (scripts/device/stash.sh .models/$name/pNN)"; return 1; }
    # A part left out (a refused call) would join into a torn GGUF that fails minutes later, or not at all.
    CUDANALYST_STASH="$stash" bash "$(dirname "${BASH_SOURCE[0]}")/stash.sh" --check "$name" || return 1
    cat "$parts"/*.part* > "$gguf_dir/$name.gguf.tmp" && mv "$gguf_dir/$name.gguf.tmp" "$gguf_dir/$name.gguf" || return 1
  fi
  # The image's transformers (5.17) turns Gemma 3's vocabulary into single characters (prepare_model.py refuses
  # such a tokenizer): the tokenizer converted here by 5.19 travels in .device/tokenizers (scripts/device/prepare.sh).
  local tokenizer=()
  if [ -s ".device/tokenizers/$name.tar.gz" ]; then
    mkdir -p "/tmp/tokenizers/$name" && tar xzf ".device/tokenizers/$name.tar.gz" -C "/tmp/tokenizers/$name" \
      && tokenizer=(--tokenizer "/tmp/tokenizers/$name")
  fi
  $py scripts/prepare_model.py "$name" --gguf "$gguf_dir/$name.gguf" "${tokenizer[@]}" 2>&1 | grep -v "it/s]" | tail -7
  [ "${PIPESTATUS[0]}" = 0 ]
}

prepare_models_ahead() {  # SPEC...: their models, converted in the background at low priority; sets ahead_pid
  # A model's conversion is CPU work of 1-2 minutes (ninth session: 88 s for the 0.5B, 109 s for the 1.5B), paid
  # inside a call's budget before each spec's pass; converted while the pass before it runs, it is ready when its
  # turn comes. prepare_models takes a lock per model: a spec that comes sooner waits for it, then finds it cached.
  # Specs whose pass needs no model cost only background CPU; specs whose parts are not stashed fail here quietly.
  if ! command -v flock > /dev/null; then  # no lock, no second converter: each spec converts in its own turn
    echo "no flock on this machine: each spec's models convert in its own turn"; ahead_pid=none; return 0
  fi
  (
    renice -n 10 -p "$BASHPID" > /dev/null 2>&1
    local spec
    for spec in "$@"; do
      # shellcheck disable=SC2046
      prepare_models $(spec_models "$spec") || echo "ahead: $spec's models not prepared (above); its own turn says why"
    done
  ) &
  ahead_pid=$!
}

seed_vllm_store() {
  # Once per machine: the store from .device/vllm-cache.tgz, then each .device/vllm-cache-*.tgz in name order (what
  # later sessions brought back: a later archive of a key takes the place of an earlier one), and a list of what it
  # held then.
  export CUDANALYST_VLLM_CACHE_URI="${CUDANALYST_VLLM_CACHE_URI:-$vllm_store}"
  [ -d "$vllm_store" ] && return 0
  mkdir -p "$vllm_store"
  local kept
  for kept in .device/vllm-cache.tgz .device/vllm-cache-*.tgz; do
    [ -s "$kept" ] || continue
    if tar xzf "$kept" -C "$vllm_store"; then
      echo "vLLM compile cache: $(tar tzf "$kept" | grep -c '\.tar\.gz$') model(s) from $kept"
    else
      echo "vLLM compile cache: $kept is torn; servers start cold where it alone held their key"
    fi
  done
  vllm_store_sums > "$vllm_store.seeded"
}

vllm_store_sums() {  # the store's finished archives with their digests: a start that made one whole changes its own
  (cd "$vllm_store" && find . -name '*.tar.gz' ! -name '.*' -exec sha256sum {} + | sort -k2)
}

bring_back_vllm_cache() {
  # Only what a server here added to the store (a cold start) or made whole (a start from it that compiled what it
  # lacked: compile_cache.py), not what the store was seeded with: the whole store outgrew the device tool's 16 MiB
  # a file (three models, 15.8 MB, on 2026-12-05). The next session carries it beside the others as
  # .device/vllm-cache-NAME.tgz (seed_vllm_store unpacks them in name order).
  [ -d "$vllm_store" ] || return 0
  local changed
  changed=$(vllm_store_sums | grep -vxF -f "$vllm_store.seeded" | awk '{print $2}')
  [ -n "$changed" ] || return 0
  # Only the finished archives: the store writes each under a hidden temporary name, then links it into place.
  (cd "$vllm_store" && printf '%s\n' "$changed" | tar czf "$out/vllm-cache.tgz" -T -) \
    || { rm -f "$out/vllm-cache.tgz"; return 0; }
  local bytes; bytes=$(stat -c %s "$out/vllm-cache.tgz")
  if [ "$bytes" -gt $((15 * 1024 * 1024)) ]; then
    echo "vLLM compile cache: $bytes bytes, over what a call brings back; not kept"; rm -f "$out/vllm-cache.tgz"
  else
    echo "vLLM compile cache: $(printf '%s\n' "$changed" | wc -l) archive(s), $bytes bytes -> \$OUT/vllm-cache.tgz" \
      "(copy it to .device/vllm-cache-$(date +%Y%m%d-%H%M).tgz)"
  fi
}
