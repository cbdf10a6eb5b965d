"""Which GPUs local mode uses, and how the shards are spread over them (pure functions, plus one probe).

Local mode runs one *lane* per GPU: its own vLLM server(s), its share of the shards' LLM stage and its own
kernel-stage process (compile pool, GPU workers, timing), every process of the lane seeing only that GPU
(CUDA_VISIBLE_DEVICES). Lanes share nothing but the run folder and the on-disk compile cache, so timing on
one GPU holds that GPU alone while the other lanes go on. A machine without a GPU has one lane, unpinned.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

GPUS_ENV = "CUDANALYST_GPUS"  # how many GPUs `cudanalyst run` uses when --gpus is not given


class GpuChoiceError(ValueError):
    """A GPU count that cannot be honoured here; the message names the flag or variable."""


@dataclass(frozen=True)
class Lane:
    """One GPU's share of a local run: the GPU (a CUDA_VISIBLE_DEVICES entry; None: do not pin) and its shards."""

    index: int
    gpu: str | None
    shards: tuple[int, ...]

    def env(self) -> dict[str, str]:
        """What every process of the lane gets in its environment."""
        return {} if self.gpu is None else {"CUDA_VISIBLE_DEVICES": self.gpu}

    @property
    def name(self) -> str:
        return "cpu" if self.gpu is None else f"gpu{self.gpu}"


def parse_visible(value: str) -> list[str]:
    """The devices a CUDA_VISIBLE_DEVICES value lets a process see, in order (pure).

    CUDA reads the list up to its first invalid entry: "" and "-1" hide every GPU, "0,-1,1" is GPU 0 alone.
    Entries are indexes, or GPU-/MIG- UUIDs, and are passed on as they are."""
    out: list[str] = []
    for part in value.split(","):
        item = part.strip()
        if not item or item.startswith("-") or not (item.isdigit() or item.upper().startswith(("GPU-", "MIG-"))):
            break
        out.append(item)
    return out


def count_from_smi(listing: str) -> int:
    """GPUs in `nvidia-smi -L` output (pure): one `GPU i: ...` line each; MIG lines below them are not GPUs."""
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def smi(*args: str) -> str | None:
    """nvidia-smi's output for `args`; None when it is not installed, does not answer or fails."""
    found = shutil.which("nvidia-smi")
    if found is None:
        return None
    try:
        out = subprocess.run([found, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES when set, else every GPU nvidia-smi lists."""
    env = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in env:
        return parse_visible(env["CUDA_VISIBLE_DEVICES"])
    listing = smi("-L")
    return [str(i) for i in range(count_from_smi(listing))] if listing is not None else []


def memory_from_smi(listing: str) -> int | None:
    """Bytes of GPU memory from `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits` output for one GPU
    (MiB, one line) (pure); None when it says no number."""
    first = (listing.strip().splitlines() or [""])[0].strip()
    return int(first) << 20 if first.isdigit() else None


def gpu_memory_bytes(gpu: str) -> int | None:
    """The memory of one GPU (a CUDA_VISIBLE_DEVICES entry: an index or a UUID), from nvidia-smi; None when it cannot
    be read."""
    listing = smi("--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", gpu)
    return memory_from_smi(listing) if listing is not None else None


def requested_count(flag: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """The GPU count asked for: the --gpus flag, else $CUDANALYST_GPUS, else None (every visible GPU)."""
    if flag is not None:
        if flag < 1:
            raise GpuChoiceError(f"--gpus {flag}: give at least 1 (or leave it out to use every visible GPU)")
        return flag
    raw = (os.environ if environ is None else environ).get(GPUS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise GpuChoiceError(f"${GPUS_ENV}={raw!r}: expected a whole number of GPUs, at least 1")
    return int(raw)


def choose_gpus(requested: int | None, visible: list[str]) -> list[str]:
    """The GPUs to use (pure): the first `requested` of the visible ones, or all of them."""
    if requested is None:
        return list(visible)
    if requested > len(visible):
        seen = f"{len(visible)} visible ({', '.join(visible)})" if visible else "none visible"
        raise GpuChoiceError(f"{requested} GPU(s) asked for, {seen}: ask for fewer, or check CUDA_VISIBLE_DEVICES")
    return list(visible[:requested])


def local_shard_count(shards: int, gpus: int) -> int:
    """The shards a local run uses (pure): the spec's count on every GPU. Each GPU's server then sees as many
    requests in flight as the one GPU of a single-GPU run of the same spec (a shard's client keeps a fixed
    number in flight), so adding GPUs adds work in parallel, never thins it out. On a cluster
    spec.resources.shards stays the pod count."""
    return max(1, shards) * max(1, gpus)


def make_lanes(shards: int, gpus: list[str]) -> list[Lane]:
    """One lane per GPU (one unpinned lane without a GPU), shards dealt round-robin (pure).

    The plan deals frozen programs round-robin over the shards too, so dealing shards the same way gives
    every lane programs of every task and generation, in the same proportions."""
    if shards < 1:
        raise ValueError(f"at least one shard is needed, got {shards}")
    slots: list[str | None] = list(gpus) if gpus else [None]
    if shards % len(slots):
        raise ValueError(f"{shards} shards do not spread evenly over {len(slots)} GPU(s) (see local_shard_count)")
    return [Lane(i, gpu, tuple(range(i, shards, len(slots)))) for i, gpu in enumerate(slots)]


def split_shards(shards: tuple[int, ...], servers: int) -> list[tuple[int, ...]]:
    """A lane's shards dealt round-robin over its `servers` model servers (pure), as make_lanes deals them over the
    GPUs; ValueError when a server would get none."""
    if servers < 1:
        raise ValueError("give at least 1 model server per GPU")
    if len(shards) < servers:
        raise ValueError(f"{servers} model servers per GPU need at least as many shards per GPU, and a lane has "
                         f"{len(shards)}: raise spec.resources.shards or give fewer servers per GPU")
    return [shards[k::servers] for k in range(servers)]


__all__ = ["GPUS_ENV", "GpuChoiceError", "Lane", "choose_gpus", "count_from_smi", "gpu_memory_bytes", "local_shard_count",
           "make_lanes", "memory_from_smi", "parse_visible", "requested_count", "split_shards", "visible_gpus"]
