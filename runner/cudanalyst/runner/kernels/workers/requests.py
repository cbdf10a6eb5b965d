"""What the kernel stage asks a GPU worker, typed once: `verify` a candidate, `compare` programs' times.

The pipe carries plain dicts (`wire()`), so a worker started from another checkout still reads them;
the worker turns them back into these types (`from_wire`), and the verdict cache keys on `VerifyRequest`.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ConfigDict

from cudanalyst.api.spec import EvaluationSpec
from cudanalyst.runner.kernels.verify.checker import checker_cubin
from cudanalyst.tasks import Task

TIMING_SEEDS = 2  # inputs timing runs on, none of them a verification seed (checked on the GPU there)


@dataclass(frozen=True)
class VerifyRequest:
    """Run a cubin on every seed (twice each) and check it; see correctness.py. `checker`: the trusted
    module (checker.py) whose audit kernel checks the fences after each run (empty: no fences)."""

    task: str
    sizes: dict[str, int]
    cubin: bytes
    seeds: list[int]
    rtol: float
    atol: float
    checker: bytes = b""

    op = "verify"

    def wire(self) -> dict[str, Any]:
        return {"op": self.op, **asdict(self)}

    @classmethod
    def from_wire(cls, request: dict[str, Any]) -> VerifyRequest:
        return cls(task=request["task"], sizes=dict(request.get("sizes") or {}), cubin=request["cubin"],
                   seeds=[int(s) for s in request["seeds"]], rtol=float(request["rtol"]),
                   atol=float(request["atol"]), checker=request.get("checker") or b"")


@dataclass(frozen=True)
class TimedProgram:
    """One program of a comparison: a name the reply uses (a unit key, `frozen`, `baseline`) and its cubin."""

    name: str
    cubin: bytes


@dataclass(frozen=True)
class CompareRequest:
    """Time several programs of one task in interleaved trials, on the timing seeds' inputs (none of them a
    verification seed), with the outputs of every timed launch checked on the GPU by `checker` (a cubin of
    checker.py's source)."""

    task: str
    sizes: dict[str, int]
    seeds: list[int]
    rtol: float
    atol: float
    programs: list[TimedProgram]
    checker: bytes
    warmup: int = 3
    trials: int = 30
    graphs: bool = True  # capture multi-launch sequences in a CUDA graph (no host launch gaps)
    extra: dict[str, Any] = field(default_factory=dict)
    # The programs the others are compared with, and how many times slower than them a program's warm-up may be
    # before it is not timed further (it cannot be fast; timing/trials.py, too_slow). 0: every program is timed.
    references: list[str] = field(default_factory=list)
    slow_factor: float = 0.0

    op = "compare"

    def wire(self) -> dict[str, Any]:
        return {"op": self.op, **asdict(self)}

    @classmethod
    def from_wire(cls, request: dict[str, Any]) -> CompareRequest:
        return cls(task=request["task"], sizes=dict(request.get("sizes") or {}),
                   seeds=[int(s) for s in request["seeds"]], rtol=float(request["rtol"]),
                   atol=float(request["atol"]),
                   programs=[TimedProgram(p["name"], p["cubin"]) for p in request["programs"]],
                   checker=request["checker"], warmup=int(request.get("warmup", 3)),
                   trials=int(request.get("trials", 30)), graphs=bool(request.get("graphs", True)),
                   extra=dict(request.get("extra") or {}),
                   references=[str(r) for r in request.get("references") or []],
                   slow_factor=float(request.get("slow_factor", 0.0)))


class EvalSettings(EvaluationSpec):
    """The spec's `evaluation` as the stage reads it: the same fields, defaults and bounds, kept in one place."""

    model_config = ConfigDict(frozen=True)

    @classmethod
    def of(cls, settings: Any) -> EvalSettings:
        """From the spec's `evaluation`, a dict of its snake_case fields (others ignored) or None (defaults)."""
        if settings is None:
            return cls()
        if isinstance(settings, dict):
            return cls(**{k: v for k, v in settings.items() if k in cls.model_fields})
        return cls(**{k: getattr(settings, k) for k in cls.model_fields if hasattr(settings, k)})


@dataclass(frozen=True)
class Seeds:
    """The seeds of one run's inputs: `verify` (one per correctness trial) and `timing` (disjoint from them),
    so a kernel that memorised the verification inputs' answers is wrong when timed."""

    verify: tuple[int, ...]
    timing: tuple[int, ...]


def derive_seed(secret: int, kind: str, index: int) -> int:
    """A numpy seed (31 bits) for input `index` of `kind`, from the run's secret (pure)."""
    digest = hashlib.sha256(f"cudanalyst-inputs:{int(secret)}:{kind}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def derive_seeds(secret: int, correctness_trials: int, timing: int = TIMING_SEEDS) -> Seeds:
    """The run's seeds from its secret (runfolder.run_secret); timing's never repeat verification's (pure)."""
    verify = tuple(derive_seed(secret, "verify", i) for i in range(correctness_trials))
    out: list[int] = []
    i = 0
    while len(out) < timing:  # a 31-bit collision with a verification seed is rare; skip it all the same
        s = derive_seed(secret, "timing", i)
        if s not in verify and s not in out:
            out.append(s)
        i += 1
    return Seeds(verify=verify, timing=tuple(out))


def fresh_secret() -> int:
    """A secret for a caller with no run folder (tests, one-off evaluations): nobody knows it in advance."""
    return secrets.randbits(63)


def seeds_for(cfg: EvalSettings, secret: int | None = None) -> Seeds:
    """The spec's fixed seed if it sets one, else `secret`, else a fresh secret."""
    base = cfg.seed if cfg.seed is not None else (secret if secret is not None else fresh_secret())
    return derive_seeds(base, cfg.correctness_trials)


def verify_request(task: Task, cubin: bytes, cfg: EvalSettings, seeds: Seeds | None = None) -> VerifyRequest:
    """What a worker is asked to verify a cubin (also the verdict cache's key: the seeds are in it). Without
    `seeds`: the spec's fixed seed, else a fresh secret (a caller with no run, e.g. the feedback reports)."""
    seeds = seeds or seeds_for(cfg)
    return VerifyRequest(task=task.name, sizes=dict(task.sizes), cubin=cubin, seeds=list(seeds.verify),
                         rtol=cfg.rtol, atol=cfg.atol, checker=checker_cubin())


def compare_request(task: Task, programs: Sequence[TimedProgram], cfg: EvalSettings,
                    seeds: Seeds | None = None, references: Sequence[str] = (),
                    slow_factor: float = 0.0) -> CompareRequest:
    seeds = seeds or seeds_for(cfg)
    return CompareRequest(task=task.name, sizes=dict(task.sizes), seeds=list(seeds.timing), rtol=cfg.rtol,
                          atol=cfg.atol, programs=list(programs), checker=checker_cubin(), warmup=cfg.warmup,
                          trials=cfg.trials, references=list(references), slow_factor=slow_factor)
