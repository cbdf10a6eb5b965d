"""`cudanalyst run FILE`: run an AttributionRun on this machine (local mode), with live progress, then report.

Its arguments are defined here, in the core, so `cudanalyst --help` and `cudanalyst run --help` need nothing
more; the command itself is the local executor's (`cudanalyst.runner.local.command`), which may use the
runner: it is named, not imported, so the core never imports the runner (tests/test_import_direction.py).
A machine without the `runner` extra gets the extra's name and exit status 2 (cudanalyst.entrypoints).
"""

from __future__ import annotations

import argparse
import importlib

COMMAND = "cudanalyst.runner.local.command"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a spec on this machine (local mode)", description=__doc__)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--stage", choices=("llm", "kernels", "all"), default="all",
                   help="run only one stage (the other may run on another machine, from the same store)")
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for a local model server to become healthy (default %(default)s)")
    p.add_argument("--no-report", action="store_true", help="skip building the report at the end")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="use the first N visible GPUs, one model server and one kernel stage each (default: "
                        "$CUDANALYST_GPUS, else every GPU in CUDA_VISIBLE_DEVICES or nvidia-smi -L)")
    p.set_defaults(handler=run)



def run(args: argparse.Namespace) -> int:
    return int(importlib.import_module("cudanalyst.runner.local.command").main(args))
