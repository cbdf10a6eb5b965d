#!/usr/bin/env python
"""Generation throughput: the same N prompts through one vLLM server, one at a time vs all in flight.

  python bench/generation.py [--n 32] [--max-tokens 64] [--endpoint URL --model NAME]

Without --endpoint it serves the tiny test model (scripts/build_tiny_model.py) itself on loopback,
with the CPU settings of docs/llm-stage.md. The prompts are the runner's own planner prompts for one
frozen program under N coalition-like feedback variants, so they share a long head (system, task
contract, program, history) and differ only at the end, as in a real shard. Prints tokens/s of both
ways, their ratio, and the prefix-cache hit rate of each phase from the server's /metrics.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from cudanalyst.api import ModelSpec  # noqa: E402
from cudanalyst.runner.llm.client import ClientSettings, GenerationRequest, generate  # noqa: E402
from cudanalyst.runner.llm.prompts import FeedbackReport, ProgramView, planner_prompt  # noqa: E402
from cudanalyst.runner.llm.serving import Endpoint, start_local_server  # noqa: E402
from cudanalyst.tasks import get_task  # noqa: E402

CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
MAX_MODEL_LEN = 2048


def prompts(n: int) -> list[list[dict[str, str]]]:
    task = get_task("gemm")
    view = ProgramView(task.contract(), task.baseline_source, 5,
                       tuple(f"generation {g}: tried tiling variant {g} of the k loop" for g in range(1, 5)))
    out = []
    for i in range(n):
        reports = [FeedbackReport("profiler", f"variant {i}: kernel time {1 + i / 10:.2f} ms, memory bound, "
                                      f"{40 + i} registers per thread")]
        out.append(planner_prompt(view, reports).chat())
    return out


def metric(root: str, name: str) -> float:
    with urllib.request.urlopen(f"{root}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? ([0-9.e+-]+)$", text, re.M))


def phase(endpoint: Endpoint, requests: list[GenerationRequest], concurrency: int) -> dict[str, float]:
    q0 = metric(endpoint.root, "vllm:prefix_cache_queries_total")
    h0 = metric(endpoint.root, "vllm:prefix_cache_hits_total")
    t0 = time.perf_counter()
    # One client either way; the semaphore alone decides how many requests are in flight.
    results = generate(endpoint, requests, ClientSettings(concurrency=concurrency))
    wall = time.perf_counter() - t0
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, first: {failed[0]}")
    tokens = sum(sum(c or 0 for c in r.completion_tokens) for r in results)
    queries = metric(endpoint.root, "vllm:prefix_cache_queries_total") - q0
    hits = metric(endpoint.root, "vllm:prefix_cache_hits_total") - h0
    return {"wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
            "hit_rate": hits / queries if queries else 0.0,
            "prompt_tokens": float(sum(r.prompt_tokens or 0 for r in results))}


def run(endpoint: Endpoint, n: int, max_tokens: int) -> None:
    msgs = prompts(n)
    requests = [GenerationRequest(f"p{i}", m, 1, seed=i, max_tokens=max_tokens, temperature=0.8) for i, m in
                enumerate(msgs)]
    # Warm-up: load weights into caches and put the shared head in the prefix cache for both phases alike.
    generate(endpoint, [GenerationRequest("warm", msgs[0], 1, seed=999, max_tokens=4)])
    one = phase(endpoint, requests, 1)
    many = phase(endpoint, requests, n)
    print(f"prompts: {n}, {one['prompt_tokens'] / n:.0f} prompt tokens each, max {max_tokens} new tokens each")
    print(f"one at a time : {one['tokens']:6.0f} tokens in {one['wall_s']:7.2f} s = {one['tokens_per_s']:8.1f} tok/s,"
          f" prefix-cache hit rate {one['hit_rate']:.1%}")
    print(f"all in flight : {many['tokens']:6.0f} tokens in {many['wall_s']:7.2f} s = {many['tokens_per_s']:8.1f} tok/s,"
          f" prefix-cache hit rate {many['hit_rate']:.1%}")
    print(f"throughput ratio (all in flight / one at a time): {many['tokens_per_s'] / one['tokens_per_s']:.2f}x")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32, help="prompts (default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=64, help="new tokens per prompt (default %(default)s)")
    p.add_argument("--endpoint", help="an existing OpenAI-compatible vLLM server (…/v1)")
    p.add_argument("--model", default="tiny", help="served model name at --endpoint")
    args = p.parse_args()
    if args.endpoint:
        run(Endpoint(args.endpoint.rstrip("/"), args.model, "chat"), args.n, args.max_tokens)
        return 0
    import build_tiny_model

    model = build_tiny_model.build(build_tiny_model.default_root())["tiny-llama"]
    os.environ.update(CPU_ENV)
    # Whole prefills: vLLM-CPU 0.32 cannot split the prefill of a seeded request (see docs/llm-stage.md).
    spec = ModelSpec(model=str(model), serve="local", max_model_len=MAX_MODEL_LEN, dtype="float32",
                     extra_args=["--enforce-eager", "--no-enable-chunked-prefill",
                                 "--max-num-batched-tokens", str(MAX_MODEL_LEN * 4)])
    t0 = time.perf_counter()
    with start_local_server(str(model), spec, served_name="tiny", env=CPU_ENV, health_timeout_s=900) as server:
        print(f"server healthy after {time.perf_counter() - t0:.1f} s")
        run(server.endpoint, args.n, args.max_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
