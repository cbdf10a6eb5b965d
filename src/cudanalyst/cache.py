"""Where cudanalyst keeps what it can rebuild: one root, `$CUDANALYST_CACHE` (default ~/.cache/cudanalyst).

Under it: models/ (prepared by the set-up scripts), weights/ (models synced from S3), compile/ (nvcc
results and stored verdicts), control-plane/ and dev-cluster/ (the test cluster). Setting the variable moves
all of them; `CUDANALYST_COMPILE_CACHE` moves the compile cache alone (tests and the GPU machine use it).
The set-up scripts that run before the package is installed (scripts/prepare_model.py,
build_tiny_model.py, build-control-plane.sh) state the same rule in their own words.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("CUDANALYST_CACHE") or Path.home() / ".cache" / "cudanalyst")


def models_cache() -> Path:
    return cache_root() / "models"


def compile_cache_dir() -> Path:
    return Path(os.environ.get("CUDANALYST_COMPILE_CACHE") or cache_root() / "compile")
