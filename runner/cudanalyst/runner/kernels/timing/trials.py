"""Timing of several programs of one task against each other, in one request, inside a GPU worker.

Timing measures the work that verification checked (docs/kernel-evaluation.md, "Timing"):
- Every timed launch starts from the state a verified launch starts from: the in and in/out arrays are
  restored from a device copy of one correctness seed's inputs, outputs and temps are prefilled with
  NaN, every variable the module can write (`cubin_globals.py`) is reset to its load-time value, and
  the L2 is flushed. All of it happens outside the timed region (before the start event).
- Each program is loaded afresh for the request: nothing a verification or an earlier request left in
  a module is seen.
- The outputs of every timed launch are checked against the seed's reference on the GPU (`checker.py`,
  microseconds a check, outside the timed region), so a program that skips its work on some launches,
  by counting them or at random (the GPU's clock), is caught on the first one it skips. Checking only two
  (the last and a random one) let a program that skips each launch with probability p through with
  probability (1 - p)^2. Warm-up launches come in a random number, from the operating system's randomness.
- Every launch (warm-up and timed) is audited on the GPU (fences.py): the guards around the live arrays
  and the digests of the harness's data (the pristine inputs, the expected outputs, the snapshots of the
  programs' variables). The first launch after which something changed names its program, which is refused
  (`problem`); the task data is rebuilt from the host and the others are timed again without it, so no
  program is charged for another's writes. The kept task data is also audited before each request uses it.
- Timing runs on its own seeds (requests.Seeds.timing), none of them a verification seed: a kernel that
  recognises the verification inputs and writes stored answers is wrong here.
- The device heap (malloc in a kernel) outlives every reset above; a program that calls it is refused
  before it runs (stage.py).
- The programs take turns: each round times every program once, in a fresh random order, on the same
  seed's inputs (seeds rotate from round to round). A frozen program and its candidates are therefore
  timed by the same worker, in the same launch sequence and the same state of the GPU; the difference
  of two runs of the same code is timing noise, never a change of conditions between requests.
- A sequence of several launches (time steps) is captured once in a CUDA graph and replayed, so the
  host's launch gaps (microseconds each, as long as a short kernel) are not measured. A single launch
  is timed as it is.

- A candidate whose warm-up launches show it far slower than every reference (too_slow) is not timed further:
  it cannot be fast, and its trials would only hold the GPU. References are always timed.

The median of a program's trials is its figure; the spread (IQR / median, CV) comes with it.
"""

from __future__ import annotations

import ctypes
import random
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cudanalyst.runner.kernels.compile.cubin_globals import CubinFormatError, writable_variables
from cudanalyst.runner.kernels.verify.checker import (
    CHECKER_ARGS,
    RESULT_WORDS,
    checker_function,
    first_index,
    launch_shape,
    mask,
)
from cudanalyst.runner.kernels.verify.correctness import (
    POISON_WORD,
    ContractError,
    ContractLauncher,
    launch_args,
    resolve_task,
    tolerance_for,
)
from cudanalyst.runner.kernels.verify.fences import (
    DIGEST,
    REGION_WORDS,
    Auditor,
    FencedArrays,
    Region,
    read_findings,
    round_up,
)
from cudanalyst.runner.kernels.workers.requests import CompareRequest
from cudanalyst.tasks.base import Role, Task

if TYPE_CHECKING:
    from cudanalyst.runner.kernels.workers.session import GpuSession

EXTRA_WARMUP = 4  # up to this many more warm-up launches, drawn at random per program


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    iqr_over_median: float
    cv: float  # standard deviation / mean
    trials: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def timing_stats(times_ms: Sequence[float]) -> TimingStats:
    """Order statistics and spread of per-trial times (pure)."""
    if not times_ms:
        raise ValueError("no timings to summarize")
    arr = np.asarray(times_ms, dtype=np.float64)
    q1, med, q3 = (float(x) for x in np.percentile(arr, [25, 50, 75]))
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return TimingStats(
        median_ms=med, mean_ms=mean, min_ms=float(arr.min()), max_ms=float(arr.max()), q1_ms=q1, q3_ms=q3,
        iqr_over_median=(q3 - q1) / med if med > 0 else float("inf"), cv=std / mean if mean > 0 else float("inf"),
        trials=int(arr.size),
    )


