"""`cudanalyst record FILE`: record an agent trajectory with OpenEvolve on this machine, then import it.

The spec is a TrajectoryRecording (`examples/recording-quick.yaml`). The model is served with vLLM as
`cudanalyst run` serves it; every task runs OpenEvolve from its baseline kernel; each program is evaluated by
the kernel stage's tools (compile, contract, and with a GPU verify and time) and its three reports go back
to OpenEvolve as artifacts, so the agent's next prompts show them. Checkpoints go to the store as they are
written; Ctrl-C stops, running the same command again resumes. The trajectory lands in
`<output.uri>/<name>/trajectory/`, ready as an AttributionRun's `spec.trajectory.uri`.
"""

from __future__ import annotations

import argparse
import importlib


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record a trajectory with OpenEvolve on this machine", description=__doc__)
    p.add_argument("file", help="TrajectoryRecording YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for a local model server to become healthy (default %(default)s)")
    p.set_defaults(handler=record)


def record(args: argparse.Namespace) -> int:
    # The command is the local executor's (it serves the model and runs the runner's evolve processes): named,
    # not imported, so the core never imports the runner (tests/test_import_direction.py).
    return int(importlib.import_module("cudanalyst.runner.local.record").main(args))
