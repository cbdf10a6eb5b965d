"""Find nvcc: $CUDA_HOME/bin/nvcc, then /usr/local/cuda*/bin/nvcc (newest first), then the PyPI wheels.

The wheels (`nvidia-cuda-nvcc`, `nvidia-cuda-runtime`, `nvidia-cuda-cccl`) install under
site-packages/nvidia/cu13/ (CUDA 13) or nvidia/cuda_nvcc/ + nvidia/cuda_runtime/ (CUDA 12); CI uses
them, GPU machines use their system CUDA.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class ToolchainNotFoundError(RuntimeError):
    """No usable nvcc; the message lists every place searched."""


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    include_dirs: tuple[Path, ...]  # extra -I folders (the wheels keep headers apart from nvcc)
    version: str  # e.g. "13.5.37", part of the compile-cache key

    @property
    def root(self) -> Path:
        return self.nvcc.parent.parent


def _site_roots() -> list[Path]:
    import site

    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    return [Path(r) for r in dict.fromkeys(roots) if r and Path(r).is_dir()]


def _wheel_candidates() -> list[tuple[Path, list[Path]]]:
    found: list[tuple[Path, list[Path]]] = []
    for root in _site_roots():
        nv = root / "nvidia"
        for layout in ("cu13", "cu12"):
            nvcc = nv / layout / "bin" / "nvcc"
            if nvcc.is_file():
                found.append((nvcc, [nv / layout / "include"]))
        nvcc = nv / "cuda_nvcc" / "bin" / "nvcc"
        if nvcc.is_file():
            incs = [
                nv / "cuda_nvcc" / "include",
                nv / "cuda_runtime" / "include",
                nv / "cuda_cccl" / "include",
            ]
            found.append((nvcc, incs))
    return found


def _version(nvcc: Path) -> str:
    out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    if not match:
        raise ToolchainNotFoundError(
            f"{nvcc}: cannot read its version from `nvcc --version`: {out.strip()!r}"
        )
    return match.group(1)


def candidates() -> list[tuple[Path, list[Path]]]:
    """Every nvcc we would try, in order of preference, with the include folders it needs."""
    out: list[tuple[Path, list[Path]]] = []
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home:
        out.append((Path(cuda_home) / "bin" / "nvcc", []))

    # Newest first: /usr/local/cuda-13.0 before /usr/local/cuda-12.4; the plain symlink last.
    def _key(p: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", Path(p).parent.parent.name)) or (-1,)

    for path in sorted(glob.glob("/usr/local/cuda*/bin/nvcc"), key=_key, reverse=True):
        out.append((Path(path), []))
    out += _wheel_candidates()
    return out


@functools.cache
def find_toolchain() -> Toolchain:
    tried: list[str] = []
    for nvcc, incs in candidates():
        if not (nvcc.is_file() and os.access(nvcc, os.X_OK)):
            tried.append(f"{nvcc} (missing)")
            continue
        return Toolchain(nvcc=nvcc, include_dirs=tuple(p for p in incs if p.is_dir()), version=_version(nvcc))
    raise ToolchainNotFoundError(
        "no nvcc found; tried: "
        + (", ".join(tried) or "$CUDA_HOME, /usr/local/cuda*, site-packages/nvidia")
        + ". Install the CUDA toolkit or `pip install nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl`."
    )
