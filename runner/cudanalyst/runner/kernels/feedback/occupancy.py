"""Theoretical occupancy on sm_90 (H100 / H200), as the CUDA occupancy calculator computes it.

Pure arithmetic over the limits of compute capability 9.0: registers are allocated per warp in
units of 256, shared memory per block in units of 128 bytes plus 1 KiB the system reserves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SmLimits:
    max_warps: int = 64
    max_blocks: int = 32
    max_threads_per_block: int = 1024
    registers: int = 65536
    register_unit: int = 256  # per warp
    max_registers_per_thread: int = 255
    shared_bytes: int = 233472  # 228 KiB, the largest carveout
    max_shared_per_block: int = 232448  # 227 KiB (opt-in); static shared is capped at 48 KiB anyway
    shared_unit: int = 128
    shared_reserved_per_block: int = 1024


SM_90 = SmLimits()


@dataclass(frozen=True)
class Occupancy:
    threads_per_block: int
    active_blocks: int  # per SM
    active_warps: int
    max_warps: int
    limiter: str  # "warps", "blocks", "registers", "shared memory", or "invalid launch: ..."

    @property
    def fraction(self) -> float:
        return self.active_warps / self.max_warps if self.max_warps else 0.0


def theoretical_occupancy(
    registers: int, shared_bytes: int, threads_per_block: int, limits: SmLimits = SM_90
) -> Occupancy:
    """Blocks and warps resident per SM, and which resource binds first (ties: the first listed)."""
    if threads_per_block < 1 or threads_per_block > limits.max_threads_per_block:
        why = f"invalid launch: {threads_per_block} threads per block (1..{limits.max_threads_per_block})"
        return Occupancy(threads_per_block, 0, 0, limits.max_warps, why)
    warps = math.ceil(threads_per_block / 32)
    bounds: dict[str, int] = {
        "warps": limits.max_warps // warps,
        "blocks": limits.max_blocks,
    }
    if registers > 0:
        per_warp = math.ceil(registers * 32 / limits.register_unit) * limits.register_unit
        bounds["registers"] = (limits.registers // per_warp) // warps
    per_block_smem = math.ceil((shared_bytes + limits.shared_reserved_per_block) / limits.shared_unit)
    bounds["shared memory"] = limits.shared_bytes // (per_block_smem * limits.shared_unit)
    if shared_bytes > limits.max_shared_per_block:
        return Occupancy(
            threads_per_block, 0, 0, limits.max_warps, f"invalid launch: {shared_bytes} B shared"
        )
    limiter = min(bounds, key=lambda k: bounds[k])
    blocks = bounds[limiter]
    return Occupancy(threads_per_block, blocks, blocks * warps, limits.max_warps, limiter)
