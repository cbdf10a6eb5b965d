#!/usr/bin/env python
"""Whether K model servers sharing one GPU generate faster than one (issue 32).

  python bench/servers_per_gpu.py [MODEL_FOLDER] [--servers 1,2] [--requests 512] [--n 1] [--max-tokens 256]
                                  [--rounds 2] [--gpu-memory-utilization 0.5] [--json FILE]

On the H200 a whole run's LLM stage generated about 9,500 tokens/s with 450 of its server's 512 sequences running
and a queue most of the time (docs/performance.md): the server's own step, not our client, is the bound. Part of a
step is the engine's host work (scheduling, the seeded sampler's launches, the outputs), which one engine process
does alone for every request. K servers on the same GPU each do it for their share, in processes of their own,
while the GPU takes their kernels in turn. Whether that pays is what this measures, before lanes are taught to start
several servers.

For each K of --servers, in turn: K servers of MODEL_FOLDER (default: the tiny test model, on this CPU) on the
machine's GPU, started one after the other (two vLLM servers initialising at once on one GPU count each other's
memory: scripts/serve_models.py), each with --gpu-memory-utilization / K (so the K share what one server had), from
one compile cache (the second finds what the first compiled); then the same R requests, all in flight, taken by the servers in turn, each sample
writing exactly --max-tokens tokens (ignore_eos), seeded with top-p 0.95 as the runner sends them: one phase not
counted (the warm-up), then --rounds phases. Printed: generated tokens/s of each phase (the stage's clock: first
request sent to last answer), the median over the rounds, and the ratio to the first K. The K's run one after the
other, so a drift of the machine falls on one of them: give --servers 1,2,1 to see it. VLLM_USE_V2_MODEL_RUNNER in
the environment chooses vLLM's model runner for every server (unset: our servers' default for the model, V2 for the
coder's Qwen2 since 2026-12-07). The servers' compile cache is this run's own (a new
temporary folder, no store): the first start may be cold; starts are printed, not compared.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent / "scripts"))


def server_counts(text: str) -> list[int]:
    """--servers: comma-separated counts, each at least 1 (pure); ValueError names what is wrong."""
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--servers {text!r}: comma-separated integers") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"--servers {text!r}: at least one count, each at least 1")
    return counts


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per entry of --servers (in order; a count given twice is two entries): the median tokens/s of its rounds and
    the ratio to the first entry's (pure)."""
    medians = [(r["entry"], r["servers"], statistics.median(r["rounds"])) for r in rows]
    base = medians[0][2]
    return [{"entry": e, "servers": k, "tokensPerSecond": m, "ratio": m / base if base else None}
            for e, k, m in medians]


def serve_and_measure(model: str, servers: int, args: argparse.Namespace, msgs: list[list[dict[str, str]]],
                      cpu: bool) -> dict[str, Any]:
    """K servers started one after the other, the warm-up phase, then the counted rounds; the servers are stopped."""
    from sampling import one_phase

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    spec = ModelSpec(model=model, serve="local", max_model_len=args.max_model_len or (4096 if cpu else 16384),
                     gpu_memory_utilization=args.gpu_memory_utilization / servers)
    starts: list[float] = []
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(servers):
            # One compile-cache folder for all: they start one after the other, so the second finds what the first
            # compiled (on the H200, 2026-12-07, a part of its own made the second start cold: 111.2 s against 56.2).
            server = stack.enter_context(start_local_server(model, spec, served_name="bench", health_timeout_s=900))
            starts.append(round(server.healthy_after_s or 0.0, 1))
            urls.append(server.endpoint.base_url)
        print(f"  {servers} server(s) healthy after {', '.join(f'{s:.1f} s' for s in starts)} "
              f"(each gpu-memory-utilization {spec.gpu_memory_utilization:.3f})", flush=True)

        def phase() -> dict[str, float]:
            return asyncio.run(one_phase(urls, "bench", msgs, args.n, args.max_tokens, True, 0.95))

        phase()  # the warm-up: the first batch of its size pays for compiling the sampler's kernels
        rounds = []
        for r in range(args.rounds):
            got = phase()
            rounds.append(got["tokensPerSecond"])
            print(f"  round {r}: {got['tokens']:8.0f} tokens in {got['seconds']:7.2f} s = "
                  f"{got['tokensPerSecond']:9.1f} tokens/s", flush=True)
    return {"servers": servers, "starts": starts, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default="", help="a local model folder (default: the tiny test model)")
    p.add_argument("--servers", default="1,2", help="server counts to measure in turn (default %(default)s)")
    p.add_argument("--requests", type=int, default=512, help="requests, all in flight (default %(default)s)")
    p.add_argument("--n", type=int, default=1, help="samples per request (the coder's is 5)")
    p.add_argument("--max-tokens", type=int, default=256, help="tokens each sample writes (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="counted phases for each count (default %(default)s)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5,
                   help="the GPU share of the model, split evenly over its servers (default %(default)s)")
    p.add_argument("--max-model-len", type=int, default=0, help="default 16384 on a GPU, 4096 on the CPU")
    p.add_argument("--json", default="", help="write every measurement and the summary here")
    args = p.parse_args(argv)
    try:
        counts = server_counts(args.servers)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if min(args.requests, args.n, args.max_tokens, args.rounds) < 1 or not 0 < args.gpu_memory_utilization <= 1:
        print("error: --requests, --n, --max-tokens and --rounds: at least 1; --gpu-memory-utilization: in (0, 1]",
              file=sys.stderr)
        return 2
    if args.requests < max(counts):
        print(f"error: --requests {args.requests}: fewer than the {max(counts)} servers to share them",
              file=sys.stderr)
        return 2
    model = args.model
    if model and not (Path(model) / "config.json").is_file():
        print(f"error: {model}: no config.json (a local model folder)", file=sys.stderr)
        return 2

    from generation import CPU_ENV, prompts
    from sampling import fresh_compile_cache

    from cudanalyst.runner.llm.serving import cpu_build

    if not model:
        import build_tiny_model

        model = str(build_tiny_model.build(build_tiny_model.default_root())["tiny-llama"])
    fresh_compile_cache()
    cpu = cpu_build()
    if cpu:
        os.environ.update(CPU_ENV)
    msgs = prompts(args.requests)
    # Unset: our servers' choice for the model (serving.model_runner_env: V2 for the architectures measured on it).
    runner = os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "unset (cudanalyst's default for the model)")
    print(f"{Path(model).name}: {args.requests} requests x n={args.n}, {args.max_tokens} tokens each sample, seeded, "
          f"top-p 0.95; servers {counts}; VLLM_USE_V2_MODEL_RUNNER {runner}", flush=True)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"model": Path(model).name, "requests": args.requests, "n": args.n,
                           "maxTokens": args.max_tokens, "modelRunnerV2": runner, "runs": rows}
    for entry, k in enumerate(counts):
        rows.append({"entry": entry, **serve_and_measure(model, k, args, msgs, cpu)})
        if args.json:  # kept should a later count fail
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    out["summary"] = summarise(rows)
    print(f"median over {args.rounds} round(s), generated tokens/s and the ratio to {counts[0]} server(s):")
    for s in out["summary"]:
        print(f"  {s['servers']} server(s): {s['tokensPerSecond']:9.1f} tokens/s  {s['ratio']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
