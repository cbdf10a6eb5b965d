"""A synthetic run folder with a known game: for trying `cudanalyst report` and for its tests.

`python -m cudanalyst.report.demo DIR [--no-gpu]` writes spec.json, plan.json, candidates/ and outcomes/
of a run named "demo" under DIR/demo/ through the object store, exactly as the stages would. The chance
that a sample reaches each level grows with the coalition (debugger helps compiling, profiler helps
speed, analyzer and profiler together help correctness), so the report has something to show.
With --no-gpu every record is evaluated only up to "compile", as on a machine with no GPU.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from cudanalyst.api import parse_run
from cudanalyst.outcomes import Label, UnitCandidate, UnitOutcome, beats
from cudanalyst.plan import GAME_ARM, coalitions, control_coalition, unit_key
from cudanalyst.players import tool_names
from cudanalyst.runfolder import PLAN, SPEC, candidate_key, outcome_key
from cudanalyst.store import ObjectStore, open_store

PLAYERS = tool_names()
TASKS = ["gemm", "jacobi-2d"]


def demo_spec(name: str = "demo", output_uri: str = "./runs", players: list[str] | None = None,
              generations: tuple[int, ...] = (10, 20), rollouts: int = 2, samples: int = 2,
              controls: tuple[str, ...] = ("noFeedback",),
              metrics: tuple[str, ...] = ("compiled", "pass", "fast")) -> dict[str, Any]:
    return {
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": name},
        "spec": {
            # The synthetic game names programs of these tasks and generations, which the hand-written trajectory has.
            "trajectory": {"uri": "builtin://example-handwritten-2026-11-30", "generations": list(generations), "programsPerGeneration": 2},
            "players": players or tool_names(),
            "controls": list(controls),
            "models": {"planner": {"model": "gemma-3-270m", "serve": "local", "api": "completion"}},
            "sampling": {"rollouts": rollouts, "samplesPerCoalition": samples, "seed": 0},
            "attribution": {"metrics": list(metrics), "confidence": 0.95, "bootstrap": 200},
            "output": {"uri": output_uri},
        },
    }


def _probabilities(members: tuple[str, ...]) -> tuple[float, float, float]:
    """P(compiles), P(correct | compiles), P(fast | correct) for a coalition."""
    has = set(members).__contains__
    compile_p = 0.35 + 0.4 * has("debugger") + 0.1 * has("analyzer")
    pass_p = 0.3 + 0.15 * has("debugger") + 0.3 * (has("analyzer") and has("profiler"))
    fast_p = 0.15 + 0.45 * has("profiler")
    return min(compile_p, 0.95), min(pass_p, 0.95), min(fast_p, 0.95)


def _label(rng: np.random.Generator, members: tuple[str, ...], gpu: bool) -> Label:
    pc, pp, pf = _probabilities(members)
    if rng.random() >= pc:
        return Label.FAIL
    if not gpu or rng.random() >= pp:
        return Label.COMPILE
    return Label.FAST if rng.random() < pf else Label.PASS


def write_demo_run(store: ObjectStore, spec: dict[str, Any] | None = None, gpu: bool = True, seed: int = 0,
                   skip_coalitions: tuple[str, ...] = ()) -> int:
    """Write a whole synthetic run into `store` (the run's folder); returns the number of outcome records."""
    run = parse_run(spec or demo_spec(), "demo spec")
    s = run.spec
    name = run.metadata.name
    rng = np.random.default_rng(seed)
    # Speedups over the task's baseline from their own stream, so the labels stay what they were before them.
    rng_baseline = np.random.default_rng(seed + 1)
    arms = [(GAME_ARM, c) for c in coalitions(s.players)]
    arms += [(arm, control_coalition(arm, s.players)) for arm in s.controls]
    store.put_json(SPEC, run.to_dict())
    written = 0
    units = 0
    for task in TASKS:
        for gen in s.trajectory.generations:
            for p in range(s.trajectory.programs_per_generation):
                program_id = f"{task}-g{gen}-p{p}"
                for arm, members in arms:
                    if ",".join(members) in skip_coalitions and arm == GAME_ARM:
                        continue
                    for rollout in range(s.sampling.rollouts):
                        for sample in range(s.sampling.samples_per_coalition):
                            key = unit_key(name, program_id, members, arm, rollout, sample)
                            ref = {"key": key, "run": name, "task": task, "generation": gen, "programId": program_id,
                                   "coalition": list(members), "arm": arm, "rollout": rollout, "sample": sample}
                            units += 1
                            store.put_json(candidate_key(key), UnitCandidate.model_validate(
                                {**ref, "promptVersion": "v1", "models": {"planner": "gemma-3-270m"},
                                 "completion": "__global__ void k() {}", "code": "__global__ void k() {}"}))
                            label = _label(rng, members if arm != "noFeedback" else (), gpu)
                            top = Label.FAST if gpu else Label.COMPILE
                            speedup = float(rng.uniform(1.2, 2.0)) if label == Label.FAST else None
                            vs_base = (float(rng_baseline.uniform(0.6, 2.0)) if label in (Label.PASS, Label.FAST)
                                       else None)
                            store.put_json(outcome_key(key), UnitOutcome.model_validate(
                                {**ref, "label": label, "evaluatedUpTo": top, "speedup": speedup,
                                 "speedupVsBaseline": vs_base,
                                 "fastVsBaseline": beats(vs_base, s.evaluation.fast_tolerance) if vs_base else None}))
                            written += 1
    store.put_json(PLAN, {"run": name, "players": s.players, "units": units, "digest": "demo"})
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="output folder (the run goes to DIR/demo/)")
    parser.add_argument("--no-gpu", action="store_true", help="evaluate only up to compile, as with no GPU")
    args = parser.parse_args(argv)
    store = open_store(args.dir).child("demo/")
    count = write_demo_run(store, demo_spec(output_uri=args.dir), gpu=not args.no_gpu)
    print(f"{count} outcome records written to {store.uri}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
