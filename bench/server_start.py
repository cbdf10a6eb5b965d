"""How soon a vLLM server answers with its engine process spawned (what `vllm serve` does) or forked (issue 32).

  python bench/server_start.py MODEL_FOLDER [--rounds 2] [--gpu-memory-utilization 0.2] [--max-model-len 4096]
                               [--cache DIR] [--json FILE]

vLLM's CLI sets VLLM_WORKER_MULTIPROC_METHOD=spawn unless it is set (vllm/entrypoints/utils.py: cli_env_setup), so
its engine process imports torch and vLLM again from scratch: 18 s of a 49 s start on the H200
(docs/performance.md). Forked, the engine has the API server's imports already (vLLM's library default; vLLM
itself falls back to spawn once CUDA is initialised in the parent).

From a fresh state: a compile cache folder of its own (a new temporary one, or --cache DIR, which must be empty).
A first start fills it (the cold start, printed apart); then `rounds` rounds of one start each way, alternating, so
that a drift of the machine falls on both, each with the compiled artefacts the first left. One line a start
(healthy after: the user's clock of a start, launch to /health; and the phases vLLM's log gives), the median each
way and the ratio fork / spawn. vLLM's CPU build forces spawn whatever is asked: there both sides are spawn, and the
bench says the ratio measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

METHODS = ("spawn", "fork")
METHOD_ENV = "VLLM_WORKER_MULTIPROC_METHOD"


def start_once(model: str, method: str | None, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """One server start to healthy and stop; its seconds and phases. method None: the environment as it is."""
    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    spec = ModelSpec(model=model, serve="local", gpu_memory_utilization=args.gpu_memory_utilization,
                     max_model_len=args.max_model_len)
    env = {METHOD_ENV: method} if method else None
    log_dir.mkdir(parents=True, exist_ok=True)
    with start_local_server(model, spec, served_name="bench", env=env, log_dir=str(log_dir)) as server:
        phases = server.start.describe() if server.start is not None else ""
        found = server.compile_cache.found if server.compile_cache else "no cache"
        return {"method": method or "default", "healthyAfter": server.healthy_after_s, "phases": phases,
                "compiledArtefacts": found}


def summary(starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Median healthy-after each way and the ratio fork / spawn (pure)."""
    medians = {m: statistics.median(s["healthyAfter"] for s in starts if s["method"] == m)
               for m in METHODS if any(s["method"] == m for s in starts)}
    ratio = medians["fork"] / medians["spawn"] if {"fork", "spawn"} <= medians.keys() else None
    return {"medians": medians, "ratio": ratio}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a local model folder (config.json and weights)")
    parser.add_argument("--rounds", type=int, default=2, help="starts each way after the cold one")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.2)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--cache", default="", help="an empty folder for the compile cache (default: a new one)")
    parser.add_argument("--json", default="", help="write the starts and the summary here")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        print("error: --rounds: at least 1", file=sys.stderr)
        return 2
    if not (Path(args.model) / "config.json").is_file():
        print(f"error: {args.model}: no config.json (a local model folder)", file=sys.stderr)
        return 2
    cache = Path(args.cache) if args.cache else Path(tempfile.mkdtemp(prefix="bench-server-start-"))
    if cache.exists() and any(cache.iterdir()):
        print(f"error: --cache {cache} is not empty (a bench starts from nothing)", file=sys.stderr)
        return 2
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV, SWITCH_ENV
    from cudanalyst.runner.llm.serving import cpu_build

    os.environ[DIR_ENV] = str(cache)  # this bench's own folder: nothing of an earlier run is found
    os.environ.pop(CACHE_URI_ENV, None)
    os.environ.pop(SWITCH_ENV, None)
    os.environ.pop(METHOD_ENV, None)
    logs = cache.parent / f"{cache.name}-logs"

    cold = start_once(args.model, None, args, logs / "cold")
    print(f"cold (the server's default, filling the cache): healthy after {cold['healthyAfter']:.1f} s "
          f"({cold['phases']})")
    starts = []
    for r in range(args.rounds):
        for method in METHODS if r % 2 == 0 else METHODS[::-1]:
            got = start_once(args.model, method, args, logs / f"{r}-{method}")
            starts.append(got)
            print(f"round {r + 1} {method}: healthy after {got['healthyAfter']:.1f} s ({got['phases']}; compiled "
                  f"artefacts: {got['compiledArtefacts']})", flush=True)
    result = summary(starts)
    for method, median in result["medians"].items():
        print(f"median {method}: {median:.1f} s over {args.rounds} start(s)")
    print(f"ratio fork/spawn (healthy after, median): {result['ratio']:.2f}x")
    if cpu_build():
        print("note: vLLM's CPU build forces spawn whatever is asked: both sides are spawn, the ratio measures nothing")
    if args.json:
        Path(args.json).write_text(json.dumps({"cold": cold, "starts": starts, **result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
