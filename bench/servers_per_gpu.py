#!/usr/bin/env python
"""Whether K model servers sharing one GPU, or one server fed by several API-server processes, generate faster than
one (issue 32).

  python bench/servers_per_gpu.py [MODEL_FOLDER] [--servers 1,2,1x2] [--requests 512] [--n 1] [--max-tokens 256]
                                  [--rounds 2] [--gpu-memory-utilization 0.5] [--json FILE]

On the H200 a whole run's LLM stage generated about 9,500 tokens/s with 450 of its server's 512 sequences running
and a queue most of the time (docs/performance.md): the server's own step, not our client, is the bound. Part of a
step is host work: the engine's (scheduling, the seeded sampler's launches) in its engine process, and the outputs'
(detokenising each running request's new token, answering it) in the API-server process. K servers on the same GPU
each do both for their share, in processes of their own, while the GPU takes their kernels in turn (H200,
2026-12-07: two 1.34x one). An entry KxA gives each of the K servers A API-server processes (vLLM's
--api-server-count): one engine, its host work unsplit, but the outputs' split, and no second start or share of
memory. Which part pays is what this measures, before lanes are taught to start several servers.

For each entry of --servers, in turn: K servers of MODEL_FOLDER (default: the tiny test model, on this CPU) on the
machine's GPU, started one after the other (two vLLM servers initialising at once on one GPU count each other's
memory: scripts/serve_models.py), each with --gpu-memory-utilization / K (so the K share what one server had), from
one compile cache (the second finds what the first compiled); then the same R requests, all in flight, taken by the
servers in turn, each sample writing exactly --max-tokens tokens (ignore_eos), seeded with top-p 0.95 as the runner
sends them: one phase not counted (the warm-up), then --rounds phases. Printed: generated tokens/s of each phase
(the stage's clock: first request sent to last answer), the median over the rounds, and the ratio to the first
entry. The entries run one after the other, so a drift of the machine falls on one of them: give --servers 1,2,1 to
see it. VLLM_USE_V2_MODEL_RUNNER in the environment chooses vLLM's model runner for every server (unset: our
servers' default for the model, V2 for the coder's Qwen2 since 2026-12-07). The servers' compile cache is this
run's own (a new temporary folder, no store): the first start may be cold; starts are printed, not compared.
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


def server_counts(text: str) -> list[tuple[int, int]]:
    """--servers: comma-separated entries, each K (K servers) or KxA (K servers of A API-server processes each, vLLM's
    --api-server-count), K and A at least 1, as (K, A) (pure); ValueError names what is wrong."""
    entries = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        k, x, a = word.lower().partition("x")
        try:
            entry = (int(k), int(a) if x else 1)
        except ValueError:
            raise ValueError(f"--servers {text!r}: {word!r} is neither a count K nor KxA") from None
        if min(entry) < 1:
            raise ValueError(f"--servers {text!r}: {word!r}: counts are at least 1")
        entries.append(entry)
    if not entries:
        raise ValueError(f"--servers {text!r}: at least one entry")
    return entries


def entry_name(servers: int, api_servers: int) -> str:
    """How an entry reads in the output (pure)."""
    return f"{servers} server(s)" + (f" x {api_servers} API servers" if api_servers > 1 else "")


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per entry of --servers (in order; an entry given twice is two entries): the median tokens/s of its rounds and
    the ratio to the first entry's (pure)."""
    medians = [(r["entry"], r["servers"], r.get("apiServers", 1), statistics.median(r["rounds"])) for r in rows]
    base = medians[0][3]
    return [{"entry": e, "servers": k, "apiServers": a, "tokensPerSecond": m, "ratio": m / base if base else None}
            for e, k, a, m in medians]


def serve_and_measure(model: str, servers: int, args: argparse.Namespace, msgs: list[list[dict[str, str]]],
                      cpu: bool, api_servers: int = 1) -> dict[str, Any]:
    """K servers started one after the other, the warm-up phase, then the counted rounds; the servers are stopped.
    `api_servers` > 1: each server's engine is fed by that many API-server processes (their host work split, one
    engine and one share of the GPU's memory)."""
    from sampling import one_phase

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import API_SERVER_FLAGS, start_local_server

    spec = ModelSpec(model=model, serve="local", max_model_len=args.max_model_len or (4096 if cpu else 16384),
                     gpu_memory_utilization=args.gpu_memory_utilization / servers,
                     extra_args=[API_SERVER_FLAGS[0], str(api_servers)] if api_servers > 1 else [])
    starts: list[float] = []
    with contextlib.ExitStack() as stack:
        urls = []
        for _ in range(servers):
            # One compile-cache folder for all: they start one after the other, so the second finds what the first
            # compiled (on the H200, 2026-12-07, a part of its own made the second start cold: 111.2 s against 56.2).
            server = stack.enter_context(start_local_server(model, spec, served_name="bench", health_timeout_s=900))
            starts.append(round(server.healthy_after_s or 0.0, 1))
            urls.append(server.endpoint.base_url)
        print(f"  {entry_name(servers, api_servers)} healthy after {', '.join(f'{s:.1f} s' for s in starts)} "
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
    return {"servers": servers, "apiServers": api_servers, "starts": starts, "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default="", help="a local model folder (default: the tiny test model)")
    p.add_argument("--servers", default="1,2", help="entries to measure in turn: K servers, or KxA for K servers of A "
                   "API-server processes each (default %(default)s)")
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
    if args.requests < max(k for k, _ in counts):
        print(f"error: --requests {args.requests}: fewer than the {max(k for k, _ in counts)} servers to share them",
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
          f"top-p 0.95; {', '.join(entry_name(k, a) for k, a in counts)}; VLLM_USE_V2_MODEL_RUNNER {runner}",
          flush=True)
    rows: list[dict[str, Any]] = []
    out: dict[str, Any] = {"model": Path(model).name, "requests": args.requests, "n": args.n,
                           "maxTokens": args.max_tokens, "modelRunnerV2": runner, "runs": rows}
    for entry, (k, a) in enumerate(counts):
        rows.append({"entry": entry, **serve_and_measure(model, k, args, msgs, cpu, a)})
        if args.json:  # kept should a later count fail
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    out["summary"] = summarise(rows)
    print(f"median over {args.rounds} round(s), generated tokens/s and the ratio to {entry_name(*counts[0])}:")
    for s in out["summary"]:
        print(f"  {entry_name(s['servers'], s['apiServers'])}: {s['tokensPerSecond']:9.1f} tokens/s  {s['ratio']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
