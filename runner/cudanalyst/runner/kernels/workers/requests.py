"""What the kernel stage asks a GPU worker, typed once: `verify` a candidate, `compare` programs' times.

The pipe carries plain dicts (`wire()`), so a worker started from another checkout still reads them;
the worker turns them back into these types (`from_wire`), and the verdict cache keys on `VerifyRequest`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic import ConfigDict

from cudanalyst.api.spec import EvaluationSpec
from cudanalyst.runner.kernels.verify.checker import checker_cubin
from cudanalyst.tasks import Task

SEED_BASE = 1000  # correctness seeds are SEED_BASE + 0..correctnessTrials-1; timing rotates over them


@dataclass(frozen=True)
class VerifyRequest:
    """Run a cubin on every seed (twice each) and check it; see verify.py."""

    task: str
    sizes: dict[str, int]
    cubin: bytes
    seeds: list[int]
    rtol: float
    atol: float

    op = "verify"

    def wire(self) -> dict[str, Any]:
        return {"op": self.op, **asdict(self)}

    @classmethod
    def from_wire(cls, request: dict[str, Any]) -> VerifyRequest:
        return cls(task=request["task"], sizes=dict(request.get("sizes") or {}), cubin=request["cubin"],
                   seeds=[int(s) for s in request["seeds"]], rtol=float(request["rtol"]),
                   atol=float(request["atol"]))


@dataclass(frozen=True)
class TimedProgram:
    """One program of a comparison: a name the reply uses (a unit key, `frozen`, `baseline`) and its cubin."""

    name: str
    cubin: bytes


@dataclass(frozen=True)
class CompareRequest:
    """Time several programs of one task in interleaved trials, on the correctness seeds' inputs, with the
    outputs of some timed launches checked on the GPU by `checker` (a cubin of checker.py's source)."""

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
                   extra=dict(request.get("extra") or {}))


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


def correctness_seeds(cfg: EvalSettings) -> list[int]:
    return [SEED_BASE + i for i in range(cfg.correctness_trials)]


def verify_request(task: Task, cubin: bytes, cfg: EvalSettings) -> VerifyRequest:
    """What a worker is asked to verify a cubin (also the verdict cache's key)."""
    return VerifyRequest(task=task.name, sizes=dict(task.sizes), cubin=cubin, seeds=correctness_seeds(cfg),
                         rtol=cfg.rtol, atol=cfg.atol)


def compare_request(task: Task, programs: Sequence[TimedProgram], cfg: EvalSettings) -> CompareRequest:
    return CompareRequest(task=task.name, sizes=dict(task.sizes), seeds=correctness_seeds(cfg), rtol=cfg.rtol,
                          atol=cfg.atol, programs=list(programs), checker=checker_cubin(), warmup=cfg.warmup,
                          trials=cfg.trials)
