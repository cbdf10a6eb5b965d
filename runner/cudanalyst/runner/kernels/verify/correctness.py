"""Hardened correctness checks of a candidate, run inside a GPU worker.

For every seed (fresh random inputs each), the candidate runs twice. Each run:
- outputs and scratch buffers are prefilled with NaN, so a kernel that writes nothing (or part) fails;
- the launch stream is synchronized, and the outputs copied on a separate non-blocking stream; then the
  whole device is synchronized and the outputs read again. If the two readings differ, some work was
  still running after the launch stream finished (a side stream, or work outliving the launch): fail;
- the inputs are read back and must be bit-for-bit unchanged;
- outputs must have the reference's shape and match it within the task's per-dtype tolerance;
- the second run must match the first within the same tolerance (no state carried across calls);
- the arrays are fenced (fences.py): after each run the audit kernel checks the guards around every array
  and the digests of the harness data the worker keeps on the device; a candidate that wrote outside its
  arrays fails, with the array and how far out it wrote.

The checks on host arrays are pure functions (unit-tested without a GPU); `handle_verify` is the
worker's entry point and needs pycuda.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cudanalyst.runner.kernels.verify.fences import REGION_WORDS, FencedArrays, read_findings
from cudanalyst.tasks import get_task
from cudanalyst.tasks.base import Role, Task, Tolerance

if TYPE_CHECKING:
    from cudanalyst.runner.kernels.workers.session import GpuSession


class ContractError(ValueError):
    """The candidate does not follow the task's contract (missing kernel, bad launch configuration)."""


# ---- launch configuration (pure) ----------------------------------------------------------------------


def check_launch_config(name: str, cfg: Sequence[int]) -> str | None:
    """Why a LAUNCH_<kernel> array cannot be launched, or None. Limits are CUDA's for sm_90."""
    grid, block = tuple(int(x) for x in cfg[:3]), tuple(int(x) for x in cfg[3:6])
    if min(grid) < 1 or min(block) < 1:
        return f"LAUNCH_{name} = {list(cfg)}: every grid and block size must be >= 1"
    if grid[0] > 2**31 - 1 or grid[1] > 65535 or grid[2] > 65535:
        return f"LAUNCH_{name} = {list(cfg)}: grid exceeds (2^31-1, 65535, 65535)"
    if block[0] > 1024 or block[1] > 1024 or block[2] > 64 or block[0] * block[1] * block[2] > 1024:
        return f"LAUNCH_{name} = {list(cfg)}: block exceeds 1024 threads (or 1024 x 1024 x 64)"
    return None


# ---- checks on host arrays (pure) ---------------------------------------------------------------------


def tolerance_for(task: Task, rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """A task's own tolerance when it carries one (set from its float32 accumulation length, docs/tasks.md),
    else the spec's rtol/atol for float32 tasks (their defaults agree with the dtype's), else the dtype's."""
    base = task.tolerance()
    if task.tolerance_override is not None:
        return base
    if task.dtype == "float32" and rtol is not None and atol is not None:
        return Tolerance(rtol=rtol, atol=atol)
    return base


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape)) if shape else ()


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same bytes (one pass over unsigned words; no NaN bookkeeping)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.size == 0:
        return True
    word = np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else np.dtype("u1")
    return bool(np.array_equal(np.ascontiguousarray(a).view(word), np.ascontiguousarray(b).view(word)))


def threshold(want: np.ndarray, tol: Tolerance) -> np.ndarray:
    """atol + rtol * |want| in float64: the bound `compare_output` holds each element to (reusable)."""
    thr = np.abs(want.astype(np.float64))
    thr *= tol.rtol
    thr += tol.atol
    return thr


