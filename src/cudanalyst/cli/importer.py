"""`cudanalyst import openevolve|llm4ad SRC --to URI`: convert a recorded search into a frozen trajectory.

SRC is a local folder (or file) or an s3:// URI; URI is the trajectory folder to write
(programs.jsonl + trajectory.json), local or s3://. Everything is read and checked before the
first write, so bad input leaves the destination untouched (exit 2).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

from cudanalyst.store import ObjectStore, S3Settings, StoreError, open_store
from cudanalyst.trajectory.format import (
    MANIFEST,
    PROGRAMS,
    FrozenProgram,
    TrajectoryError,
    dump_programs,
    manifest_for,
)

EXIT_FAILURE = 1
EXIT_INVALID = 2

# Folder names that say nothing about the task; the default task name skips them.
_GENERIC = re.compile(r"^(checkpoint_\d+|checkpoints|samples|population|programs|openevolve_output|outputs?|"
                      r"logs?|results?|runs?|\d{8}_\d{6}_?)$")


class ImportFailed(Exception):
    def __init__(self, message: str, code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.code = code


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "import",
        help="convert an OpenEvolve or LLM4AD/EoH run into a frozen trajectory",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = p.add_subparsers(dest="source_format", metavar="FORMAT", required=True)

    oe = kinds.add_parser(
        "openevolve",
        help="OpenEvolve checkpoint(s): checkpoint_N/programs/*.json",
        description="Import an OpenEvolve checkpoint folder, its checkpoints/ folder or the run's output folder "
        "(all checkpoints merged). Artifacts whose names look like compiler/sanitizer output become debugger "
        "feedback, ptxas/register/static reports analyzer feedback, profiler/timing output profiler feedback "
        "(see docs/trajectory-format.md); --feedback-map overrides that per artifact.",
    )
    _common(oe)
    oe.add_argument("--checkpoint", type=int, metavar="N", help="read only checkpoint_N (default: all, merged)")
    oe.add_argument("--generation-from", choices=["generation", "iteration"], default="generation",
                    help="use OpenEvolve's lineage depth (generation, default) or iteration_found as the generation")
    oe.add_argument("--iterations-per-generation", type=int, metavar="N",
                    help="with --generation-from iteration: a generation is a window of N iterations, named by its "
                    "first (N=10: iterations 20..29 are generation 20); default 1")
    oe.add_argument("--feedback-map", action="append", default=[], metavar="ARTIFACT=PLAYER",
                    help="send artifact ARTIFACT to PLAYER's feedback (PLAYER 'none' keeps it out); repeatable")
    oe.set_defaults(handler=run)

    la = kinds.add_parser(
        "llm4ad",
        help="LLM4AD/EoH samples: samples/samples_<a>~<b>.json",
        description="Import an LLM4AD/EoH run folder, its samples/ folder or one samples_<a>~<b>.json file. "
        "Generations come from each sample's 'generation' field, else from --samples-per-generation, else "
        "from the population/pop_<g>.json files (samples never kept in a population are left out).",
    )
    _common(la)
    la.add_argument("--samples-per-generation", type=int, metavar="N",
                    help="generation = (sample_order - 1) // N (EoH: the population size)")
    la.set_defaults(handler=run)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("src", metavar="SRC", help="source folder or file (local path, file:// or s3:// URI)")
    p.add_argument("--to", required=True, metavar="URI", help="trajectory folder to write (path, file:// or s3://)")
    p.add_argument("--task", help="task id of every program (default: the source folder's name)")
    p.add_argument("--description", default="", help="free text stored in the manifest")
    p.add_argument("--force", action="store_true", help="replace a trajectory already at --to")
    p.add_argument("--s3-endpoint", default="", help="S3 endpoint URL for MinIO/Ceph (default: AWS or AWS_ENDPOINT_URL)")
    p.add_argument("--s3-region", default="", help="S3 region")
    p.add_argument("--s3-credentials-dir", default="",
                   help="folder with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY files (default: boto3's chain)")


def default_task(src: str) -> str:
    """The source's first meaningful folder name, going up from SRC."""
    parts = [p for p in re.split(r"[/\\]+", src.split("://", 1)[-1]) if p]
    for part in reversed(parts):
        name = Path(part).stem if part.endswith(".json") else part
        if name and not _GENERIC.match(name) and not name.startswith("samples_"):
            return name
    raise ImportFailed(f"cannot derive a task name from {src!r}; give --task")


