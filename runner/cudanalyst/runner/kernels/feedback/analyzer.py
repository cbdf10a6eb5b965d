"""The analyzer's raw report: ptxas resource usage, launch and theoretical occupancy on sm_90, loop
structure, and static checks of the source (see `source_checks`).

It describes a frozen program, so it is computed once per program (never per candidate).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cudanalyst.runner.kernels.compile.nvcc import CompileResult, compile_source, task_translation_unit
from cudanalyst.runner.kernels.compile.source_checks import (
    Finding,
    _eval_int,
    function_scopes,
    object_macros,
    run_checks,
    strip_comments,
)
from cudanalyst.runner.kernels.feedback.occupancy import SM_90, Occupancy, theoretical_occupancy

if TYPE_CHECKING:
    from cudanalyst.runner.kernels.compile.nvcc import CompileCache
    from cudanalyst.tasks.base import Task

H200_SMS = 132
_LAUNCH = re.compile(r"\bLAUNCH_(?P<name>[A-Za-z_]\w*)\s*\[\s*6?\s*\]\s*=\s*\{(?P<body>[^}]*)\}")


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


def parse_launches(source: str, sizes: dict[str, int] | None = None) -> dict[str, Launch | str]:
    """Each `LAUNCH_<kernel>[6]` initializer, evaluated with the sizes; a string says why it could not be."""
    text = strip_comments(source)
    macros = object_macros(text, sizes)
    out: dict[str, Launch | str] = {}
    for m in _LAUNCH.finditer(text):
        parts = [p for p in m["body"].split(",") if p.strip()]
        values = [_eval_int(p, macros) for p in parts]
        if len(values) != 6:
            out[m["name"]] = f"LAUNCH_{m['name']} has {len(values)} values, expected 6"
        elif any(v is None for v in values):
            out[m["name"]] = (
                f"LAUNCH_{m['name']} = {{{m['body'].strip()}}} is not a constant expression I can evaluate"
            )
        else:
            v = [int(x) for x in values if x is not None]
            out[m["name"]] = Launch(grid=(v[0], v[1], v[2]), block=(v[3], v[4], v[5]))
    return out


def loop_summary(source: str) -> dict[str, str]:
    """Per kernel / device function: how many loops, and whether any is unrolled by pragma."""
    text = strip_comments(source)
    out: dict[str, str] = {}
    for scope in function_scopes(text):
        name = re.search(r"__(?:global|device)__[^(]*?\b([A-Za-z_]\w*)\s*\(", scope)
        if name is None:
            continue
        loops = len(re.findall(r"\b(?:for|while)\s*\(", scope))
        unrolled = len(re.findall(r"#\s*pragma\s+unroll", scope))
        syncs = len(re.findall(r"__syncthreads\s*\(", scope))
        out[name.group(1)] = f"{loops} loop(s), {unrolled} with #pragma unroll, {syncs} __syncthreads()"
    return out


@dataclass
class AnalyzerReport:
    text: str
    findings: list[Finding] = field(default_factory=list)
    occupancy: dict[str, Occupancy] = field(default_factory=dict)
    compiled: bool = False


def _fmt_occupancy(name: str, launch: Launch, occ: Occupancy) -> str:
    g, b = launch.grid, launch.block
    head = f"  {name}: grid ({g[0]}, {g[1]}, {g[2]}) x block ({b[0]}, {b[1]}, {b[2]}) = {launch.threads_per_block} threads"
    if occ.limiter.startswith("invalid"):
        return f"{head} -> {occ.limiter}"
    if occ.active_blocks == 0:
        return f"{head} -> 0 blocks fit on an SM (limited by {occ.limiter}): the launch would fail"
    blocks = launch.grid[0] * launch.grid[1] * launch.grid[2]
    if blocks < H200_SMS:
        head += f" [only {blocks} blocks for the H200's {H200_SMS} SMs: most SMs idle]"
    return (
        f"{head} -> {occ.active_blocks} blocks/SM, {occ.active_warps}/{occ.max_warps} warps = "
        f"{occ.fraction:.0%} theoretical occupancy (limited by {occ.limiter})"
    )


def analyze(
    source: str,
    task: Task | None = None,
    compiled: CompileResult | None = None,
    cache: CompileCache | None = None,
) -> AnalyzerReport:
    """Compile (unless given the result) and write the analyzer report for one program."""
    sizes = dict(task.sizes) if task is not None else {}
    if compiled is None:
        unit = task_translation_unit(task, source) if task is not None else source
        compiled = compile_source(unit, cache=cache)
    lines = [
        f"Analyzer report (static: ptxas {compiled.toolchain or '?'} for {compiled.arch}, source checks)"
    ]
    occupancy: dict[str, Occupancy] = {}
    if compiled.ok:
        lines.append("Resources per kernel (ptxas -v):")
        for name, r in sorted(compiled.kernels.items()):
            spill = f"{r.spill_store_bytes} B stored / {r.spill_load_bytes} B loaded"
            lines.append(
                f"  {name}: {r.registers} registers/thread, {r.shared_bytes} B static shared/block, "
                f"{r.local_bytes} B local (stack)/thread, spills {spill}, {r.barriers} barrier(s)"
            )
            if r.spills:
                lines.append(
                    f"    ! {name} spills registers to local memory: slow; reduce live values or unrolling"
                )
        lines.append(f"  __constant__ data in the module: {compiled.constant_bytes} B")
        lines.append(
            f"Launch and theoretical occupancy (sm_90: {SM_90.max_warps} warps, {SM_90.registers} registers, "
            f"{SM_90.shared_bytes // 1024} KiB shared per SM):"
        )
        launches = parse_launches(source, sizes)
        for name, r in sorted(compiled.kernels.items()):
            launch = launches.get(name)
            if launch is None:
                lines.append(f"  {name}: no LAUNCH_{name}[6] array in the source")
            elif isinstance(launch, str):
                lines.append(f"  {name}: {launch}")
            else:
                occ = theoretical_occupancy(r.registers, r.shared_bytes, launch.threads_per_block)
                occupancy[name] = occ
                lines.append(_fmt_occupancy(name, launch, occ))
    else:
        lines.append(
            "Not compiled (see the debugger report): no resource usage or occupancy; static checks only."
        )
    loops = loop_summary(source)
    if loops:
        lines.append("Loop structure:")
        lines += [f"  {name}: {text}" for name, text in loops.items()]
    findings = run_checks(source, sizes)
    if findings:
        lines.append(f"Static checks: {len(findings)} finding(s):")
        lines += [f"  {f.render()}" for f in findings]
    else:
        lines.append(
            "Static checks: no finding (coalescing, __restrict__, shared-memory bank conflicts, divergence)."
        )
    return AnalyzerReport(text="\n".join(lines), findings=findings, occupancy=occupancy, compiled=compiled.ok)
