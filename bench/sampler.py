"""What a decoding step's sampling costs in vLLM's two model runners, with a seed on every request (issue 32).

Every request of ours carries a seed (sampling.requestSeeds). vLLM 0.22's model runner V1 (its default for the
coder's Qwen2) draws a seeded row's exponential noise in a launch of its own (`random_sample`'s loop over the
rows' generators); V2 (VLLM_USE_V2_MODEL_RUNNER=1) draws every row's Gumbel noise in one Triton kernel keyed by the
request's seed and the token's position (`gumbel_sample`). This bench times the part of a step that differs, from
the processed logits to the sampled tokens, side by side in one run on the same logits:

  v1-seeded    softmax, then random_sample with a torch.Generator for every row (what our servers run today)
  v1-unseeded  the same with no generator (one launch for the batch: sampling.requestSeeds false)
  v2-seeded    gumbel_sample with every row's seed and position (needs a GPU: Triton)

and prints each one's median milliseconds a step and the ratios. The clock is the stage's: each call timed from
the host, the GPU synchronised before and after (the loop's launches are the host's work, which a step waits for).
`--batch` defaults to 480, the requests a whole run kept running on the H200 (docs/performance.md). V2's draws
are checked to be the same for the same seeds and positions (what a seed promises).

  python bench/sampler.py [--batch 480] [--vocab 151936] [--steps 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

QWEN_VOCAB = 151_936  # the 1.5B coder's logits width


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=480, help="requests sampled a step (default 480)")
    p.add_argument("--vocab", type=int, default=QWEN_VOCAB, help=f"logits a row (default {QWEN_VOCAB})")
    p.add_argument("--steps", type=int, default=50, help="timed steps of each (after 5 of warm-up; default 50)")
    p.add_argument("--json", dest="json_out", help="also write the figures to this JSON file")
    args = p.parse_args(argv)
    if args.batch < 1 or args.vocab < 2 or args.steps < 1:
        p.error("--batch and --steps must be at least 1, --vocab at least 2")
    return args


def timed(fn: Callable[[], Any], steps: int, sync: Callable[[], None]) -> list[float]:
    """Milliseconds of each of `steps` calls, after five of warm-up (compiles, caches), the device synchronised."""
    for _ in range(5):
        fn()
    sync()
    times = []
    for _ in range(steps):
        began = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - began) * 1e3)
    return times


def samplers(batch: int, vocab: int, device: str) -> dict[str, Callable[[], Any]]:
    """The ways of sampling one step of `batch` rows that this machine can run, on the same logits."""
    import torch
    from vllm.v1.sample.ops.topk_topp_sampler import random_sample

    torch.manual_seed(0)
    logits = torch.randn(batch, vocab, device=device, dtype=torch.float32) * 4
    generators = {i: torch.Generator(device=device).manual_seed(1_000 + i) for i in range(batch)}

    def v1(gens: dict[int, torch.Generator]) -> Callable[[], Any]:
        # random_sample divides its probabilities in place: each step starts from the same logits.
        return lambda: random_sample(logits.softmax(dim=-1, dtype=torch.float32), gens)

    ways: dict[str, Callable[[], Any]] = {"v1-seeded": v1(generators), "v1-unseeded": v1({})}
    if device == "cuda":
        from vllm.v1.worker.gpu.sample.gumbel import gumbel_sample

        rows = torch.arange(batch, device=device, dtype=torch.int32)
        seeds = torch.arange(1_000, 1_000 + batch, device=device, dtype=torch.int64)
        positions = torch.full((batch,), 2_000, device=device, dtype=torch.int64)
        temperature = torch.ones(batch, device=device, dtype=torch.float32)
        ways["v2-seeded"] = lambda: gumbel_sample(logits, rows, temperature, seeds, positions,
                                                  apply_temperature=False)
    return ways


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    ways = samplers(args.batch, args.vocab, device)
    figures: dict[str, Any] = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                               "batch": args.batch, "vocab": args.vocab, "steps": args.steps, "msPerStep": {}}
    for name, fn in ways.items():
        figures["msPerStep"][name] = statistics.median(timed(fn, args.steps, sync))
    if "v2-seeded" in ways:  # a seed and a position fix a row's draw: twice the same tokens
        figures["v2Reproducible"] = bool(torch.equal(ways["v2-seeded"](), ways["v2-seeded"]()))
    return figures


def report(figures: dict[str, Any]) -> str:
    ms = figures["msPerStep"]
    lines = [f"{figures['device']}: sampling one step of {figures['batch']} requests over {figures['vocab']:,} "
             f"logits, median of {figures['steps']} steps (the stage's clock, the GPU synchronised):"]
    lines += [f"  {name:<12} {value:8.3f} ms a step" for name, value in ms.items()]
    if ms.get("v1-unseeded"):
        lines.append(f"  ratio v1-seeded / v1-unseeded: {ms['v1-seeded'] / ms['v1-unseeded']:.2f}x")
    if ms.get("v2-seeded"):
        lines.append(f"  ratio v1-seeded / v2-seeded: {ms['v1-seeded'] / ms['v2-seeded']:.2f}x")
        lines.append(f"  v2's draws for the same seeds and positions the same twice: {figures['v2Reproducible']}")
    else:
        lines.append("  v2-seeded: not measured (model runner V2's sampler is a Triton kernel: it needs a GPU)")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        figures = measure(args)
    except ImportError as exc:
        print(f"bench/sampler: vLLM is needed ({exc})", file=sys.stderr)
        return 2
    print(report(figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
