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
- The device heap (malloc in a kernel) outlives every reset above; a program that calls it is refused
  before it runs (stage.py).
- The programs take turns: each round times every program once, in a fresh random order, on the same
  seed's inputs (seeds rotate from round to round). A frozen program and its candidates are therefore
  timed by the same worker, in the same launch sequence and the same state of the GPU; the difference
  of two runs of the same code is timing noise, never a change of conditions between requests.
- A sequence of several launches (time steps) is captured once in a CUDA graph and replayed, so the
  host's launch gaps (microseconds each, as long as a short kernel) are not measured. A single launch
  is timed as it is.

The median of a program's trials is its figure; the spread (IQR / median, CV) comes with it.
"""

from __future__ import annotations

import ctypes
import random
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cudanalyst.runner.kernels.compile.cubin_globals import CubinFormatError, writable_variables
from cudanalyst.runner.kernels.verify.checker import RESULT_WORDS, checker_function, launch_shape
from cudanalyst.runner.kernels.verify.correctness import (
    POISON_WORD,
    ContractError,
    ContractLauncher,
    launch_args,
    resolve_task,
    tolerance_for,
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
    inputs and the expected outputs; the live arrays every program runs on; the scalars per seed."""

    def __init__(self, session: GpuSession, task: Task, seeds: Sequence[int]) -> None:
        cuda = session.cuda
        self.cuda, self.task, self.seeds = cuda, task, list(seeds)
        self.arrays = [p for p in task.params if p.is_array]
        self.live = {p.name: cuda.mem_alloc(self.nbytes(p.name)) for p in self.arrays}
        self.pristine: list[dict[str, Any]] = []
        self.want: list[dict[str, Any]] = []
        self.scalars: list[dict[str, np.ndarray]] = []
        for seed in self.seeds:
            inputs, want = session.reference_for(task, seed)
            self.pristine.append({p.name: cuda.to_device(np.ascontiguousarray(inputs[p.name]))
                                  for p in self.arrays if p.role in (Role.IN, Role.INOUT)})
            self.want.append({name: cuda.to_device(np.ascontiguousarray(want[name])) for name in task.outputs})
            self.scalars.append({p.name: inputs[p.name] for p in task.params if p.role is Role.SCALAR})

    def nbytes(self, name: str) -> int:
        p = self.task.param(name)
        return max(4, int(np.prod(self.task.shape(name))) * np.dtype(p.dtype).itemsize)

    def args(self, seed_index: int, step: int) -> list[Any]:
        return launch_args(self.task, self.live, self.scalars[seed_index], step)

    def prepare_async(self, seed_index: int, stream: Any) -> None:
        """In and in/out arrays from the seed's pristine copy, outputs and temps to NaN."""
        cuda = self.cuda
        for p in self.arrays:
            if p.role in (Role.IN, Role.INOUT):
                cuda.memcpy_dtod_async(self.live[p.name], self.pristine[seed_index][p.name], self.nbytes(p.name), stream)
            else:
                cuda.memset_d32_async(self.live[p.name], POISON_WORD[p.dtype], self.nbytes(p.name) // 4, stream)

    def free(self) -> None:
        for mem in (*self.live.values(), *(m for d in (*self.pristine, *self.want) for m in d.values())):
            mem.free()
        self.live.clear()
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
                snapshot = cuda.mem_alloc(size)
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


def _task_data(session: GpuSession, task: Task, seeds: Sequence[int]) -> TaskData:
    """The worker keeps a few tasks' data between requests (made from the pool's shared references)."""
    cache: OrderedDict[Any, TaskData] = session.__dict__.setdefault("_timing_data", OrderedDict())
    key = (task.name, tuple(sorted(task.sizes.items())), tuple(seeds))
    if key not in cache:
        cache[key] = TaskData(session, task, seeds)
        while len(cache) > 6:
            cache.popitem(last=False)[1].free()
    cache.move_to_end(key)
    return cache[key]


def _problem(task: Task, name: str, trial: int, trials: int, result: Sequence[int], tol: Any) -> str | None:
    """Why a checked timed launch's output `name` is wrong, from the checker's counts; None when right."""
    bad, nan, first = (int(x) for x in result)
    if bad == 0:
        return None
    shape = task.shape(name)
    where = [int(i) for i in np.unravel_index(first, shape)] if shape else []
    unwritten = f", {nan} of them NaN (never written in that launch)" if nan else ""
    return (f"the outputs of timed launch {trial + 1} of {trials} differ from the reference: output {name}: "
            f"{bad} of {int(np.prod(shape))} elements beyond rtol={tol.rtol:g}, atol={tol.atol:g}{unwritten}; "
            f"first at {where}. Timing did not measure the work verification checked")


def handle_compare(session: GpuSession, wire: dict[str, Any]) -> dict[str, Any]:
    """The worker's `compare` request (requests.CompareRequest): per program, its times or why not."""
    started = time.monotonic()
    request = CompareRequest.from_wire(wire)
    task = resolve_task(request.task, request.sizes)
    tol = tolerance_for(task, request.rtol, request.atol)
    cuda = session.cuda
    data = _task_data(session, task, request.seeds)
    checker = session.module(request.checker)  # trusted and unchanging: kept loaded
    check = {}
    for out in task.outputs:
        dtype = task.param(out).dtype
        if dtype not in check:
            check[dtype] = checker.get_function(checker_function(dtype))
            check[dtype].prepare("PPQddP")

    replies: dict[str, dict[str, Any]] = {}
    programs: dict[str, Program] = {}
    stream = cuda.Stream()
    try:
        for p in request.programs:
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
        prepared = time.monotonic()
        times, checks = _run(session, data, programs, request, check, stream)
        for name, program in programs.items():
            problems = [why for trial, result in checks[name]
                        for out, res in zip(task.outputs, result, strict=True)
                        if (why := _problem(task, out, trial, request.trials, res, tol))]
            stats = timing_stats(times[name])
            replies[name] = {"ok": True, "stats": stats.to_dict(), "timesMs": times[name],
                             "checked": sorted(t + 1 for t, _ in checks[name]), "problem": problems[0] if problems else None,
                             "graph": use_graphs and program.launches > 1,
                             "resetVariables": len(program.variables), "reloadEachTrial": program.reload_each_trial}
    finally:
        for program in programs.values():
            program.close()
    return {"ok": True, "programs": replies, "seconds": time.monotonic() - started,
            "prepSeconds": prepared - started, "l2FlushBytes": session.flush_buffer()[1] * 4,
            "trials": request.trials}


def _run(session: GpuSession, data: TaskData, programs: dict[str, Program], request: CompareRequest,
         check: dict[str, Any], stream: Any) -> tuple[dict[str, list[float]], dict[str, list[tuple[int, list[list[int]]]]]]:
    """Warm-up, then the interleaved timed rounds; returns per program its trial times and checks."""
    cuda, task = session.cuda, data.task
    schedule = make_schedule(list(programs), request.trials, request.warmup, random.SystemRandom())
    flush, words = session.flush_buffer()
    n_seeds = len(data.seeds)
    outputs = task.outputs
    n_checks = sum(len(c) for c in schedule.checked.values())
    results = cuda.mem_alloc(max(1, n_checks * len(outputs)) * RESULT_WORDS * 8)
    host = np.zeros((max(1, n_checks), len(outputs), RESULT_WORDS), dtype=np.uint64)
    host[..., 2] = np.iinfo(np.uint64).max
    cuda.memcpy_htod(results, host)
    tol = tolerance_for(task, request.rtol, request.atol)

    def trial(program: Program, seed_index: int, marker: int) -> None:
        data.prepare_async(seed_index, stream)
        program.reset_async(stream)
        cuda.memset_d32_async(flush, marker, words, stream)  # a different value each time: real writes

    for name, program in programs.items():
        for w in range(schedule.warmups[name]):
            trial(program, (schedule.seed_offset + w) % n_seeds, w)
            program.launch((schedule.seed_offset + w) % n_seeds, stream)
    events = {name: [(cuda.Event(), cuda.Event()) for _ in range(request.trials)] for name in programs}
    slots: dict[str, list[tuple[int, int]]] = {name: [] for name in programs}
    slot = 0
    for r, order in enumerate(schedule.rounds):
        seed_index = (schedule.seed_offset + r) % n_seeds
        for name in order:
            program = programs[name]
            trial(program, seed_index, r)
            start, end = events[name][r]
            start.record(stream)
            program.launch(seed_index, stream)
            end.record(stream)
            if r in schedule.checked[name]:
                for o, out in enumerate(outputs):
                    n = int(np.prod(task.shape(out)))
                    grid, block = launch_shape(n)
                    check[task.param(out).dtype].prepared_async_call(grid, block, stream, data.live[out], data.want[seed_index][out],
                                              np.uint64(n), np.float64(tol.rtol), np.float64(tol.atol),
                                              int(results) + (slot * len(outputs) + o) * RESULT_WORDS * 8)
                slots[name].append((r, slot))
                slot += 1
    stream.synchronize()
    cuda.memcpy_dtoh(host, results)
    results.free()
    times = {name: [end.time_since(start) for start, end in events[name]] for name in programs}
    checks = {name: [(r, host[s].tolist()) for r, s in slots[name]] for name in programs}
    return times, checks

