#!/usr/bin/env python
"""What a request's own seed and its top-p cost vLLM's generation rate (issue 32).

  python bench/sampling.py [MODEL_FOLDER] [--requests 64] [--n 1] [--max-tokens 64] [--rounds 2]
                           [--batches 64,256,512] [--vocab 151936] [--logits flat,peaked] [--skip-serve] [--json FILE]

Every request the runner sends carries its own seed (stage.derive_seed) and top-p 0.95 (client.GenerationRequest).
In vLLM's sampler a request with its own seed leaves the batched path: its noise is drawn row by row with its own
torch.Generator (vllm/v1/sample/ops/topk_topp_sampler.py, random_sample: "This can be slow because we handle each
request one by one": on a GPU one kernel launch a row, 512 a step at 512 running requests), and top-p filters every
row's logits (a sort of the vocabulary on the CPU; vLLM 0.22's Triton filter on a GPU). The H200's LLM stage
generates 8,000-15,000 tokens/s with 400-500 requests running, the 0.5B as slowly as the 1.5B (docs/performance.md):
a cost that does not grow with the model, as these would not.

Two measurements of the four settings (seeded or not, x top-p 0.95 or 1.0), side by side in one run:
1. serve: one server (MODEL_FOLDER; default the tiny test model, on this CPU) answers the same R requests, all in
   flight, each writing exactly --max-tokens tokens (ignore_eos, so every setting does the same work), under each
   setting in turn, in rounds whose order reverses each round (ABCD, DCBA) so that a drift of the machine falls on
   all; generated tokens/s each (the median over rounds) and the ratio to the runner's setting (seeded, top-p 0.95).
   The server starts from a fresh compile cache of its own (a new temporary folder), and a first phase of the runner's
   setting, not counted, warms it up.
2. ops (after the server has stopped, so that this process's CUDA context is not in its memory budget): vLLM's own
   TopKTopPSampler on made-up logits (batch B x vocabulary V), the median of 20 calls each: what the sampler adds to
   one decoding step, per setting, on two kinds of rows (--logits): `flat` (standard normal: top-p 0.95 keeps most of
   the vocabulary, the filter's hardest case) and `peaked` (a power law over the vocabulary, closer to a model's next
   token: top-p 0.95 keeps from one to a few thousand tokens, about ten in the median row); the table says how many
   it kept. On a GPU also model runner V2's sampler (VLLM_USE_V2_MODEL_RUNNER=1: the same top-p filter, then every
   seeded row's noise in one Triton kernel, `gumbel_sample`) on the same logits, and V1's seeded call against it.
   --skip-serve: this part alone (no model: one short device call after the wheelhouse).

Outcomes: a request without a seed draws from the server's generator, so a run made again draws other samples
(with seeds it draws the same ones, as far as the GPU's batching is reproducible, which it is not bitwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

# (name, seeded, top_p): the runner's setting first, the ratio's denominator.
SETTINGS = (("seeded, top-p 0.95", True, 0.95), ("unseeded, top-p 0.95", False, 0.95),
            ("seeded, top-p 1.0", True, 1.0), ("unseeded, top-p 1.0", False, 1.0))


def round_orders(rounds: int) -> list[list[int]]:
    """The settings' order in each round: forward, then reversed, alternating (pure)."""
    forward = list(range(len(SETTINGS)))
    return [forward if r % 2 == 0 else forward[::-1] for r in range(rounds)]