def check_output(name: str, got: np.ndarray, want: np.ndarray, tol: Tolerance,
                 thr: np.ndarray | None = None) -> tuple[str | None, float]:
    """(why `got` is not an acceptable output `name` or None, max abs error when acceptable).

    numpy.isclose semantics (equal_nan), made cheap for the usual case: one float64 pass finds the
    elements within atol + rtol * |want|; only the others (none, for a correct kernel) go through
    isclose and the unwritten-NaN check, so the verdict and message are those of the plain checks."""
    if got.shape != want.shape:
        return f"output {name}: shape {got.shape}, expected {want.shape}", 0.0
    want64 = want.astype(np.float64, copy=False)
    diff = got.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, left to isclose below
        np.subtract(diff, want64, out=diff)
    np.abs(diff, out=diff)
    ok = diff <= (threshold(want, tol) if thr is None else thr)
    if ok.all():
        return None, float(diff.max(initial=0.0))
    suspects = np.flatnonzero(~ok)  # ascending, so the first bad element below is the first overall
    g, w = got.reshape(-1)[suspects].astype(np.float64), want64.reshape(-1)[suspects]
    unwritten = np.isnan(g) & ~np.isnan(w)
    if unwritten.any():
        first = int(suspects[np.flatnonzero(unwritten)[0]])
        return (f"output {name}: {int(unwritten.sum())} of {got.size} elements were never written "
                f"(still the NaN the harness prefilled), first at {list(_index(first, got.shape))}"), 0.0
    close = np.isclose(g, w, rtol=tol.rtol, atol=tol.atol, equal_nan=True)
    if close.all():  # inf == inf, NaN == NaN: close, though the fast pass could not say so
        return None, float(np.nanmax(diff, initial=0.0))
    bad = suspects[~close]
    first = int(bad[0])
    return (f"output {name}: {bad.size} of {got.size} elements differ from the reference beyond "
            f"rtol={tol.rtol:g}, atol={tol.atol:g}; first at {list(_index(first, got.shape))}: got "
            f"{float(got.flat[first]):.6g}, expected {float(want64.flat[first]):.6g}; "
            f"max abs error {np.nanmax(diff):.3g}"), 0.0


def compare_output(name: str, got: np.ndarray, want: np.ndarray, tol: Tolerance) -> str | None:
    """Why `got` is not an acceptable output `name`, or None."""
    return check_output(name, got, want, tol)[0]


def compare_runs(first: Mapping[str, np.ndarray], second: Mapping[str, np.ndarray], tol: Tolerance) -> str | None:
    for name, a in first.items():
        b = second[name]
        if _same_bits(a, b):  # the usual case: a deterministic kernel; skips two float64 copies
            continue
        if not np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol.rtol, atol=tol.atol, equal_nan=True):
            return f"output {name}: the second run of the candidate differs from the first (state kept between calls?)"
    return None


def modified_inputs(before: Mapping[str, np.ndarray], after: Mapping[str, np.ndarray]) -> str | None:
    for name, a in before.items():
        b = after[name]
        if not _same_bits(a, b) and not np.array_equal(a, b, equal_nan=True):
            changed = int(np.sum(~((a == b) | (np.isnan(a) & np.isnan(b)))))
            return f"input {name} was modified by the candidate ({changed} of {a.size} elements changed)"
    return None


def late_writes(at_stream_sync: Mapping[str, np.ndarray], at_device_sync: Mapping[str, np.ndarray]) -> str | None:
    for name, a in at_stream_sync.items():
        b = at_device_sync[name]
        if not _same_bits(a, b) and not np.array_equal(a, b, equal_nan=True):
            return (f"output {name} changed after the launch stream had finished: work was left running on "
                    "another stream or after the launch returned")
    return None


# ---- on the GPU ---------------------------------------------------------------------------------------

_ARG_CODES = {"float32": "f", "float64": "d", "int32": "i"}
# The 32-bit word an output or temp is prefilled with: repeated, a NaN in float32 and float64 alike.
POISON_WORD = {"float32": 0x7FC00000, "float64": 0x7FF80000, "int32": 0x7FFFFFFF}


def launch_args(task: Task, arrays: Mapping[str, Any], scalars: Mapping[str, Any], step: int) -> list[Any]:
    """A kernel's arguments in the contract's order: device arrays, the time step, the scalars by value."""
    out: list[Any] = []
    for p in task.params:
        if p.is_array:
            out.append(arrays[p.name])
        elif p.role is Role.STEP:
            out.append(np.int32(step))
        else:
            out.append(np.dtype(p.dtype).type(scalars[p.name]))
    return out


