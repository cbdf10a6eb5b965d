"""Shared by the GPU tests: the skip condition and its stated reason."""

from __future__ import annotations

import pytest

from cudanalyst.runner.kernels.stage import gpu_available

REASON = "needs an NVIDIA GPU and pycuda (run scripts/device/run.sh on the GPU machine)"
gpu_only = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason=REASON)]