def summarise(rates: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Median tokens/s per setting and its ratio to the runner's setting (pure)."""
    base = statistics.median(rates[SETTINGS[0][0]])
    return {name: {"tokensPerSecond": statistics.median(r), "ratio": statistics.median(r) / base}
            for name, r in rates.items()}


# ---- 2. the sampler alone ----------------------------------------------------------------------------------------


# The rows the sampler is timed on. The ops measured on H100s (2026-12-05, 2026-12-07) used standard normal logits,
# on which top-p 0.95 keeps most of the 151,936 tokens: the top-p filter's cost there is its worst case, and a
# model's next-token distribution is far more concentrated. `peaked` rows follow a power law over a random order of
# the vocabulary, p(rank r) ~ r^-s, with s drawn from 1.2 to 3 a row (the top token's probability about 0.2 to 0.8);
# how many tokens top-p 0.95 kept is measured and printed, so the table says which regime each row is in.
LOGITS = ("flat", "peaked")
PEAK_EXPONENTS = (1.2, 3.0)


def make_logits(kind: str, batch: int, vocab: int, device: str, seed: int = 0) -> Any:
    """`batch` rows of `vocab` logits of the kind named (LOGITS), the same for the same seed."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    if kind == "flat":
        return torch.randn(batch, vocab, generator=g, device=device, dtype=torch.float32)
    if kind != "peaked":
        raise ValueError(f"logits kind {kind!r}: one of {', '.join(LOGITS)}")
    lo, hi = PEAK_EXPONENTS
    s = lo + (hi - lo) * torch.rand(batch, 1, generator=g, device=device)
    by_rank = -s * torch.arange(1, vocab + 1, device=device, dtype=torch.float32).log()
    order = torch.rand(batch, vocab, generator=g, device=device).argsort(dim=-1)
    return torch.empty_like(by_rank).scatter_(1, order, by_rank)


def kept_by_top_p(logits: Any, top_p: float) -> list[int]:
    """How many tokens each row keeps under top-p: those with less than `top_p` of the mass above them, the most
    likely token always (vLLM's rule, up to ties)."""
    probs = logits.softmax(dim=-1).sort(dim=-1, descending=True).values
    above = probs.cumsum(dim=-1) - probs
    return [int(n) for n in (above < top_p).sum(dim=-1).clamp(min=1).tolist()]


def time_ops(batches: list[int], vocab: int, calls: int = 20,
             kinds: tuple[str, ...] = LOGITS) -> list[dict[str, Any]]:
    """vLLM's TopKTopPSampler per kind of logits, batch size and setting: the median milliseconds of one call, and
    the median and largest number of tokens top-p 0.95 kept in the batch's rows."""
    import torch
    import vllm._custom_ops  # noqa: F401  (registers vLLM's compiled ops, which the CPU's sampler calls)
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sampler = TopKTopPSampler()
    rows = []
    for kind in kinds:
        for b in batches:
            logits = make_logits(kind, b, vocab, device)
            kept = kept_by_top_p(logits, SETTINGS[0][2])
            shape = {"logits": kind, "keptMedian": statistics.median(kept), "keptMax": max(kept)}
            for name, seeded, top_p in SETTINGS:
                generators = {i: torch.Generator(device=device).manual_seed(i) for i in range(b)} if seeded else {}
                p = torch.full((b,), top_p, device=device) if top_p < 1.0 else None
                ms = median_ms(lambda x, g=generators, p=p: sampler(x, g, None, p), logits.clone, calls,
                               device == "cuda")
                rows.append({"batch": b, "setting": name, "ms": ms, "device": device, **shape})
            if device == "cuda":
                rows += [{**r, **shape} for r in v2_ops(logits, calls)]
    return rows


# Model runner V2's sampler (VLLM_USE_V2_MODEL_RUNNER=1), seeded, on the same logits: the same top-p filter as V1's,
# then every row's Gumbel noise in one Triton kernel keyed by its seed and position (a GPU's only).
V2_SETTINGS = (("V2 seeded, top-p 0.95", 0.95), ("V2 seeded, top-p 1.0", 1.0))


def v2_ops(logits: Any, calls: int) -> list[dict[str, Any]]:
    """V2's sampling of one step of the batch `logits`, the median milliseconds of one call per setting; and whether
    the same seeds and positions drew the same tokens twice (what a seed promises)."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p
    from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

    b = logits.shape[0]
    rows_idx = torch.arange(b, device=logits.device, dtype=torch.int32)
    seeds = torch.arange(b, device=logits.device, dtype=torch.int64)
    positions = torch.full((b,), 2_000, device=logits.device, dtype=torch.int64)
    temperature = torch.ones(b, device=logits.device, dtype=torch.float32)
    rows = []
    for name, top_p in V2_SETTINGS:
        p = torch.full((b,), top_p, device=logits.device) if top_p < 1.0 else None

        def step(x: Any, p: Any = p) -> Any:
            return gumbel_sample(apply_top_k_top_p(x, None, p), rows_idx, temperature, seeds, positions,
                                 apply_temperature=False)

        rows.append({"batch": b, "setting": name, "ms": median_ms(step, logits.clone, calls, True), "device": "cuda",
                     "sameDrawsTwice": bool(torch.equal(step(logits.clone()), step(logits.clone())))})
    return rows


def median_ms(call: Callable[[Any], Any], fresh: Callable[[], Any], calls: int, cuda: bool) -> float:
    """The median milliseconds of `calls` calls of `call(fresh())` after 3 warm-up calls (the Triton filter compiles
    on its first); `fresh()` (a copy of the logits, which the samplers change in place) outside the timed region."""
    import torch

    times = []
    for _ in range(calls + 3):
        x = fresh()
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        call(x)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[3:]) * 1000


# ---- 1. one server, the same requests ----------------------------------------------------------------------------


async def one_phase(base_url: str | list[str], model: str, prompts: list[list[dict[str, str]]], n: int,
                    max_tokens: int, seeded: bool, top_p: float) -> dict[str, float]:
    """Every prompt at once, each writing exactly `max_tokens` tokens a sample; several servers (a list of base
    URLs) take the prompts in turn. Generated tokens over the wall from the first request to the last answer."""
    from openai import AsyncOpenAI

    urls = [base_url] if isinstance(base_url, str) else base_url
    clients = [AsyncOpenAI(base_url=url, api_key="none", timeout=1800, max_retries=0) for url in urls]

    async def ask(i: int, msgs: list[dict[str, str]]) -> int:
        extra: dict[str, Any] = {"ignore_eos": True}
        if seeded:
            extra["seed"] = 1000 + i
        resp = await clients[i % len(clients)].chat.completions.create(
            model=model, messages=msgs, n=n, max_tokens=max_tokens, temperature=0.8, top_p=top_p, extra_body=extra)
        return resp.usage.completion_tokens if resp.usage else 0

    t0 = time.perf_counter()
    tokens = await asyncio.gather(*(ask(i, m) for i, m in enumerate(prompts)))
    wall = time.perf_counter() - t0
    for client in clients:
        await client.close()
    return {"tokens": float(sum(tokens)), "seconds": wall, "tokensPerSecond": sum(tokens) / wall}


def fresh_compile_cache() -> Path:
    """A vLLM compile cache of this run's own, and no store: nothing of an earlier run is found, and nothing this
    run compiles is kept where a user's servers would fetch it (in session 38 this bench's archive, made in its
    temporary folder, took the store's place, and vLLM 0.22 could not start from it in another folder)."""
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV

    folder = Path(tempfile.mkdtemp(prefix="bench-sampling-cache-"))
    os.environ[DIR_ENV] = str(folder)
    os.environ.pop(CACHE_URI_ENV, None)
    return folder


def serve_phases(model: str, args: argparse.Namespace) -> tuple[list[dict[str, Any]], str]:
    from generation import CPU_ENV, prompts

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import cpu_build, start_local_server

    fresh_compile_cache()
    cpu = cpu_build()
    if cpu:
        os.environ.update(CPU_ENV)
    # The model's own dtype (the tiny model's float32, Qwen's bfloat16), as a run serves it.
    spec = ModelSpec(model=model, serve="local", max_model_len=args.max_model_len or (4096 if cpu else 16384),
                     gpu_memory_utilization=args.gpu_memory_utilization)
    msgs = prompts(args.requests)
    rows = []
    t0 = time.perf_counter()
    with start_local_server(model, spec, served_name="bench", health_timeout_s=900) as server:
        started = f"server healthy after {time.perf_counter() - t0:.1f} s"
        print(started, flush=True)
        url = server.endpoint.base_url
        # One phase of the runner's setting first, not counted: the first batch of this size pays for warming up (on
        # this CPU, 0.5B: 25 s against 15.5 s the next time), which would fall on the first setting alone.
        asyncio.run(one_phase(url, "bench", msgs, args.n, args.max_tokens, True, 0.95))
        for r, order in enumerate(round_orders(args.rounds)):
            for i in order:
                name, seeded, top_p = SETTINGS[i]
                got = asyncio.run(one_phase(url, "bench", msgs, args.n, args.max_tokens, seeded, top_p))
                rows.append({"round": r, "setting": name, **got})
                print(f"  round {r} {name:22s} {got['tokens']:8.0f} tokens in {got['seconds']:7.2f} s = "
                      f"{got['tokensPerSecond']:9.1f} tokens/s", flush=True)
    return rows, started


def ops_table(ops: list[dict[str, Any]], batches: list[int]) -> str:
    """The sampler's milliseconds a call: for each kind of logits measured, a row per batch (with how many tokens
    top-p 0.95 kept) and a column per setting measured (V2's on a GPU only), and V1's seeded call against V2's at the
    runner's top-p (pure). A row without its kind (the JSONs of 2026-12-05 and 2026-12-07) is `flat`."""
    names = [n for n, _, _ in SETTINGS] + [n for n, _ in V2_SETTINGS if any(r["setting"] == n for r in ops)]
    kinds = [k for k in LOGITS if any(r.get("logits", "flat") == k for r in ops)]
    ms = {(r.get("logits", "flat"), r["batch"], r["setting"]): r for r in ops}
    lines = []
    for kind in kinds:
        lines.append(f"  {kind} logits:")
        lines.append(f"  {'batch':>6s}  {'kept at 0.95':>17s}  " + "  ".join(f"{n:>22s}" for n in names))
        for b in batches:
            first = ms[(kind, b, SETTINGS[0][0])]
            kept = f"{first['keptMedian']:.0f} (<={first['keptMax']})" if "keptMedian" in first else "-"
            lines.append(f"  {b:6d}  {kept:>17s}  " + "  ".join(f"{ms[(kind, b, n)]['ms']:22.2f}" for n in names))
        for b in batches:
            v1, v2 = ms.get((kind, b, SETTINGS[0][0])), ms.get((kind, b, V2_SETTINGS[0][0]))
            if v1 and v2:
                lines.append(f"  {kind}, batch {b}: V1 seeded / V2 seeded at top-p 0.95: {v1['ms'] / v2['ms']:.2f}x "
                             f"(V2 drew the same tokens twice for the same seeds: {v2['sameDrawsTwice']})")
    if not any(r["setting"] == V2_SETTINGS[0][0] for r in ops):
        lines.append("  V2 (VLLM_USE_V2_MODEL_RUNNER=1): not measured here (its sampler is a Triton kernel: a GPU's)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="?", default="", help="a local model folder (default: the tiny test model)")
    p.add_argument("--requests", type=int, default=64, help="requests, all in flight (default %(default)s)")
    p.add_argument("--n", type=int, default=1, help="samples per request (the coder's is 5)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens each sample writes (default %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the four settings (default %(default)s)")
    p.add_argument("--batches", default="64,256,512", help="ops: batch sizes (default %(default)s)")
    p.add_argument("--vocab", type=int, default=151936, help="ops: vocabulary (default Qwen2.5's, %(default)s)")
    p.add_argument("--logits", default=",".join(LOGITS), help="ops: kinds of rows, of flat,peaked (default both)")
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--max-model-len", type=int, default=0, help="default 16384 on a GPU, 4096 on the CPU")
    p.add_argument("--skip-serve", action="store_true", help="the ops only (no server)")
    p.add_argument("--json", default="", help="write every measurement and the summaries here")
    args = p.parse_args(argv)
    try:
        batches = [int(b) for b in args.batches.split(",") if b]
    except ValueError:
        print(f"error: --batches {args.batches!r}: comma-separated integers", file=sys.stderr)
        return 2
    kinds = tuple(k for k in args.logits.split(",") if k)
    if not kinds or set(kinds) - set(LOGITS):
        print(f"error: --logits {args.logits!r}: comma-separated, of {', '.join(LOGITS)}", file=sys.stderr)
        return 2
    if min([args.requests, args.n, args.max_tokens, args.rounds, args.vocab, *batches]) < 1:
        print("error: --requests, --n, --max-tokens, --rounds, --vocab and --batches: at least 1", file=sys.stderr)
        return 2
    model = args.model
    if model and not (Path(model) / "config.json").is_file():
        print(f"error: {model}: no config.json (a local model folder)", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}

    if not args.skip_serve:
        if not model:
            import build_tiny_model

            model = str(build_tiny_model.build(build_tiny_model.default_root())["tiny-llama"])
        print(f"1. one server ({Path(model).name}), {args.requests} requests x n={args.n} all in flight, "
              f"{args.max_tokens} tokens each sample:")
        rows, started = serve_phases(model, args)
        rates: dict[str, list[float]] = {}
        for r in rows:
            rates.setdefault(r["setting"], []).append(r["tokensPerSecond"])
        summary = summarise(rates)
        out.update(serve=rows, summary=summary, server=started)
        print(f"  median over {args.rounds} round(s), tokens/s and the ratio to the runner's setting:")
        for name, s in summary.items():
            print(f"  {name:22s} {s['tokensPerSecond']:9.1f} tokens/s  {s['ratio']:.2f}x")
        if args.json:  # kept should the sampler's part fail
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")

    # After the server has stopped: this process's CUDA context and tensors are not in the server's memory budget.
    ops = time_ops(batches, args.vocab, kinds=kinds)
    out["ops"] = ops
    print(f"2. vLLM's sampler alone, {args.vocab} logits a row, on the {ops[0]['device'].upper()} "
          "(median of 20 calls, ms):")
    print(ops_table(ops, batches))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
