"""Verification verdicts on disk, beside the compile cache, so a verification is never done twice.

A verdict is decided by the cubin, the task and its sizes, the seeds (so the inputs: a run with another
secret never meets this verdict), the tolerances and the code that
verifies (the harness and the task's reference): the key hashes all of them, the code by the text of
its source files, so a changed harness or reference never meets an old verdict. Only verdicts are
kept (the worker answered, correct or not, with its reason); a timeout or a crashed worker may be the
machine's load rather than the kernel and is asked again next time.

This is what lets the LLM stage verify early (precompile.py): a verdict it stores is what the kernel
stage would have computed, so the kernel stage reads it instead of running the candidate again.
Writes are atomic; concurrent writers of one key write the same verdict.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from cudanalyst import tasks
from cudanalyst.runner.kernels.compile.nvcc import CompileCache, _atomic_write
from cudanalyst.runner.kernels.verify import checker, fences
from cudanalyst.runner.kernels.verify import correctness as verify
from cudanalyst.runner.kernels.workers import references, worker
from cudanalyst.runner.kernels.workers.requests import VerifyRequest


@functools.cache
def harness_version() -> str:
    """A hash of the source of everything that decides a verdict: the harness and the task suite."""
    files = [Path(m.__file__) for m in (verify, checker, fences, worker, references) if m.__file__]
    files += sorted(Path(tasks.__file__).parent.glob("*.py"))
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def verdict_key(request: VerifyRequest) -> str:
    blob = json.dumps({
        "cubin": hashlib.sha256(request.cubin).hexdigest(),
        "task": request.task, "sizes": sorted(request.sizes.items()),
        "seeds": list(request.seeds), "rtol": request.rtol, "atol": request.atol,
        "harness": harness_version(),
    }, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


class VerdictCache:
    """`get(request)` / `put(request, reply)` for verify requests (see the module's docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @classmethod
    def beside(cls, compile_cache: CompileCache) -> VerdictCache:
        return cls(compile_cache.root / "verdicts")

    def _path(self, request: VerifyRequest) -> Path:
        key = verdict_key(request)
        return self.root / key[:2] / f"{key}.json"

    def get(self, request: VerifyRequest) -> dict[str, Any] | None:
        try:
            reply = json.loads(self._path(request).read_text())
        except (OSError, ValueError):
            return None
        return {**reply, "cached": True} if isinstance(reply, dict) else None

    def put(self, request: VerifyRequest, reply: dict[str, Any]) -> bool:
        """Store a verdict; False (nothing stored) for a timeout, a crash or any reply without one."""
        if not reply.get("ok") or "correct" not in reply or reply.get("cached"):
            return False
        path = self._path(request)
        path.parent.mkdir(parents=True, exist_ok=True)
        keep = {k: v for k, v in reply.items() if k != "sticky"}  # the worker's own state, not the verdict's
        _atomic_write(path, json.dumps(keep).encode())
        return True


def verify_once(pool: Any, cache: VerdictCache | None, request: VerifyRequest, timeout_s: float,
                ready_s: float | None = None) -> dict[str, Any]:
    """The stored verdict of `request`, else the pool's (stored for next time)."""
    if cache is not None and (hit := cache.get(request)) is not None:
        return hit
    reply: dict[str, Any] = pool.verify(request, timeout_s, ready_s)
    if cache is not None:
        cache.put(request, reply)
    return reply