@dataclass
class _Kernel:
    function: Any
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


class ContractLauncher:
    """Launches a task's kernels in contract order, with the launch configuration the module defines."""

    def __init__(self, cuda: Any, task: Task, module: Any, symbols: Mapping[str, str] | None = None) -> None:
        """`symbols` maps a contract kernel to the symbol to launch (the tools' launcher finds mangled ones)."""
        self.task = task
        signature = "".join("i" if p.role is Role.STEP else "P" if p.is_array else _ARG_CODES[p.dtype]
                            for p in task.params)
        self.kernels: list[_Kernel] = []
        for k in task.kernels:
            try:
                fn = module.get_function((symbols or {}).get(k.name, k.name))
            except cuda.Error as exc:
                raise ContractError(f'kernel {k.name!r} is not in the module (define it extern "C"; expected: '
                                    f"{task.signature(k.name)}): {exc}") from None
            try:
                ptr, size = module.get_global(k.launch_symbol)
            except cuda.Error:
                raise ContractError(f'launch configuration {k.launch_symbol} is not in the module (define it as '
                                    f'extern "C" __constant__ int {k.launch_symbol}[6])') from None
            if size != 24:
                raise ContractError(f"{k.launch_symbol} has {size} bytes; it must be int[6] (24 bytes)")
            cfg = np.empty(6, dtype=np.int32)
            cuda.memcpy_dtoh(cfg, ptr)
            if (why := check_launch_config(k.name, cfg)) is not None:
                raise ContractError(why)
            fn.prepare(signature)
            self.kernels.append(_Kernel(fn, tuple(int(x) for x in cfg[:3]), tuple(int(x) for x in cfg[3:6])))  # type: ignore[arg-type]

    def __call__(self, stream: Any, buffers: Buffers) -> None:
        for step in range(self.task.repeat):
            args = buffers.args(step)
            for k in self.kernels:
                k.function.prepared_async_call(k.grid, k.block, stream, *args)


