"""What the kernel stage asks a GPU worker, typed once: `verify` a candidate, `compare` programs' times.

The pipe carries plain dicts (`wire()`), so a worker started from another checkout still reads them;
the worker turns them back into these types (`from_wire`), and the verdict cache keys on `VerifyRequest`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
