"""The local executor's two commands, `cudanalyst run` and `cudanalyst record`: their arguments, and handlers
that import the work only when called.

Light on purpose: the console script (cudanalyst.entrypoints) hands `COMMANDS` to the core's CLI, so
`cudanalyst --help` and `cudanalyst run --help` need nothing but the core; running one on a machine without the
`runner` extra names the extra, exit status 2, before any work (cudanalyst.exits.guarded).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

from cudanalyst.api import AttributionRun, SpecError
from cudanalyst.api.recording import TrajectoryRecording
from cudanalyst.exits import die

Spec = TypeVar("Spec", AttributionRun, TrajectoryRecording)

RUN = """\
`cudanalyst run FILE`: run an AttributionRun on this machine (local mode), with live progress, then report.

The plan is the operator's; the shards run as subprocesses, one lane per GPU; everything is stored under
spec.output.uri (a local folder by default). Ctrl-C stops cleanly; running the same command again resumes."""

RECORD = """\
`cudanalyst record FILE`: record an agent trajectory with OpenEvolve on this machine, then import it.

The spec is a TrajectoryRecording (`examples/recording-quick.yaml`). The model is served with vLLM as
`cudanalyst run` serves it; every task runs OpenEvolve from its baseline kernel; each program is evaluated by
the kernel stage's tools (compile, contract, and with a GPU verify and time) and its three reports go back
to OpenEvolve as artifacts, so the agent's next prompts show them. Checkpoints go to the store as they are
written; Ctrl-C stops, running the same command again resumes. The trajectory lands in
`<output.uri>/<name>/trajectory/`, ready as an AttributionRun's `spec.trajectory.uri`."""


def _health_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--health-timeout", type=float, default=600.0,
                   help="seconds to wait for a local model server to become healthy (default %(default)s)")


def register_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a spec on this machine (local mode)", description=RUN,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="AttributionRun YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--stage", choices=("llm", "kernels", "all"), default="all",
                   help="run only one stage (the other may run on another machine, from the same store)")
    _health_timeout(p)
    p.add_argument("--no-report", action="store_true", help="skip building the report at the end")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="use the first N visible GPUs, one model server and one kernel stage each (default: "
                        "$CUDANALYST_GPUS, else every GPU in CUDA_VISIBLE_DEVICES or nvidia-smi -L)")
    p.add_argument("--servers-per-gpu", type=int, default=1, metavar="K",
                   help="serve each local model with K vLLM servers on every GPU, started together, each with its "
                        "share of the model's GPU memory, the GPU's shards dealt over them (default 1)")
    p.add_argument("--timings", metavar="FILE",
                   help="also write where the wall time went (the table the run ends with) to FILE as JSON")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep this pass's logs (the model servers', the shards') when nothing failed, and print "
                        "where (a failure always keeps them)")
    p.set_defaults(handler=run)


def register_record(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record a trajectory with OpenEvolve on this machine", description=RECORD,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help="TrajectoryRecording YAML or JSON")
    p.add_argument("--output", help="override spec.output.uri (a folder or s3:// prefix)")
    p.add_argument("--policy", metavar="FILE", help="a FeedbackPolicy (`cudanalyst policy` writes one): its spec "
                   "goes into spec.policy, and the prompts follow it (default: the spec's own, else ungated)")
    _health_timeout(p)
    p.set_defaults(handler=record)


def load_spec(args: argparse.Namespace, load: Callable[[str], Spec]) -> Spec:
    """The file the command names, loaded by `load`, with `--output` in place of spec.output.uri; a file that
    is missing or invalid exits 2, naming the field."""
    try:
        obj = load(args.file)
    except SpecError as exc:
        die(str(exc))
    if args.output:
        output = obj.spec.output.model_copy(update={"uri": args.output})
        obj = obj.model_copy(update={"spec": obj.spec.model_copy(update={"output": output})})
    return obj


def with_policy(rec: TrajectoryRecording, path: str) -> TrajectoryRecording:
    """The recording with the policy file's spec inline (it is then part of what the recording's folder records,
    so a resume with another policy is refused); a bad file or a policy the spec cannot serve exits 2."""
    from pydantic import ValidationError

    from cudanalyst.api.policy import load_policy
    from cudanalyst.api.recording import RecordingSpec

    try:
        policy = load_policy(path)
    except SpecError as exc:
        die(str(exc))
    try:
        spec = RecordingSpec.model_validate({**rec.spec.model_dump(by_alias=True),
                                             "policy": policy.spec.model_dump(by_alias=True)})
    except ValidationError as exc:
        die(f"--policy {path}: " + "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors()))
    return rec.model_copy(update={"spec": spec})


def run(args: argparse.Namespace) -> int:
    from cudanalyst.api import load_run

    spec = load_spec(args, load_run)
    from cudanalyst.runner.local.command import main  # the runner's extras: imported when run, not for --help

    return main(spec, args)


def record(args: argparse.Namespace) -> int:
    from cudanalyst.api.recording import load_recording

    spec = load_spec(args, load_recording)
    if getattr(args, "policy", None):
        spec = with_policy(spec, args.policy)
    from cudanalyst.runner.local.record import main

    return main(spec, args)


COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {"run": register_run, "record": register_record}
