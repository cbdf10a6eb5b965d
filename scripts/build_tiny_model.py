#!/usr/bin/env python
"""Build the tiny test models: a random Llama plus a BPE tokenizer trained offline, deterministic.

  python scripts/build_tiny_model.py [--out DIR] [--force]

Writes two folders under `${CUDANALYST_CACHE:-~/.cache/cudanalyst}/models/` (or --out):
  tiny-llama       with a chat template (for `api: chat`)
  tiny-llama-base  the same weights without one (a base model: `api: completion`)

Nothing is downloaded: the tokenizer is trained on text made here (the prompt templates plus
synthetic CUDA-like lines), the weights are drawn from a seeded generator. The model writes noise;
tests assert token counts and record structure, never text. Head size 32 because vLLM's CPU
attention supports only some head sizes. A folder whose stamp matches this script's settings is
kept as is, so CI can call this on every run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
from pathlib import Path

SETTINGS = {
    "vocab_size": 4096,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096,
    "seed": 0,
    "format": 2,
}
SPECIAL = ["<unk>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
STAMP = "cudanalyst-tiny.json"


def default_root() -> Path:
    return Path(os.environ.get("CUDANALYST_CACHE", Path.home() / ".cache" / "cudanalyst")) / "models"


def corpus(seed: int) -> list[str]:
    """Training text: the prompt templates and seeded CUDA-like and prose lines (no downloads)."""
    rng = random.Random(seed)
    root = Path(__file__).resolve().parent.parent / "runner" / "cudanalyst" / "runner" / "llm" / "templates"
    lines = [p.read_text() for p in sorted(root.rglob("*")) if p.suffix in (".txt", ".tmpl")]
    if not lines:  # a moved folder would otherwise give another model, silently
        raise SystemExit(f"build_tiny_model: no prompt templates under {root}")
    idents = ["idx", "tid", "row", "col", "acc", "sum", "tile", "A", "B", "C", "N", "M", "K", "x", "y", "alpha"]
    types = ["float", "double", "int", "const float*", "float*", "__restrict__ float*"]
    words = ["the", "kernel", "uses", "shared", "memory", "registers", "occupancy", "warp", "block", "grid", "thread", "coalesced", "access", "latency", "bandwidth", "profiler", "analyzer", "debugger", "report", "plan", "step", "speedup", "correct", "error", "line", "spill", "loop", "unroll", "tile", "reduce", "sync", "barrier", "launch", "compile", "nvcc", "sanitizer", "memory", "global"]
    for _ in range(4000):
        a, b, c = rng.choice(idents), rng.choice(idents), rng.choice(idents)
        lines.append(rng.choice([
            f"__global__ void k_{a}({rng.choice(types)} {b}, int {c}) {{",
            f"  int {a} = blockIdx.x * blockDim.x + threadIdx.x;",
            f"  if ({a} < {c}) {{ {b}[{a}] += {rng.random():.3f}f * {c}; }}",
            f"  __shared__ float {a}_s[{rng.choice([16, 32, 64, 128])}];",
            f"  for (int {a} = 0; {a} < {c}; ++{a}) {{ {b} += {c}; }}",
            "  __syncthreads();",
            f"#define {a.upper()} {rng.randint(1, 4096)}",
            " ".join(rng.choice(words) for _ in range(rng.randint(5, 15))) + ".",
            f"{rng.randint(1, 9)}. " + " ".join(rng.choice(words) for _ in range(8)),
        ]))
    return lines


def build_tokenizer(out: Path, seed: int, chat: bool) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=SETTINGS["vocab_size"], special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="</s>", model_max_length=SETTINGS["max_position_embeddings"])
    if chat:
        fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=SETTINGS["vocab_size"], hidden_size=SETTINGS["hidden_size"],
        intermediate_size=SETTINGS["intermediate_size"], num_hidden_layers=SETTINGS["num_hidden_layers"],
        num_attention_heads=SETTINGS["num_attention_heads"], num_key_value_heads=SETTINGS["num_key_value_heads"],
        max_position_embeddings=SETTINGS["max_position_embeddings"], bos_token_id=1, eos_token_id=2,
        tie_word_embeddings=False, torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)


def settings_digest() -> str:
    return hashlib.sha256(json.dumps([SETTINGS, SPECIAL, CHAT_TEMPLATE]).encode()).hexdigest()[:16]


def build(root: Path, force: bool = False) -> dict[str, Path]:
    """Build (or keep) both folders; returns {name: path}."""
    digest = settings_digest()
    out = {"tiny-llama": root / "tiny-llama", "tiny-llama-base": root / "tiny-llama-base"}
    for name, path in out.items():
        stamp = path / STAMP
        if not force and stamp.is_file() and json.loads(stamp.read_text()).get("digest") == digest:
            continue
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        build_model(tmp, SETTINGS["seed"])
        build_tokenizer(tmp, SETTINGS["seed"], chat=(name == "tiny-llama"))
        (tmp / STAMP).write_text(json.dumps({"digest": digest, "settings": SETTINGS}))
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)  # the folder appears whole or not at all
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=default_root(), help="parent folder (default %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    args = p.parse_args(argv)
    for name, path in build(args.out, args.force).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