class Buffers:
    """Device arrays for one set of inputs; `reset` restores the state before a run. With `fenced`, the
    arrays are those (kept by the session, guarded; not freed here), else allocated plainly."""

    def __init__(self, cuda: Any, task: Task, inputs: Mapping[str, np.ndarray],
                 fenced: FencedArrays | None = None) -> None:
        self.cuda, self.task, self.inputs, self.fenced = cuda, task, inputs, fenced
        self.device: dict[str, Any] = {}
        if fenced is not None:
            self.device = dict(fenced.device)
            return
        for p in task.params:
            if p.is_array:
                nbytes = max(1, int(np.prod(task.shape(p.name))) * np.dtype(p.dtype).itemsize)
                self.device[p.name] = cuda.mem_alloc(nbytes)

    def reset(self) -> None:
        cuda = self.cuda
        for p in self.task.params:
            if p.role is Role.IN or p.role is Role.INOUT:
                cuda.memcpy_htod(self.device[p.name], self.inputs[p.name])
            elif p.role in (Role.OUT, Role.TEMP):
                words = int(np.prod(self.task.shape(p.name))) * np.dtype(p.dtype).itemsize // 4
                cuda.memset_d32(self.device[p.name], POISON_WORD[p.dtype], words)

    def args(self, step: int) -> list[Any]:
        return launch_args(self.task, self.device, self.inputs, step)

    def read(self, names: Sequence[str], stream: Any | None = None,
             pinned: Callable[[str, tuple[int, ...], str], np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Copy arrays to the host; with a stream, asynchronously on it into page-locked memory (the caller
        synchronizes it). `pinned(name, shape, dtype)` may lend reused page-locked arrays (the caller then
        copies them out before the next read); else each read allocates its own."""
        out: dict[str, np.ndarray] = {}
        for name in names:
            p = self.task.param(name)
            if stream is None:
                host = np.empty(self.task.shape(name), dtype=p.dtype)
                self.cuda.memcpy_dtoh(host, self.device[name])
            else:
                shape = self.task.shape(name)
                host = (pinned(name, shape, p.dtype) if pinned is not None
                        else self.cuda.pagelocked_empty(shape, dtype=p.dtype))
                self.cuda.memcpy_dtoh_async(host, self.device[name], stream)
            out[name] = host
        return out

    def free(self) -> None:
        if self.fenced is None:
            for mem in self.device.values():
                mem.free()
        self.device.clear()


Launch = Callable[[Any, Buffers], None]


@dataclass
class RunReading:
    outputs: dict[str, np.ndarray]  # read after the launch stream's sync, on a non-blocking stream
    outputs_after_device_sync: dict[str, np.ndarray]
    inputs_after: dict[str, np.ndarray]
    fence: str | None = None  # why the run wrote outside its arrays, or None


def audit(session: GpuSession, checker: bytes, own: FencedArrays | None, harness: bool) -> str | None:
    """After a run (the device synchronized): the guards of every fenced array the worker keeps (`own`'s
    named by array) and, with `harness`, the digests of the data timing keeps; why the run wrote outside
    its arrays, or None. Guards hit are poisoned again and written harness data is dropped (rebuilt from
    the host when next needed), so nothing after this candidate is charged for what it did."""
    began = time.monotonic()
    try:
        return _audit(session, checker, own, harness)
    finally:  # what the fences cost verification, summed per request (the reply's auditSeconds)
        session.audit_seconds = getattr(session, "audit_seconds", 0.0) + time.monotonic() - began


def _audit(session: GpuSession, checker: bytes, own: FencedArrays | None, harness: bool) -> str | None:
    regions, expected = session.resident_regions(own)
    if not harness:
        regions = [r for i, r in enumerate(regions) if i not in expected]
        expected = {}
    if not regions:
        return None
    host = session.pinned("audit", (len(regions), REGION_WORDS), "uint64")
    stream = session.cuda.Stream()
    session.auditor(checker).launch(regions, host, stream)
    stream.synchronize()
    found = read_findings(regions, np.array(host), expected, own.sizes if own is not None else None)
    if found.corrupted:
        session.drop_harness()
    if found.breaches:
        session.repoison()
    return found.reason() if found else None


def run_once(session: GpuSession, task: Task, launch: Launch, buffers: Buffers, checker: bytes = b"") -> RunReading:
    cuda = session.cuda
    buffers.reset()
    stream = cuda.Stream()
    copy_stream = cuda.Stream(flags=1)  # CU_STREAM_NON_BLOCKING: not ordered after other streams' work
    launch(stream, buffers)
    stream.synchronize()
    early = buffers.read(task.outputs, copy_stream, pinned=session.pinned)
    copy_stream.synchronize()
    early = {k: np.array(v) for k, v in early.items()}  # out of the lent page-locked arrays
    session.context.synchronize()
    late = buffers.read(task.outputs)
    ins = buffers.read([p.name for p in task.params if p.role is Role.IN])
    fence = audit(session, checker, buffers.fenced, harness=False) if checker and buffers.fenced else None
    return RunReading(early, late, ins, fence)


def verify_candidate(
    session: GpuSession, task: Task, launch: Launch, seeds: Sequence[int], tol: Tolerance,
    references: Callable[[int], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] | None = None,
    checker: bytes = b"",
) -> tuple[bool, str, float]:
    """(correct, reason, max abs error) over all seeds; stops at the first failed check. With `checker`
    (the trusted module holding the audit kernel), the arrays are fenced and audited after each run."""
    worst = 0.0
    for k, seed in enumerate(seeds):
        # Reasons name the input set by its place, never by its seed: a reason may reach a user or a
        # report, and the seeds of a run are its secret.
        which = f"input set {k + 1} of {len(seeds)}"
        inputs, want = references(seed) if references else _fresh(task, seed)
        bounds = {name: threshold(want[name], tol) for name in task.outputs}  # shared by both runs
        buffers = Buffers(session.cuda, task, inputs, session.fenced_arrays(task) if checker else None)
        try:
            first = run_once(session, task, launch, buffers, checker)
            if first.fence:  # its writes may have reached anything: no second run
                return False, f"{which}, first run: {first.fence}", worst
            second = run_once(session, task, launch, buffers, checker)
        finally:
            buffers.free()
        ins = {p.name: inputs[p.name] for p in task.params if p.role is Role.IN}
        seed_worst = 0.0
        for reading in (first, second):
            problem = (reading.fence or late_writes(reading.outputs, reading.outputs_after_device_sync)
                       or modified_inputs(ins, reading.inputs_after))
            for name in task.outputs:
                if problem:
                    break
                problem, err = check_output(name, reading.outputs[name], want[name], tol, bounds[name])
                if reading is first:
                    seed_worst = max(seed_worst, err)
            if problem:
                run = "first" if reading is first else "second"
                return False, f"{which}, {run} run: {problem}", worst
        if (problem := compare_runs(first.outputs, second.outputs, tol)) is not None:
            return False, f"{which}: {problem}", worst
        worst = max(worst, seed_worst)  # counted once the seed passed every check, as reported
    return True, f"correct on {len(seeds)} seeds, each run twice", worst


def _fresh(task: Task, seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    inputs = task.make_inputs(seed)
    return inputs, task.reference(inputs)


def resolve_task(name: str, sizes: Mapping[str, int] | None) -> Task:
    task = get_task(name)
    if sizes and dict(sizes) != dict(task.sizes):
        task = task.with_sizes(**sizes)
    return task


def handle_verify(session: GpuSession, request: dict[str, Any],
                  announce: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The worker's `verify` request: task, sizes, cubin, seeds, rtol, atol, keep (cache the module).

    The task's inputs and references for the seeds are made (or loaded) first, then `announce()` says the
    candidate's own work begins: the runner's time limit counts from there (worker.py), and the reply's
    `referenceSeconds` says how much of `seconds` went to the references rather than to the program."""
    started = time.monotonic()
    task = resolve_task(request["task"], request.get("sizes"))
    tol = tolerance_for(task, request.get("rtol"), request.get("atol"))
    for seed in request["seeds"]:
        session.reference_for(task, seed)
    reference_seconds = time.monotonic() - started
    announce()
    reply = _verify_ready(session, request, task, tol, started)
    reply["referenceSeconds"] = reference_seconds
    return reply


def _verify_ready(session: GpuSession, request: dict[str, Any], task: Task, tol: Tolerance,
                  started: float) -> dict[str, Any]:
    cuda = session.cuda
    try:
        module = session.module(request["cubin"]) if request.get("keep") else cuda.module_from_buffer(request["cubin"])
    except cuda.Error as exc:
        return {"ok": True, "correct": False, "stage": "load", "seconds": time.monotonic() - started,
                "reason": f"the module could not be loaded: {exc}", "sticky": not session.healthy()}
    checker = request.get("checker") or b""
    session.audit_seconds = 0.0
    if checker:
        # Before this candidate runs: anything found now was done earlier (by a program timed here, which
        # audits only its own task's data) and is repaired without blame, so this candidate is never charged.
        audit(session, checker, None, harness=True)
    try:
        launcher = ContractLauncher(cuda, task, module)
        correct, reason, worst = verify_candidate(session, task, launcher, request["seeds"], tol,
                                                  lambda seed: session.reference_for(task, seed), checker)
        # Timing's kept data once per request (its digests read tens of MB): nothing else ran here meanwhile,
        # so a change is this candidate's.
        if checker and (why := audit(session, checker, None, harness=True)):
            correct, reason = False, f"after its runs: {why}"
    except ContractError as exc:
        return {"ok": True, "correct": False, "stage": "contract", "reason": str(exc),
                "seconds": time.monotonic() - started}
    except cuda.Error as exc:
        sticky = not session.healthy()
        note = " (the CUDA context was lost; the worker restarts)" if sticky else ""
        return {"ok": True, "correct": False, "stage": "run", "sticky": sticky,
                "reason": f"the kernel failed at run time: {exc}{note}", "seconds": time.monotonic() - started}
    finally:
        del module
        gc.collect()  # unload a candidate's module now: it may hold large static device arrays
    return {"ok": True, "correct": correct, "stage": "verify", "reason": reason, "maxAbsError": worst,
            "tolerance": {"rtol": tol.rtol, "atol": tol.atol}, "seconds": time.monotonic() - started,
            "fences": session.fence_mode if request.get("checker") else "none", "auditSeconds": session.audit_seconds}
