"""The operator's entry point and its import boundary: no GPU, model-serving or runner code."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = ("pycuda", "vllm", "torch", "cudanalyst.runner", "openai")


def test_operator_imports_no_gpu_or_runner_code() -> None:
    code = (
        "import sys, json\n"
        "import cudanalyst.operator.main, cudanalyst.operator.handlers, cudanalyst.operator.lifecycle\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(out.stdout)
    assert "kopf" in modules and "cudanalyst.operator.handlers" in modules
    loaded = [m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)]
    assert loaded == []


def test_console_script_help_and_bad_environment() -> None:
    ok = subprocess.run(["cudanalyst-operator", "--help"], capture_output=True, text=True)
    assert ok.returncode == 0 and "CUDANALYST_NAMESPACES" in ok.stdout
    bad = subprocess.run(["cudanalyst-operator"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "CUDANALYST_STATUS_INTERVAL": "never",
                              **{k: v for k, v in __import__("os").environ.items() if k in ("PATH", "HOME")}})
    assert bad.returncode == 2 and "CUDANALYST_STATUS_INTERVAL='never'" in bad.stderr
    extra = subprocess.run(["cudanalyst-operator", "run"], capture_output=True, text=True)
    assert extra.returncode == 2 and "environment variables" in extra.stderr