def _open_source(src: str, s3: S3Settings) -> tuple[ObjectStore, str | None]:
    """The store to read, plus the one key to read when SRC names a single file."""
    if "://" not in src or src.startswith("file://"):
        path = Path(src[len("file://"):] if src.startswith("file://") else src)
        if not path.exists():
            raise ImportFailed(f"{src}: no such file or folder")
        if path.is_file():
            return open_store(str(path.parent)), path.name
        return open_store(str(path)), None
    if src.endswith(".json"):
        parent, _, name = src.rpartition("/")
        return open_store(parent + "/", s3), name
    return open_store(src, s3), None


def _parse_feedback_map(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, player = item.partition("=")
        if not sep or not name or not re.fullmatch(r"[A-Za-z0-9_-]*", player):
            raise ImportFailed(f"--feedback-map {item!r}: expected ARTIFACT=PLAYER (PLAYER a name or 'none')")
        out[name] = player
    return out


def read_source(args: argparse.Namespace, task: str, s3: S3Settings) -> tuple[list[FrozenProgram], dict[str, Any]]:
    store, only_key = _open_source(args.src, s3)
    if args.source_format == "openevolve":
        from cudanalyst.trajectory.openevolve import read_openevolve

        if only_key is not None:
            raise ImportFailed(f"{args.src}: an OpenEvolve source is a folder (a checkpoint or a run output), not a file")
        window = args.iterations_per_generation
        if window is not None and (args.generation_from != "iteration" or window < 1):
            raise ImportFailed(f"--iterations-per-generation {window}: needs --generation-from iteration and N >= 1")
        return read_openevolve(store, task, checkpoint=args.checkpoint, generation_from=args.generation_from,
                               iterations_per_generation=window or 1,
                               feedback_map=_parse_feedback_map(args.feedback_map))
    from cudanalyst.trajectory.llm4ad import read_llm4ad

    return read_llm4ad(store, task, samples_per_generation=args.samples_per_generation, only_key=only_key)


def write_trajectory(dest: ObjectStore, programs: list[FrozenProgram], provenance: dict[str, Any],
                     description: str, force: bool) -> None:
    """programs.jsonl, then trajectory.json; each write is atomic, and a failed second write undoes the first."""
    if not force and (dest.exists(PROGRAMS) or dest.exists(MANIFEST)):
        raise ImportFailed(f"{dest.uri} already holds a trajectory; pass --force to replace it")
    manifest = manifest_for(programs, source=provenance, description=description)
    dest.put_bytes(PROGRAMS, dump_programs(programs).encode("utf-8"), "application/x-ndjson")
    try:
        dest.put_json(MANIFEST, manifest)
    except StoreError:
        dest.delete(PROGRAMS)
        raise


def run(args: argparse.Namespace) -> int:
    try:
        s3 = S3Settings(endpoint=args.s3_endpoint, region=args.s3_region, credentials_dir=args.s3_credentials_dir)
        task = args.task or default_task(args.src)
        programs, provenance = read_source(args, task, s3)
        dest = open_store(args.to, s3)
        write_trajectory(dest, programs, provenance, args.description, args.force)
    except ImportFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.code
    except (TrajectoryError, StoreError) as exc:
        # Unreachable endpoints and wrong credentials count as bad input too (the URI or the Secret).
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    generations = sorted({p.generation for p in programs})
    players = sorted({k for p in programs for k in p.feedback})
    print(f"imported {len(programs)} programs of task {task!r} from {args.source_format} {args.src} to "
          f"{dest.uri}: generations {generations[0]}..{generations[-1]} ({len(generations)} distinct), "
          f"recorded feedback: {', '.join(players) or 'none'}")
    skipped = provenance.get("skippedSamples")
    if skipped:
        print(f"note: {skipped['count']} samples left out ({skipped['reason']})", file=sys.stderr)
    _note_unknown_task(task)
    return 0


def _note_unknown_task(task: str) -> None:
    try:
        from cudanalyst.tasks import task_names
    except ImportError:
        return
    if task not in task_names():
        print(f"note: task {task!r} is not in the bundled task suite; kernels of this trajectory can only be "
              "evaluated against a known task (re-import with --task NAME, see `cudanalyst tasks`)", file=sys.stderr)