def speedup(reference_ms: float | None, candidate_ms: float | None) -> float | None:
    """reference time / candidate time; None when either is missing or not positive."""
    if not reference_ms or not candidate_ms or reference_ms <= 0 or candidate_ms <= 0:
        return None
    return reference_ms / candidate_ms


# ---- the order of launches (pure) -------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """Which program runs when: warm-up launches per program, then `rounds` of every program once."""

    warmups: dict[str, int]
    rounds: list[list[str]]  # the programs' order in each timed round
    checked: dict[str, frozenset[int]]  # per program, the timed trials (round indices) whose outputs are checked: all
    seed_offset: int  # round r runs on seed (seed_offset + r) mod the number of seeds


def make_schedule(names: Sequence[str], trials: int, warmup: int, rng: random.Random) -> Schedule:
    """A random schedule: `rng` should be one a program cannot predict (random.SystemRandom)."""
    if trials < 1:
        raise ValueError(f"timing needs at least one trial, got {trials}")
    rounds = []
    for _ in range(trials):
        order = list(names)
        rng.shuffle(order)
        rounds.append(order)
    checked = {n: frozenset(range(trials)) for n in names}
    return Schedule(warmups={n: max(0, warmup) + rng.randrange(EXTRA_WARMUP + 1) for n in names},
                    rounds=rounds, checked=checked, seed_offset=rng.randrange(1 << 16))


# ---- CUDA graphs (the driver's API; pycuda does not wrap it) ----------------------------------------------


class _GraphApi:
    """cuStreamBeginCapture / EndCapture / GraphInstantiate / GraphLaunch through ctypes."""

    RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED

    def __init__(self) -> None:
        lib = ctypes.CDLL("libcuda.so.1")
        vp = ctypes.c_void_p
        self.begin = self._first(lib, "cuStreamBeginCapture_v2", "cuStreamBeginCapture")
        self.begin.argtypes = [vp, ctypes.c_int]
        self.end = lib.cuStreamEndCapture
        self.end.argtypes = [vp, ctypes.POINTER(vp)]
        self.instantiate = lib.cuGraphInstantiateWithFlags
        self.instantiate.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
        self.launch = lib.cuGraphLaunch
        self.launch.argtypes = [vp, vp]
        self.destroy_exec = lib.cuGraphExecDestroy
        self.destroy_exec.argtypes = [vp]
        self.destroy_graph = lib.cuGraphDestroy
        self.destroy_graph.argtypes = [vp]

    @staticmethod
    def _first(lib: Any, *names: str) -> Any:
        for name in names:
            if hasattr(lib, name):
                return getattr(lib, name)
        raise OSError(f"the CUDA driver exports none of {names}")

    @staticmethod
    def check(code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what} failed with CUDA driver error {code}")


_GRAPHS: list[_GraphApi | None] = []


def graph_api() -> _GraphApi | None:
    if not _GRAPHS:
        try:
            _GRAPHS.append(_GraphApi())
        except (OSError, AttributeError):
            _GRAPHS.append(None)
    return _GRAPHS[0]


class Graph:
    """A captured launch sequence; `launch(stream)` replays it."""

    def __init__(self, api: _GraphApi, stream: Any, record: Any) -> None:
        self.api = api
        handle = ctypes.c_void_p(stream.handle)
        api.check(api.begin(handle, api.RELAXED), "cuStreamBeginCapture")
        graph = ctypes.c_void_p()
        try:
            record(stream)
        finally:
            api.check(api.end(handle, ctypes.byref(graph)), "cuStreamEndCapture")
        self.graph = graph
        self.exec = ctypes.c_void_p()
        api.check(api.instantiate(ctypes.byref(self.exec), graph, 0), "cuGraphInstantiate")

    def launch(self, stream: Any) -> None:
        self.api.check(self.api.launch(self.exec, ctypes.c_void_p(stream.handle)), "cuGraphLaunch")

    def close(self) -> None:
        if self.exec:
            self.api.destroy_exec(self.exec)
            self.exec = ctypes.c_void_p()
        if self.graph:
            self.api.destroy_graph(self.graph)
            self.graph = ctypes.c_void_p()


