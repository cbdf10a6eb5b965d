"""One skip mark for the tests that need nvcc, with the toolchain finder's own words as the reason."""

from __future__ import annotations

from functools import cache

import pytest


@cache
def nvcc_missing() -> str | None:
    """Why nvcc cannot be used here, or None when it can."""
    try:
        from cudanalyst.runner.kernels.compile.toolchain import find_toolchain

        find_toolchain()
    except Exception as exc:  # noqa: BLE001 - any reason (no runner extra, no nvcc) is the skip reason
        return str(exc) or type(exc).__name__
    return None


needs_nvcc = pytest.mark.skipif(
    nvcc_missing() is not None,
    reason=f"no nvcc here ({nvcc_missing()}); pip install nvidia-cuda-nvcc nvidia-cuda-runtime",
)