# ---- the task's data on the device ---------------------------------------------------------------------


class TaskData:
    """One task's timing data, kept by the worker between requests: per seed, a pristine device copy of the
    inputs and the expected outputs (harness data: digested, `regions` / `digests`); the live arrays every
    program runs on (fenced); the scalars per seed."""

    def __init__(self, session: GpuSession, task: Task, seeds: Sequence[int], auditor: Auditor) -> None:
        cuda = session.cuda
        self.cuda, self.task, self.seeds = cuda, task, list(seeds)
        self.arrays = [p for p in task.params if p.is_array]
        self.live = FencedArrays(cuda, session.allocator, {p.name: self.nbytes(p.name) for p in self.arrays},
                                 f"{task.name} (timing)")
        self.pristine: list[dict[str, Any]] = []
        self.want: list[dict[str, Any]] = []
        self.scalars: list[dict[str, np.ndarray]] = []
        self.regions: list[Region] = []
        self.mask_key = secrets.randbits(64)  # the expected outputs are kept masked (checker.mask)
        for seed in self.seeds:
            inputs, want = session.reference_for(task, seed)
            self.pristine.append({p.name: cuda.to_device(np.ascontiguousarray(inputs[p.name]))
                                  for p in self.arrays if p.role in (Role.IN, Role.INOUT)})
            self.want.append({name: cuda.to_device(mask(want[name], self.mask_key)) for name in task.outputs})
            self.scalars.append({p.name: inputs[p.name] for p in task.params if p.role is Role.SCALAR})
            s = len(self.pristine) - 1
            self.regions += [Region(int(m), self.nbytes(n) // 4, DIGEST, what=f"the kept input {n} of timing seed {s + 1}")
                             for n, m in self.pristine[-1].items()]
            self.regions += [Region(int(m), self.nbytes(n) // 4, DIGEST, what=f"the expected output {n} of timing seed {s + 1}")
                             for n, m in self.want[-1].items()]
        stream = cuda.Stream()
        found = auditor.digests(self.regions, stream)  # trusted: no candidate has run since the upload
        self.digests = [found[i] for i in range(len(self.regions))]

    def nbytes(self, name: str) -> int:
        p = self.task.param(name)
        return max(4, int(np.prod(self.task.shape(name))) * np.dtype(p.dtype).itemsize)

    def args(self, seed_index: int, step: int) -> list[Any]:
        return launch_args(self.task, self.live.device, self.scalars[seed_index], step)

    def prepare_async(self, seed_index: int, stream: Any) -> None:
        """In and in/out arrays from the seed's pristine copy, outputs and temps to NaN."""
        cuda = self.cuda
        for p in self.arrays:
            live = self.live.device[p.name]
            if p.role in (Role.IN, Role.INOUT):
                cuda.memcpy_dtod_async(live, self.pristine[seed_index][p.name], self.nbytes(p.name), stream)
            else:
                cuda.memset_d32_async(live, POISON_WORD[p.dtype], self.nbytes(p.name) // 4, stream)

    def intact(self, auditor: Auditor) -> bool:
        """Whether the kept data and the live arrays' guards are as made (asked before a request uses them)."""
        regions = self.regions + self.live.guards
        host = self.cuda.pagelocked_zeros((len(regions), REGION_WORDS), dtype=np.uint64)
        stream = self.cuda.Stream()
        auditor.launch(regions, host, stream)
        stream.synchronize()
        return not read_findings(regions, host, dict(enumerate(self.digests)))

    def free(self) -> None:
        self.live.free()
        for mem in (m for d in (*self.pristine, *self.want) for m in d.values()):
            mem.free()
        self.pristine.clear()
        self.want.clear()


# ---- one program --------------------------------------------------------------------------------------


class Program:
    """A freshly loaded module with its launch sequence and the snapshot of its writable variables."""

    def __init__(self, session: GpuSession, data: TaskData, name: str, cubin: bytes) -> None:
        cuda = session.cuda
        self.cuda, self.data, self.name, self.cubin = cuda, data, name, cubin
        self.module = cuda.module_from_buffer(cubin)
        self.launcher = ContractLauncher(cuda, data.task, self.module)
        self.graphs: dict[int, Graph] = {}
        self._graph_api: _GraphApi | None = None
        self.variables: list[tuple[Any, Any, int]] = []  # (address, snapshot, bytes)
        self.reload_each_trial = False
        try:
            found = writable_variables(cubin)
        except CubinFormatError:
            found, self.reload_each_trial = [], True
        for var in found:
            try:
                address, size = self.module.get_global(var.name)
            except cuda.Error:
                self.reload_each_trial = True  # a variable we cannot address: a fresh module per trial instead
                continue
            if size > 0:
                snapshot = cuda.mem_alloc(round_up(size, 4))  # whole words, so the audit digests all of it
                cuda.memset_d32(snapshot, 0, round_up(size, 4) // 4)
                cuda.memcpy_dtod(snapshot, address, size)
                self.variables.append((address, snapshot, size))

    def reset_async(self, stream: Any) -> None:
        """Every writable variable back to its load-time value (or, where one cannot be addressed, a new
        module: loading is synchronous and happens before the trial's events, so it is not timed)."""
        if self.reload_each_trial:
            api = self._graph_api
            self.close_graphs()
            self.module = self.cuda.module_from_buffer(self.cubin)
            self.launcher = ContractLauncher(self.cuda, self.data.task, self.module)
            if api is not None:  # launched like the other programs: from a graph of the new module
                self.capture(api, stream)
            return
        for address, snapshot, size in self.variables:
            self.cuda.memcpy_dtod_async(address, snapshot, size, stream)

    def regions(self) -> list[Region]:
        """The snapshots of this program's variables: harness data (a rival could rewrite them)."""
        return [Region(int(snapshot), round_up(size, 4) // 4, DIGEST, what=f"the snapshot of {self.name}'s variables")
                for _, snapshot, size in self.variables]

    def _record(self, seed_index: int, stream: Any) -> None:
        task = self.data.task
        for step in range(task.repeat):
            args = self.data.args(seed_index, step)
            for k in self.launcher.kernels:
                k.function.prepared_async_call(k.grid, k.block, stream, *args)

    @property
    def launches(self) -> int:
        return self.data.task.repeat * len(self.launcher.kernels)

    def capture(self, api: _GraphApi, stream: Any) -> None:
        """A graph per seed (scalars are baked into a graph)."""
        self._graph_api = api
        for s in range(len(self.data.seeds)):
            self.graphs[s] = Graph(api, stream, lambda st, s=s: self._record(s, st))

    def launch(self, seed_index: int, stream: Any) -> None:
        graph = self.graphs.get(seed_index)
        if graph is not None:
            graph.launch(stream)
        else:
            self._record(seed_index, stream)

    def close_graphs(self) -> None:
        for g in self.graphs.values():
            g.close()
        self.graphs.clear()
        self._graph_api = None

    def close(self) -> None:
        self.close_graphs()
        for _, snapshot, _ in self.variables:
            snapshot.free()
        self.variables.clear()


# ---- the request ------------------------------------------------------------------------------------------


def _task_data(session: GpuSession, task: Task, seeds: Sequence[int], auditor: Auditor) -> TaskData:
    """The worker keeps a few tasks' data between requests (made from the pool's shared references); kept
    data is audited before it is used and made again if anything wrote it since."""
    cache: OrderedDict[Any, TaskData] = session.__dict__.setdefault("_timing_data", OrderedDict())
    key = (task.name, tuple(sorted(task.sizes.items())), tuple(seeds))
    if key in cache and not cache[key].intact(auditor):
        cache.pop(key).free()
        session.__dict__["_rebuilt"] = session.__dict__.get("_rebuilt", 0) + 1
    if key not in cache:
        cache[key] = TaskData(session, task, seeds, auditor)
        session.__dict__["_made"] = session.__dict__.get("_made", 0) + 1
        while len(cache) > 6:
            cache.popitem(last=False)[1].free()
    cache.move_to_end(key)
    return cache[key]


def _problem(task: Task, name: str, trial: int, trials: int, result: Sequence[int], tol: Any) -> str | None:
    """Why a checked timed launch's output `name` is wrong, from the checker's counts; None when right."""
    bad, nan, stored = (int(x) for x in result)
    if bad == 0:
        return None
    first = first_index(stored)
    shape = task.shape(name)
    where = [int(i) for i in np.unravel_index(first, shape)] if shape else []
    unwritten = f", {nan} of them NaN (never written in that launch)" if nan else ""
    return (f"the outputs of timed launch {trial + 1} of {trials} differ from the reference: output {name}: "
            f"{bad} of {int(np.prod(shape))} elements beyond rtol={tol.rtol:g}, atol={tol.atol:g}{unwritten}; "
            f"first at {where}. Timing did not measure the work verification checked")


def blame(launches: Sequence[tuple[str, str]], findings: Sequence[Any]) -> dict[str, str]:
    """Per program, why it is refused: the first of its launches after which an audit found something
    (`launches[i]` = (program, which launch), `findings[i]` its audit's Findings). Harness data written by
    one launch stays changed in every later audit, so only the first launch that changed it is blamed (pure)."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for (name, which), found in zip(launches, findings, strict=True):
        fresh = [c for c in found.corrupted if c not in seen]
        seen.update(found.corrupted)
        if name in out or not (found.breaches or fresh):
            continue
        parts = list(found.breaches)
        if fresh:
            parts.append("wrote outside its arrays into the harness's own data (" + ", ".join(fresh) + ")")
        out[name] = f"{which}: " + "; ".join(parts)
    return out


def too_slow(warmups_ms: dict[str, Sequence[float]], references: Sequence[str],
             factor: float) -> dict[str, dict[str, float]]:
    """The programs, not references, whose fastest warm-up launch took more than `factor` times the slowest
    warm-up launch of any reference after its first: they cannot be fast against either reference, so their
    timed trials would only hold the GPU (on the H200, 3 candidates 87x to 3,600x slower than their reference took
    about 23 of a run's about 32 s of launches). The first launch of a reference is left out (it may load the module
    lazily); a program or reference with fewer than 2 warm-up launches is always timed (pure)."""
    refs = [warmups_ms[r] for r in references if r in warmups_ms]
    if factor <= 0 or not refs or any(len(w) < 2 for w in refs):
        return {}
    ceiling = max(max(w[1:]) for w in refs)
    return {name: {"warmupMs": min(w), "referenceMs": ceiling, "factor": factor, "launches": len(w)}
            for name, w in warmups_ms.items()
            if name not in references and len(w) >= 2 and min(w) > factor * ceiling}


def handle_compare(session: GpuSession, wire: dict[str, Any]) -> dict[str, Any]:
    """The worker's `compare` request (requests.CompareRequest): per program, its times or why not.

    A program whose launch wrote outside its arrays is refused; the task data is made again and the others
    are timed again without it (at most once per program), so none of them is charged for its writes."""
    started = time.monotonic()
    request = CompareRequest.from_wire(wire)
    task = resolve_task(request.task, request.sizes)
    tol = tolerance_for(task, request.rtol, request.atol)
    checker = session.module(request.checker)  # trusted and unchanging: kept loaded
    auditor = session.auditor(request.checker)
    check = {}
    for out in task.outputs:
        dtype = task.param(out).dtype
        if dtype not in check:
            check[dtype] = checker.get_function(checker_function(dtype))
            check[dtype].prepare(CHECKER_ARGS)

    replies: dict[str, dict[str, Any]] = {}
    refused: dict[str, str] = {}
    reruns = 0
    session.audit_seconds = 0.0
    prepared = started
    while True:
        data = _task_data(session, task, request.seeds, auditor)
        todo = [p for p in request.programs if p.name not in refused and p.name not in replies]
        attempt, culprits, prepared = _attempt(session, data, task, tol, request, todo, check, auditor, started)
        if not culprits:
            replies.update(attempt)
            break
        refused.update(culprits)
        for name, why in culprits.items():
            replies[name] = {"ok": True, "problem": why, "fences": session.fence_mode}
        cache = session.__dict__.get("_timing_data", {})
        for key in [k for k, v in cache.items() if v is data]:
            cache.pop(key).free()  # rebuilt from the host: nothing the culprit wrote is used again
        session.repoison()
        reruns += 1
    return {"ok": True, "programs": replies, "seconds": time.monotonic() - started,
            "prepSeconds": prepared - started, "l2FlushBytes": session.flush_buffer()[1] * 4,
            "trials": request.trials, "fences": session.fence_mode, "fenceReruns": reruns,
            "auditSeconds": session.audit_seconds,
            "rebuiltTaskData": session.__dict__.pop("_rebuilt", 0), "madeTaskData": session.__dict__.pop("_made", 0)}


def _attempt(session: GpuSession, data: TaskData, task: Task, tol: Any, request: CompareRequest,
             todo: Sequence[Any], check: dict[str, Any], auditor: Auditor,
             started: float) -> tuple[dict[str, dict[str, Any]], dict[str, str], float]:
    """One try at timing `todo`: (replies, culprits, when preparation ended)."""
    cuda = session.cuda
    replies: dict[str, dict[str, Any]] = {}
    programs: dict[str, Program] = {}
    stream = cuda.Stream()
    try:
        for p in todo:
            try:
                programs[p.name] = Program(session, data, p.name, p.cubin)
            except (cuda.Error, ContractError) as exc:
                replies[p.name] = {"ok": False, "kind": "load", "error": f"cannot time: {exc}"}
        api = graph_api() if request.graphs else None
        use_graphs = api is not None and any(p.launches > 1 for p in programs.values())
        if use_graphs:
            try:
                for program in programs.values():
                    program.capture(api, stream)  # type: ignore[arg-type]
                stream.synchronize()
            except Exception:  # noqa: BLE001 - no graphs then, for any reason: the launches as they are
                for program in programs.values():  # all or none: the programs are compared alike
                    program.close_graphs()
                use_graphs = False
        snapshots = [r for program in programs.values() for r in program.regions()]
        snapshot_digests = auditor.digests(snapshots, stream)  # before any of them ran
        prepared = time.monotonic()
        times, checks, culprits, slow = _run(session, data, programs, request, check, stream, auditor,
                                             (snapshots, snapshot_digests))
        if culprits:
            return replies, culprits, prepared
        for name, why in slow.items():  # warmed up, audited, never timed: it cannot be fast
            replies[name] = {"ok": True, "slow": why, "problem": None, "fences": session.fence_mode}
        for name, program in programs.items():
            if name in slow:
                continue
            problems = [why for trial, result in checks[name]
                        for out, res in zip(task.outputs, result, strict=True)
                        if (why := _problem(task, out, trial, request.trials, res, tol))]
            stats = timing_stats(times[name])
            replies[name] = {"ok": True, "stats": stats.to_dict(), "timesMs": times[name],
                             "checked": sorted(t + 1 for t, _ in checks[name]), "problem": problems[0] if problems else None,
                             "graph": use_graphs and program.launches > 1, "fences": session.fence_mode,
                             "resetVariables": len(program.variables), "reloadEachTrial": program.reload_each_trial}
    finally:
        for program in programs.values():
            program.close()
    return replies, {}, prepared


def _run(session: GpuSession, data: TaskData, programs: dict[str, Program], request: CompareRequest,
         check: dict[str, Any], stream: Any, auditor: Auditor, snapshots: tuple[list[Region], dict[int, int]],
         ) -> tuple[dict[str, list[float]], dict[str, list[tuple[int, list[list[int]]]]], dict[str, str],
                    dict[str, dict[str, float]]]:
    """Warm-up, then the interleaved timed rounds, every launch audited; returns per program its trial times
    and checks, the programs whose launches wrote outside their arrays (with why), and those too slow after
    their warm-up to be timed (too_slow: no trials, no times)."""
    cuda, task = session.cuda, data.task
    schedule = make_schedule(list(programs), request.trials, request.warmup, random.SystemRandom())
    flush, words = session.flush_buffer()
    n_seeds = len(data.seeds)
    outputs = task.outputs
    tol = tolerance_for(task, request.rtol, request.atol)
    # What every audit reads: the live arrays' guards, the task data, the programs' variable snapshots.
    regions = list(data.live.guards) + data.regions + snapshots[0]
    shift = len(data.live.guards)
    expected = {shift + i: d for i, d in enumerate(data.digests)}
    expected.update({shift + len(data.regions) + i: d for i, d in snapshots[1].items()})
    n_launches = sum(schedule.warmups.values()) + request.trials * len(programs)
    audits = cuda.pagelocked_zeros((max(1, n_launches), len(regions), REGION_WORDS), dtype=np.uint64)
    n_checks = sum(len(c) for c in schedule.checked.values())
    # Each check's counts go to a slot zeroed right before it and copied out right after, so no later
    # launch can change what an earlier check found (or frame another program).
    slot = cuda.mem_alloc(max(1, len(outputs)) * RESULT_WORDS * 8)
    host = cuda.pagelocked_zeros((max(1, n_checks), len(outputs), RESULT_WORDS), dtype=np.uint64)
    launches: list[tuple[str, str]] = []

    def trial(program: Program, seed_index: int, marker: int) -> None:
        data.prepare_async(seed_index, stream)
        program.reset_async(stream)
        cuda.memset_d32_async(flush, marker, words, stream)  # a different value each time: real writes

    def audit(name: str, which: str) -> None:
        auditor.launch(regions, audits[len(launches)], stream)
        launches.append((name, which))

    measure_warmups = request.slow_factor > 0 and bool(request.references)  # else the warm-ups are not timed
    warm: dict[str, list[tuple[Any, Any]]] = {name: [] for name in programs}
    for name, program in programs.items():
        for w in range(schedule.warmups[name]):
            trial(program, (schedule.seed_offset + w) % n_seeds, w)
            if measure_warmups:
                begin, done = cuda.Event(), cuda.Event()
                begin.record(stream)
                warm[name].append((begin, done))
            program.launch((schedule.seed_offset + w) % n_seeds, stream)
            if measure_warmups:
                done.record(stream)
            audit(name, f"warm-up launch {w + 1}")
    slow: dict[str, dict[str, float]] = {}
    if measure_warmups:
        stream.synchronize()  # the warm-ups' times decide which programs are timed at all
        slow = too_slow({name: [done.time_since(begin) for begin, done in pairs] for name, pairs in warm.items()},
                        request.references, request.slow_factor)
    events = {name: [(cuda.Event(), cuda.Event()) for _ in range(request.trials)] for name in programs}
    slots: dict[str, list[tuple[int, int]]] = {name: [] for name in programs}
    n = 0
    for r, order in enumerate(schedule.rounds):
        seed_index = (schedule.seed_offset + r) % n_seeds
        for name in order:
            if name in slow:
                continue
            program = programs[name]
            trial(program, seed_index, r)
            start, end = events[name][r]
            start.record(stream)
            program.launch(seed_index, stream)
            end.record(stream)
            if r in schedule.checked[name]:
                cuda.memset_d32_async(slot, 0, max(1, len(outputs)) * RESULT_WORDS * 2, stream)
                for o, out in enumerate(outputs):
                    size = int(np.prod(task.shape(out)))
                    grid, block = launch_shape(size)
                    check[task.param(out).dtype].prepared_async_call(
                        grid, block, stream, data.live.device[out], data.want[seed_index][out], np.uint64(size),
                        np.float64(tol.rtol), np.float64(tol.atol), np.uint64(data.mask_key),
                        int(slot) + o * RESULT_WORDS * 8)
                cuda.memcpy_dtoh_async(host[n], slot, stream)
                slots[name].append((r, n))
                n += 1
            audit(name, f"timed launch {r + 1} of {request.trials}")
    stream.synchronize()
    slot.free()
    found = [read_findings(regions, audits[i], expected, data.live.sizes) for i in range(len(launches))]
    # What the audits cost the GPU: one more, timed alone (into a row already read), times the number made.
    start, end = cuda.Event(), cuda.Event()
    start.record(stream)
    auditor.launch(regions, audits[0], stream)
    end.record(stream)
    end.synchronize()
    session.audit_seconds = getattr(session, "audit_seconds", 0.0) + end.time_since(start) / 1e3 * len(launches)
    culprits = blame(launches, found)
    times = {name: [end.time_since(start) for start, end in events[name]] for name in programs if name not in slow}
    checks = {name: [(r, host[s].tolist()) for r, s in slots[name]] for name in programs}
    return times, checks, culprits, slow
