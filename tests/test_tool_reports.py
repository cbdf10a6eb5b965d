"""Issue 28, part 1 on the CPU: a GPU tool's failure is typed with its cause, counted per tool, never shown to the
agent as feedback about its program, and warned about before a run spends GPU time. The recorded H200
trajectory of 2026-11-30 is the real input: its reports are what the old tools wrote."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from nvcc_mark import needs_nvcc

from cudanalyst.trajectory import FrozenProgram, dump_programs, load_trajectory, parse_programs
from cudanalyst.trajectory import toolruns as T

RECORDED = "builtin://recorded-h200-2026-11-30"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recorded() -> list[FrozenProgram]:
    return load_trajectory(RECORDED).programs


def program(debugger: str = "Status: compiled", profiler: str = "", **kw: object) -> FrozenProgram:
    return FrozenProgram(task="gemm", generation=0, program_id=str(kw.pop("pid", "p")), source="",
                         metrics=kw.pop("metrics", {"compiled": 1}),
                         feedback={"debugger": debugger, "profiler": profiler}, **kw)


# ---- typing the old reports ------------------------------------------------------------------------------


def test_the_recorded_trajectory_counts_as_the_issue_tallied_it(recorded: list[FrozenProgram]) -> None:
    counts = T.count_tools(recorded)
    san, ncu = counts[T.SANITIZER], counts[T.NCU]
    assert san.compiled == ncu.compiled == 108
    # Of the 50 sanitizer parts, 46 checked no kernel: no context (out of memory; the issue's 29 plus programs
    # whose part holds both errors), or the kernel not in the module (no extern "C"). The other 4 ran clean; the
    # old parser had called their racecheck "could not run".
    assert (san.ok, san.failed, san.not_run) == (4, {"gpu-memory": 32, "not-launchable": 14}, 58)
    # 15 with sections; 77 whose program failed under ncu (the old text blamed the counters); 16 timeouts.
    assert (ncu.ok, ncu.failed, ncu.usable) == (15, {"program-failed": 77, "timeout": 16}, 15)
    assert san.mostly_failed and ncu.mostly_failed


def test_a_clean_racecheck_run_is_not_a_failure() -> None:
    # racecheck ends with its own summary line; the old parser called this run "could not run".
    old = ("Status: compiled\ncompute-sanitizer (memcheck, racecheck) on task mvt:\n[memcheck] no errors\n"
           "[racecheck] could not run (exit status 0): RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")
    assert T.sanitizer_run(old).status == "ok"
    from cudanalyst.runner.kernels.feedback.sanitizer import clean_tool_output

    assert clean_tool_output("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)")[1] == 0
    assert clean_tool_output("========= RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)")[1] == 2


def test_typed_runs_win_over_the_text_and_old_lines_still_read() -> None:
    old_line = json.dumps({"task": "gemm", "generation": 0, "programId": "a", "source": "",
                           "feedback": {"debugger": "Status: compiled"}})
    (old,) = parse_programs(old_line + "\n", "programs.jsonl")
    assert old.tools == {} and T.tool_runs(old)[T.SANITIZER].status == "not-run"
    assert '"tools"' not in dump_programs([old])  # written as before when nothing is typed
    from cudanalyst.trajectory import builtin_path

    bundled = (builtin_path("example") / "programs.jsonl").read_text()
    assert dump_programs(parse_programs(bundled, "example")) == bundled  # an old file reads and writes back as is
    typed = old.model_copy(update={"tools": {T.SANITIZER: T.ToolRun(status="failed", cause="timeout")}})
    (back,) = parse_programs(dump_programs([typed]), "programs.jsonl")
    assert T.tool_runs(back)[T.SANITIZER] == T.ToolRun(status="failed", cause="timeout")


# ---- what the agent is shown -----------------------------------------------------------------------------


def test_an_old_failure_is_shown_as_a_plain_statement(recorded: list[FrozenProgram]) -> None:
    oom = next(p for p in recorded if T.tool_runs(p)[T.SANITIZER].cause == "gpu-memory")
    shown = T.shown_report("debugger", oom.feedback["debugger"])
    assert "cuCtxCreate" not in shown and "Traceback" not in shown and "[memcheck]" not in shown
    assert T.statement(T.SANITIZER, "gpu-memory") in shown
    assert shown.startswith(oom.feedback["debugger"].split("compute-sanitizer (")[0])  # the program's part stays
    ncu = next(p for p in recorded if T.tool_runs(p)[T.NCU].cause == "program-failed")
    said = T.shown_report("profiler", ncu.feedback["profiler"])
    assert "performance counters" not in said and "application returned an error code" not in said
    assert "Nsight Compute could not check the program (program-failed)" in said


def test_a_program_that_broke_its_contract_keeps_its_own_error(recorded: list[FrozenProgram]) -> None:
    bad = next(p for p in recorded if T.tool_runs(p)[T.SANITIZER].cause == "not-launchable"
               and "out of memory" not in p.feedback["debugger"])
    shown = T.shown_report("debugger", bad.feedback["debugger"])
    assert "could not check the program (not-launchable): ContractError: kernel" in shown
    assert "This says nothing about the program" not in shown  # it does say something: the kernel is missing


def test_prompts_never_carry_a_tool_failure_as_feedback(recorded: list[FrozenProgram]) -> None:
    from cudanalyst.runner.llm import prompts as P
    from cudanalyst.tasks import get_task

    failed = [p for p in recorded if any(r.status == "failed" and r.cause not in T.PROGRAM_CAUSES
                                         for r in T.tool_runs(p).values())]
    assert len(failed) > 20
    for p in failed:
        view = P.ProgramView(get_task(p.task).contract(), p.source, p.generation)
        reports = P.coalition_reports(["debugger", "profiler"], ["debugger", "analyzer", "profiler"], p.feedback, {})
        text = P.coder_prompt_implicit(view, reports).completion() + P.planner_prompt(view, reports).completion()
        summary = P.summarizer_prompt("debugger", p.feedback["debugger"]).completion()
        for shown in (text, summary):
            for failure in ("cuCtxCreate", "out of memory", "did not finish within 180 s",
                            "could not read the GPU's performance counters", "==ERROR=="):
                assert failure not in shown, (p.program_id, failure)
        assert "could not run here" in text


# ---- the new tools' outputs (pure parts) ------------------------------------------------------------------


def test_nsight_compute_failures_name_their_real_cause() -> None:
    from cudanalyst.runner.kernels.feedback.profiler import ncu_failure

    denied = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    cause, line = ncu_failure(1, "launch_once: launched gemm\n" + denied)
    assert cause == "counters-denied" and "ERR_NVGPUCTRPERM" in line and "event timings" in line
    no_context = "launch_once: no CUDA context: MemoryError: cuCtxCreate failed: out of memory\n==ERROR== The " \
                 "application returned an error code (4)."
    assert ncu_failure(1, no_context)[0] == "gpu-memory"
    assert "This says nothing about the program" in ncu_failure(1, no_context)[1]
    contract = "launch_once: ContractError: launch configuration LAUNCH_gemm is not in the module\n==ERROR== x"
    cause, line = ncu_failure(1, contract)
    assert cause == "program-failed" and "LAUNCH_gemm is not in the module" in line
    crashed = "launch_once: launched gemm\nlaunch_once: LaunchError: cuCtxSynchronize failed: an illegal memory access"
    cause, line = ncu_failure(1, crashed)
    assert cause == "program-failed" and "illegal memory access" in line and "launched gemm" not in line
    assert ncu_failure(9, "launch_once: launched gemm\n==ERROR== Something else broke\n")[0] == "tool-error"
    for text in (denied, no_context, contract, crashed):  # every line reads back as the same cause
        assert T.ncu_run("Event timings (CUDA events, ...)\n" + ncu_failure(1, text)[1]).cause == ncu_failure(1, text)[0]


def test_the_sanitizer_tells_a_launched_kernel_from_one_that_never_ran() -> None:
    from cudanalyst.runner.kernels.feedback.sanitizer import launcher_failure

    assert launcher_failure("launch_once: launched gemm\n========= ERROR SUMMARY: 0 errors", 0) is None
    assert launcher_failure("launch_once: no CUDA context: MemoryError: cuCtxCreate failed: out of memory", 4) == \
        ("gpu-memory", "")
    assert launcher_failure('Program hit CUDA_ERROR_OUT_OF_MEMORY due to "out of memory" on cuCtxCreate', 1)[0] == \
        "gpu-memory"
    cause, error = launcher_failure("launch_once: ContractError: kernel 'gemm' is not in the module", 3)
    assert cause == "not-launchable" and error.startswith("ContractError: kernel 'gemm'")
    assert launcher_failure("Segmentation fault", 139) == ("tool-error", "")
    # The report lines read back as typed: a statement is a failure, the new head is a launched kernel's.
    assert T.sanitizer_run("x\n" + T.statement(T.SANITIZER, "timeout")).cause == "timeout"
    ok = ("x\ncompute-sanitizer (memcheck) on task gemm, its kernels launched:\n[memcheck] "
          + T.statement(T.SANITIZER, "timeout"))
    assert T.sanitizer_run(ok).status == "ok"


# What ncu printed on the H200 (2026-12-01, docs/results/h200-sealed-2026-12-01/gpu-tests-3-tools-beside-server.log)
# for a gemm writing 2^30 elements past C, beside a model server: the kept tail of its output began with these two
# lines (pytest cut the rest), a section table of NaN metrics, and no line of launch_once's own.
NCU_FAULTED_TAIL = "              cycle      (!) nan\n      Compute (SM) Throughput   "
# launch_once's own words for that fault when the program runs alone (pycuda's error for cuCtxSynchronize).
ALONE_FAULTED = ("launch_once: launched gemm\n"
                 "launch_once: LaunchError: cuCtxSynchronize failed: an illegal memory access was encountered\n")


def test_a_kernel_that_faults_under_nsight_compute_is_the_programs_failure() -> None:
    from cudanalyst.runner.kernels.feedback.profiler import alone_failure, ncu_failure

    # ncu's output alone cannot tell: the program said nothing (ncu stopped it), so it reads as ncu's failure ...
    assert ncu_failure(1, "launch_once: launched gemm\n" + NCU_FAULTED_TAIL)[0] == "tool-error"
    # ... until the program run alone says what it does: its own error makes the report program-failed.
    cause, line = alone_failure(1, ALONE_FAULTED)
    assert cause == "program-failed" and line == T.statement(
        T.NCU, "program-failed", "the program failed under it: LaunchError: cuCtxSynchronize failed: an illegal "
        "memory access was encountered")
    assert T.ncu_run("Event timings (CUDA events, ...)\n" + line).cause == "program-failed"
    assert alone_failure(0, "launch_once: launched gemm\n") is None  # it runs alone: ncu's failure is its own
    assert alone_failure(4, "launch_once: no CUDA context: MemoryError: cuCtxCreate failed: out of memory") is None
    assert alone_failure(-11, "launch_once: launched gemm\nSegmentation fault") is None  # no error of its own


def test_memcheck_pads_every_allocation_so_an_overrun_leaves_it() -> None:
    from cudanalyst.runner.kernels.feedback.sanitizer import PADDING_CAP, tool_options
    from cudanalyst.tasks import get_task

    gemm = get_task("gemm")  # C, A, B: 1024 x 1024 float32, 4 MiB each
    memcheck = tool_options("memcheck", gemm)
    assert memcheck[:2] == ["--tool", "memcheck"] and memcheck[memcheck.index("--padding") + 1] == str(4 << 20)
    assert "--padding" not in tool_options("racecheck", gemm)  # only memcheck reads bounds
    big = gemm.with_sizes(NI=8192, NJ=8192, NK=8192)  # 256 MiB arrays: the padding stops at its cap
    options = tool_options("memcheck", big)
    assert int(options[options.index("--padding") + 1]) == PADDING_CAP < 256 << 20


# ---- counting and warning -----------------------------------------------------------------------------------


def test_mostly_means_more_than_half_of_the_reports_a_tool_produced() -> None:
    ok = "Status: compiled\ncompute-sanitizer (memcheck) on task gemm, its kernels launched:\n[memcheck] no errors"
    bad = "Status: compiled\n" + T.statement(T.SANITIZER, "gpu-memory")
    half = [program(ok, pid="a"), program(bad, pid="b"), program("Status: compiled", pid="c")]
    c = T.count_tools(half)[T.SANITIZER]
    assert (c.compiled, c.ok, c.failed, c.not_run, c.usable) == (3, 1, {"gpu-memory": 1}, 1, 1)
    assert not c.mostly_failed and T.failed_report_warnings(half) == []
    more = [*half, program(bad, pid="d")]
    (warning,) = T.failed_report_warnings(more)
    assert warning.startswith("compute-sanitizer failed on 2 of the 3 frozen programs it ran on (more than 50%)")
    uncompiled = program("Status: FAILED to compile", pid="e", metrics={"compiled": 0})
    assert T.count_tools([uncompiled])[T.SANITIZER].compiled == 0


def test_counters_denied_with_timings_meet_the_profiler_target() -> None:
    timings = "Event timings (CUDA events, L2 flushed, 20 trials): program median 0.1 ms\n"
    denied = program(profiler=timings + T.statement(T.NCU, "counters-denied"), pid="a")
    no_timings = program(profiler="Event timings: the program could not be timed.\n"
                         + T.statement(T.NCU, "counters-denied"), pid="b")
    c = T.count_tools([denied, no_timings])[T.NCU]
    assert (c.failed, c.usable) == ({"counters-denied": 2}, 1)


def test_plan_warns_before_a_run_on_mostly_failed_reports(tmp_path: Path) -> None:
    spec = ROOT / "examples" / "h200-recorded-attribution.yaml"
    env = {**os.environ, "COLUMNS": "400"}
    out = subprocess.run([sys.executable, "-m", "cudanalyst", "plan", str(spec)], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "warning: compute-sanitizer failed on" in out.stdout and "warning: Nsight Compute failed on" in out.stdout
    js = subprocess.run([sys.executable, "-m", "cudanalyst", "plan", str(spec), "--json"], capture_output=True,
                        text=True, env=env, cwd=tmp_path, timeout=300)
    summary = json.loads(js.stdout)
    assert summary["toolReports"][T.NCU]["mostlyFailed"] is True and len(summary["warnings"]) == 2


RUN_SPEC = """apiVersion: cudanalyst.dev/v1alpha1
kind: AttributionRun
metadata: {name: told}
spec:
  trajectory: {uri: builtin://recorded-h200-2026-11-30, generations: [0], programsPerGeneration: 3}
  players: [debugger, analyzer, profiler]
  planning: implicit
  controls: []
  models:
    planner: {model: m, serve: endpoint, endpoint: "http://127.0.0.1:9/v1"}
  sampling: {rollouts: 1, samplesPerCoalition: 1, maxTokens: 64, seed: 0}
  resources: {shards: 1, gpusPerShard: 0}
  output: {uri: OUT}
"""


def test_run_prints_the_counts_and_warns_before_it_starts(tmp_path: Path) -> None:
    from cudanalyst.api import load_run
    from cudanalyst.planned_run import plan_run

    spec = tmp_path / "run.yaml"
    spec.write_text(RUN_SPEC.replace("OUT", str(tmp_path / "runs")))
    plan = plan_run(load_run(str(spec)))
    expected = T.report_lines(plan.programs)
    assert any(line.startswith("warning: ") for line in expected)  # the recorded programs mostly failed
    # Every unit has an outcome file, so the run stops right after its opening lines: no stage, no GPU time.
    outcomes = tmp_path / "runs" / "told" / "outcomes"
    outcomes.mkdir(parents=True)
    for u in plan.units:
        (outcomes / f"{u.key}.json").write_text("{}")
    out = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec), "--no-report"], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "1000"}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    said = [" ".join(line.split()) for line in (out.stdout + out.stderr).splitlines()]
    for line in expected:
        assert " ".join(line.split()) in said, (line, said)
    assert said.index(" ".join(expected[0].split())) < next(i for i, x in enumerate(said) if "nothing to run" in x)


# ---- the GPU tools' queue ------------------------------------------------------------------------------------


@contextlib.contextmanager
def slot_held_elsewhere(pool: str, for_s: float) -> Iterator[None]:
    """Another program's tool holds the only slot of `pool` (a thread) until `for_s` seconds into the block."""
    import threading

    from cudanalyst.runner.kernels.feedback.gpu_queue import gpu_slot

    held, release = threading.Event(), threading.Event()

    def other_tool() -> None:
        with gpu_slot(pool=pool):
            held.set()
            release.wait(10)

    t = threading.Thread(target=other_tool)
    t.start()
    held.wait(10)
    threading.Timer(for_s, release.set).start()
    try:
        yield
    finally:
        t.join()


def test_a_slot_held_by_one_process_is_not_taken_by_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.runner.kernels.feedback import gpu_queue

    monkeypatch.setenv("CUDANALYST_GPU_TOOL_DIR", str(tmp_path))
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_SLOTS", "1")
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDWR)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(7)\n")
    with gpu_queue.gpu_slot(device="0"):
        lock = tmp_path / "gpu-0-slot-0.lock"
        assert subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode == 7
    assert subprocess.run([sys.executable, "-c", probe, str(lock)]).returncode == 0
    assert fcntl.LOCK_EX  # the probe used the same kind of lock


def test_nsight_compute_queues_apart_from_the_other_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ncu serializes its own runs machine-wide: in the shared queue, ncu runs waiting for each other held every slot
    and compute-sanitizer waited behind them (H200, 2026-12-02). Its pool is separate, one slot unless told."""
    import time

    from cudanalyst.runner.kernels.feedback import gpu_queue

    monkeypatch.setenv("CUDANALYST_GPU_TOOL_DIR", str(tmp_path))
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_SLOTS", "1")
    monkeypatch.delenv("CUDANALYST_NCU_SLOTS", raising=False)
    assert gpu_queue.slots(gpu_queue.NCU_POOL) == 1
    # The other tools' only slot is taken: ncu still gets its own at once.
    with gpu_queue.gpu_slot(device="0"), gpu_queue.gpu_slot(device="0", pool=gpu_queue.NCU_POOL) as waited:
        assert waited < 0.1
    # Two ncu runs: the second waits for the first, in the ncu pool, and says how long.
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with slot_held_elsewhere(gpu_queue.NCU_POOL, 0.6), gpu_queue.tool_clock() as clock:
        gpu_queue.queued(lambda: time.sleep(0.1), lambda r: False, pool=gpu_queue.NCU_POOL)
    assert clock.waited >= 0.4 and 0.1 <= clock.ran < clock.waited
    assert sorted(p.name for p in tmp_path.glob("*.lock")) == ["gpu-0-ncu-slot-0.lock", "gpu-0-slot-0.lock",
                                                               "gpu-all-ncu-slot-0.lock"]
    monkeypatch.setenv("CUDANALYST_NCU_SLOTS", "3")
    assert gpu_queue.slots(gpu_queue.NCU_POOL) == 3 and gpu_queue.slots() == 1


def test_slots_go_in_the_order_they_were_asked_for_and_a_dead_waiter_holds_no_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Polling at random let an ncu run wait 431 s behind 10 s runs on the H200 (2026-12-02): the queue is a line."""
    import time

    from cudanalyst.runner.kernels.feedback import gpu_queue

    monkeypatch.setenv("CUDANALYST_GPU_TOOL_DIR", str(tmp_path))
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_SLOTS", "1")
    order = tmp_path / "order.txt"
    waiter = ("import sys, time\nfrom cudanalyst.runner.kernels.feedback.gpu_queue import gpu_slot\n"
              "with gpu_slot(device='0'):\n    open(sys.argv[1], 'a').write(sys.argv[2] + '\\n')\n"
              "    time.sleep(0.05)\n")
    queue = tmp_path / "gpu-0-queue"
    # A waiter that died in the line (its ticket is a file no one locks) is passed over and removed.
    queue.mkdir()
    dead = f"{0:020d}-1-1"
    (queue / dead).write_text("")
    procs = []
    with gpu_queue.gpu_slot(device="0"):
        for i in range(5):
            procs.append(subprocess.Popen([sys.executable, "-c", waiter, str(order), str(i)],
                                          env={**os.environ, "CUDANALYST_GPU_TOOL_DIR": str(tmp_path)}))
            deadline = time.monotonic() + 30
            while len([n for n in os.listdir(queue) if not n.startswith(".") and n != dead]) < i + 1:
                assert time.monotonic() < deadline, "a waiter never took its place in the line"
                time.sleep(0.02)
        # Many runs ask at once and the slot is free only after: each still goes in turn.
    assert all(p.wait(60) == 0 for p in procs)
    assert order.read_text().split() == ["0", "1", "2", "3", "4"]
    assert os.listdir(queue) == []  # every ticket, the dead one's included, is gone


def test_a_tool_without_gpu_memory_waits_and_tries_again() -> None:
    from cudanalyst.runner.kernels.feedback.gpu_queue import queued

    answers = iter(["gpu-memory", "gpu-memory", "ok"])
    waits: list[float] = []
    assert queued(lambda: next(answers), lambda r: r == "gpu-memory", sleep=waits.append) == "ok"
    assert waits == [2.0, 4.0]
    stuck: list[float] = []
    assert queued(lambda: "gpu-memory", lambda r: r == "gpu-memory", retries=2, sleep=stuck.append) == "gpu-memory"
    assert len(stuck) == 2


def test_a_reports_tool_runs_are_timed_waiting_for_the_queue_and_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from cudanalyst.runner.kernels.feedback.gpu_queue import queued, tool_clock
    from cudanalyst.trajectory.toolruns import ToolRun

    monkeypatch.setenv("CUDANALYST_GPU_TOOL_DIR", str(tmp_path))
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_SLOTS", "1")
    with slot_held_elsewhere("tools", 1.0), tool_clock() as clock:
        answers = iter(["gpu-memory", "ok"])
        assert queued(lambda: (time.sleep(0.2), next(answers))[1], lambda r: r == "gpu-memory",
                      sleep=lambda s: None) == "ok"
    assert clock.runs == 2 and clock.waited >= 0.5 and clock.ran >= 0.4
    timed = clock.timed(ToolRun(status="ok"))
    assert (timed.seconds, timed.waited_seconds) == (round(clock.ran, 3), round(clock.waited, 3))
    # Outside a clock nothing is kept; a clock that saw no launch leaves the run unmeasured.
    assert queued(lambda: "ok", lambda r: False) == "ok"
    with tool_clock() as idle:
        pass
    assert idle.timed(ToolRun(status="failed", cause="not-installed")).seconds is None


# ---- the launcher's symbols ------------------------------------------------------------------------------------


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    try:
        import triton  # noqa: F401 - vLLM's dependency ships a cuobjdump

        path = Path(sys.modules["triton"].__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        return str(path) if path.exists() else None
    except ImportError:
        return None


@needs_nvcc
def test_the_launcher_looks_up_the_cubins_real_kernel_symbols(tmp_path: Path) -> None:
    from cudanalyst.runner.kernels.compile.cubin_globals import entry_symbol, kernel_symbols
    from cudanalyst.runner.kernels.compile.nvcc import compile_task_source
    from cudanalyst.runner.kernels.verify.launch_once import launch_symbols
    from cudanalyst.tasks import get_task

    gemm = get_task("gemm")
    # No extern "C" (31 compiled programs of the 2026-11-30 recording), and a device function kept out of line.
    mangled = gemm.baseline_source.replace('extern "C" __global__', '__device__ __noinline__ float twice(float x) '
                                           '{ return 2 * x; }\n__global__')
    mangled = mangled.replace("alpha * acc", "twice(alpha) * acc / 2")
    assert mangled.count("twice") == 2
    built = compile_task_source(gemm, mangled)
    assert built.ok and built.cubin, built.errors
    symbols = kernel_symbols(built.cubin)
    assert len(symbols) == 1 and symbols[0].startswith("_Z4gemm") and "twice" not in symbols[0]
    assert launch_symbols(["gemm"], built.cubin) == {"gemm": symbols[0]}
    plain = compile_task_source(gemm, gemm.baseline_source)
    assert kernel_symbols(plain.cubin) == ["gemm"] and launch_symbols(["gemm"], plain.cubin) == {}
    overloaded = mangled + "\n__global__ void gemm(int* x) { x[0] = 1; }\n"
    assert entry_symbol(compile_task_source(gemm, overloaded).cubin, "gemm") is None  # ambiguous: not guessed
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump here to cross-check the cubin reader (CUDA toolkit or triton's copy)")
    for cubin in (built.cubin, plain.cubin):
        path = tmp_path / "k.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([tool, "-symbols", str(path)], capture_output=True, text=True, check=True).stdout
        entries = [line.split()[-1] for line in listing.splitlines() if "STO_ENTRY" in line]
        assert entries == kernel_symbols(cubin)


# ---- the recording's counts and the bundled example's cut ------------------------------------------------------


def _script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / name), *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def test_the_times_script_says_whether_evaluations_waited_for_the_queue_or_for_the_tools(tmp_path: Path) -> None:
    def line(seconds: float, compiled: bool, ran: float, waited: float) -> str:
        tool = {"status": "ok", "cause": None, "timings": False, "seconds": ran, "waitedSeconds": waited}
        return json.dumps({"task": "gemm", "sha256": "0" * 16, "seconds": seconds, "compiled": compiled,
                           "tools": {"compute-sanitizer": tool, "nsight-compute": {"status": "not-run"}}})

    logs = tmp_path / "rec" / "openevolve" / "gemm" / "evaluations"
    logs.mkdir(parents=True)
    (logs / "pass-1-from-0.jsonl").write_text("\n".join([line(10, True, 2, 6), line(30, True, 4, 20)]) + "\n")
    repeat = json.loads(line(0.01, True, 2, 6)) | {"repeat": True}  # answered from an earlier evaluation
    (logs / "pass-2-from-5.jsonl").write_text(line(0.5, False, 0, 0) + "\n" + json.dumps(repeat) + "\n")
    res = _script("evaluation_times.py", str(tmp_path / "rec"), "--json", str(tmp_path / "t.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    figures = json.loads((tmp_path / "t.json").read_text())
    assert (figures["evaluations"], figures["repeats"], figures["compiled"], figures["wall"]["median"]) == (4, 1, 2, 20.0)
    san = figures["tools"]["compute-sanitizer"]
    assert (san["measured"], san["ran"]["sum"], san["waited"]["sum"]) == (2, 6.0, 26.0)
    assert (san["ranShare"], san["waitedShare"]) == (0.15, 0.65)
    assert figures["tools"]["nsight-compute"]["measured"] == 0  # not run: not timed, not counted as 0 s
    assert "65% waiting" in res.stdout
    (tmp_path / "old").mkdir()  # a recording from before the logs were kept
    nothing = _script("evaluation_times.py", str(tmp_path / "old"), cwd=tmp_path)
    assert nothing.returncode == 2 and "no evaluations' log" in nothing.stderr
    # Several recordings pooled, one session's passes picked by their start time.
    other = tmp_path / "rec2" / "openevolve" / "mvt" / "evaluations"
    other.mkdir(parents=True)
    (other / "pass-1-from-2.jsonl").write_text(line(50, True, 40, 1) + "\n")
    res = _script("evaluation_times.py", str(tmp_path / "rec"), str(tmp_path / "rec2"), "--pass", "1",
                  "--json", str(tmp_path / "t1.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    first = json.loads((tmp_path / "t1.json").read_text())
    assert (first["evaluations"], first["tools"]["compute-sanitizer"]["ran"]["sum"]) == (3, 46.0)
    none = _script("evaluation_times.py", str(tmp_path / "rec"), "--pass", "3", cwd=tmp_path)
    assert none.returncode == 2 and "pass-3*.jsonl" in none.stderr


def test_nsight_computes_replay_passes_are_counted_and_fitted_against_its_seconds(tmp_path: Path) -> None:
    """Whether ncu's seconds are its replay passes or its start decides how to make it cheaper (H200, 2026-12-02:
    8.5 s a program, one at a time, the recordings' pace)."""
    from cudanalyst.runner.kernels.feedback.profiler import replay_passes

    out = ('==PROF== Connected to process 1 (/usr/bin/python3.12)\n'
           '==PROF== Profiling "gemm" - 0: 0%....50%....100% - 19 passes\n'
           '==PROF== Profiling "reduce_a(float *, float *)" - 1: 0%....50%....100% - 1 pass\n'
           '==PROF== Profiling "throw_dart": 0%....50%....100% - 8 passes\n  gemm (64, 1, 1)x(256, 1, 1)\n')
    assert replay_passes(out) == 28 and replay_passes("==PROF== Disconnected from process 1\n") is None
    # Written only when measured: a trajectory from before writes back as it was.
    assert "passes" not in T.ToolRun(status="ok").model_dump(by_alias=True)
    assert T.ToolRun(status="ok", passes=9).model_dump(by_alias=True)["passes"] == 9

    def line(seconds: float, passes: int | None) -> str:
        ncu = {"status": "ok", "seconds": seconds, "waitedSeconds": 0.0} | ({"passes": passes} if passes else {})
        return json.dumps({"task": "gemm", "sha256": "0" * 16, "seconds": seconds + 5, "compiled": True,
                           "tools": {"nsight-compute": ncu}})

    logs = tmp_path / "rec" / "openevolve" / "gemm" / "evaluations"
    logs.mkdir(parents=True)
    # 4 s to start, 0.25 s a pass; one run from before the passes were counted.
    (logs / "pass-1-from-0.jsonl").write_text("\n".join(line(4 + 0.25 * n, n) for n in (8, 16, 24)) + "\n"
                                              + line(30.0, None) + "\n")
    res = _script("evaluation_times.py", str(tmp_path / "rec"), "--json", str(tmp_path / "t.json"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    ncu = json.loads((tmp_path / "t.json").read_text())["tools"]["nsight-compute"]
    assert ncu["measured"] == 4 and ncu["passes"]["median"] == 16.0
    assert ncu["perPass"] == {"start": 4.0, "perPass": 0.25}
    assert "replay passes median 16, p90 22; fitted: 4.0 s + 0.250 s a pass" in res.stdout


def test_the_share_script_counts_a_recording_against_the_targets(tmp_path: Path,
                                                                 recorded: list[FrozenProgram]) -> None:
    old = _script("tool_report_share.py", RECORDED, "--json", str(tmp_path / "old.json"), cwd=tmp_path)
    assert old.returncode == 1, old.stderr  # the 2026-11-30 recording is far from 95 %
    counts = T.count_tools(recorded)
    said = json.loads((tmp_path / "old.json").read_text())
    held = T.count_tools([p for p in recorded if p.metrics.get("contract") != 0])  # the harness's `compile` label
    assert said["tools"][T.NCU]["usable"] == held[T.NCU].usable and said["met"] is False
    assert said["tools"][T.NCU]["overEveryBuiltProgram"]["usable"] == counts[T.NCU].usable
    assert f"Nsight Compute: {held[T.NCU].usable} of {held[T.NCU].compiled} compiled programs" in old.stdout
    # A recording's output folder whose compiled programs all carry real reports meets both.
    launched = ("Status: compiled\ncompute-sanitizer (memcheck) on task gemm, its kernels launched:\n"
                "[memcheck] no errors")
    timings = "Event timings (CUDA events, L2 flushed, 20 trials): program median 0.1 ms\n"
    good = [program(launched, timings + "Nsight Compute (--clock-control none):\n  Section: x", pid=f"g{i}")
            for i in range(19)]
    good.append(program(launched, timings + T.statement(T.NCU, "counters-denied"), pid="denied"))
    good.append(program("Status: FAILED to compile", pid="nc", metrics={"compiled": 0}))
    # nvcc built it, but its kernel is not the task's: no tool can launch it (label fail). It is counted on its own
    # line, not in the target's share, and the share over every built program is printed beside it.
    unlaunchable = "Status: compiled\n" + T.statement(T.SANITIZER, "not-launchable")
    good.append(program(unlaunchable, T.statement(T.NCU, "program-failed"), pid="contract",
                        metrics={"compiled": 1, "contract": 0}))
    folder = tmp_path / "rec" / "trajectory"
    folder.mkdir(parents=True)
    (folder / "programs.jsonl").write_text(dump_programs(good))
    new = _script("tool_report_share.py", str(tmp_path / "rec"), cwd=tmp_path)
    assert new.returncode == 0, new.stdout + new.stderr
    assert "compute-sanitizer: 20 of 20 compiled programs carry a report from a launched kernel: 100.0%" in new.stdout
    assert "not counted above: 1 program(s) that nvcc built but that broke the task's contract" in new.stdout
    assert "compute-sanitizer over every program nvcc built: 20 of 21 (95.2%)" in new.stdout
    assert _script("tool_report_share.py", str(tmp_path / "nothing"), cwd=tmp_path).returncode == 2


def test_the_example_is_cut_from_a_recording_with_its_real_reports(tmp_path: Path,
                                                                   recorded: list[FrozenProgram]) -> None:
    to = tmp_path / "example"
    done = _script("cut_example_trajectory.py", RECORDED, "--to", str(to), "--generations", "0,20",
                   "--tasks", "gemm,syrk", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    cut = load_trajectory(str(to))
    assert sorted({(p.task, p.generation) for p in cut.programs}) == [("gemm", 0), ("gemm", 20), ("syrk", 0),
                                                                      ("syrk", 20)]
    assert len(cut.programs) == 8 and len({p.source for p in cut.programs}) == 8
    by_id = {p.program_id: p for p in recorded}
    ids = {p.program_id for p in cut.programs}
    for p in cut.programs:
        assert p.feedback == by_id[p.program_id].feedback  # the reports as recorded
        assert p.source == by_id[p.program_id].source and p.context.prompt == ""
        assert p.tools and p.parent_id in ids | {None}
    readme = (to / "README.md").read_text()
    assert RECORDED in readme and "cut_example_trajectory.py" in readme and "qwen2.5-coder-1.5b" in readme
    assert cut.manifest.source["cutFrom"] == RECORDED
    again = _script("cut_example_trajectory.py", RECORDED, "--to", str(to), cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr
    wrong = _script("cut_example_trajectory.py", RECORDED, "--to", str(tmp_path / "x"), "--tasks", "nope",
                    cwd=tmp_path)
    assert wrong.returncode == 2 and "--tasks: ['nope'] not in the recording" in wrong.stderr
    assert not (tmp_path / "x").exists()


def test_the_report_counts_the_frozen_programs_tool_reports(tmp_path: Path) -> None:
    from cudanalyst.api import parse_run
    from cudanalyst.planned_run import plan_run
    from cudanalyst.report import build_report
    from cudanalyst.report.demo import demo_spec, write_demo_run
    from cudanalyst.runfolder import feedback_key
    from cudanalyst.store import open_store

    spec = demo_spec(output_uri=str(tmp_path))
    spec["spec"]["trajectory"] = {"uri": RECORDED, "generations": [0], "programsPerGeneration": 2}
    store = open_store(str(tmp_path / "demo"))
    write_demo_run(store, spec)
    programs = plan_run(parse_run(spec, "spec")).programs
    # One program's reports as the run computed them, typed: its sanitizer checked a launched kernel.
    computed = next(p for p in programs if T.compiled(p))
    store.put_json(feedback_key(computed.program_id), {"programId": computed.program_id, "reports": {},
                                                       "tools": {T.SANITIZER: {"status": "ok"}}})
    report = build_report(store)
    merged = [p.model_copy(update={"tools": {T.SANITIZER: T.ToolRun(status="ok")}}) if p is computed else p
              for p in programs]
    expected = {t: c.to_dict() for t, c in T.count_tools(merged).items()}
    assert report["toolReports"] == expected
    html = (tmp_path / "demo" / "report" / "report.html").read_text()
    assert "Tool reports behind the feedback" in html
    assert f"<td>{T.NCU}</td><td>{expected[T.NCU]['compiled']}</td>" in html
    from cudanalyst.report.compute import summary_lines

    assert any(line.startswith(f"{T.NCU} reports on {expected[T.NCU]['compiled']} compiled frozen programs")
               for line in summary_lines(report))


# ---- the report plumbing, with stand-in tools (the real ones: tests/gpu/test_tools_beside_server.py) ----------

FAKE_TOOL = """#!/bin/sh
# A stand-in for compute-sanitizer / ncu: what it prints is chosen by the tool it is asked to be ($2) or by $MODE.
case "${MODE}:$2" in
  ok:memcheck) echo "launch_once: launched gemm"; echo "========= ERROR SUMMARY: 0 errors";;
  ok:racecheck) echo "launch_once: launched gemm"; echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)";;
  ok:initcheck) sleep 5;;
  nomem:*) echo "launch_once: no CUDA context: MemoryError: cuCtxCreate failed: out of memory" >&2; exit 4;;
  contract:*) echo "launch_once: ContractError: kernel 'gemm' is not in the module" >&2; exit 3;;
  denied:*) echo "launch_once: launched gemm" >&2
            echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
            exit 1;;
  faulted:*) echo "launch_once: launched gemm" >&2; cat "$NCU_TEXT"; exit 1;;
  *) echo "========= ERROR SUMMARY: 0 errors";;
esac
"""


@pytest.fixture
def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "tool"
    exe.write_text(FAKE_TOOL)
    exe.chmod(0o755)
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_DIR", str(tmp_path / "slots"))
    monkeypatch.setenv("CUDANALYST_GPU_TOOL_RETRIES", "0")
    return exe


def test_a_sanitizer_report_holds_checks_of_launched_kernels_or_one_statement(
        fake_tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.runner.kernels.feedback import sanitizer
    from cudanalyst.tasks import get_task

    monkeypatch.setattr(sanitizer, "find_sanitizer", lambda: str(fake_tool))
    gemm = get_task("gemm")
    monkeypatch.setenv("MODE", "ok")
    out = sanitizer.sanitizer_report(gemm, b"cubin", timeout_s=1)
    assert out.run.status == "ok" and T.sanitizer_run("Status: compiled\n" + out.text).status == "ok"
    assert "[memcheck] no errors" in out.text and "[racecheck] no errors" in out.text
    assert f"[initcheck] {T.statement(T.SANITIZER, 'timeout')}" in out.text and "[synccheck]" not in out.text
    for mode, cause, shown in (("nomem", "gpu-memory", T.statement(T.SANITIZER, "gpu-memory")),
                               ("contract", "not-launchable", "compute-sanitizer could not check the program "
                                "(not-launchable): ContractError: kernel 'gemm' is not in the module")):
        monkeypatch.setenv("MODE", mode)
        out = sanitizer.sanitizer_report(gemm, b"cubin", timeout_s=5)
        assert (out.run.status, out.run.cause, out.text) == ("failed", cause, shown)
        assert "launch_once" in out.run.detail  # the tool's own words are kept, out of the report
        assert T.sanitizer_run("Status: compiled\n" + out.text).cause == cause


def test_a_profiler_report_keeps_the_timings_and_says_why_counters_are_missing(
        fake_tool: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.runner.kernels.feedback import profiler
    from cudanalyst.tasks import get_task

    monkeypatch.setattr(profiler, "find_ncu", lambda: str(fake_tool))
    stats = {"trials": 20, "median_ms": 0.5, "iqr_over_median": 0.01, "cv": 0.02}
    monkeypatch.setenv("MODE", "denied")
    out = profiler.profiler_report(get_task("gemm"), b"cubin", stats, stats, gpu=True)
    assert out.run == T.ToolRun(status="failed", cause="counters-denied", detail=out.run.detail, timings=True,
                                seconds=out.run.seconds, waited_seconds=out.run.waited_seconds)
    assert out.run.seconds is not None and out.run.waited_seconds is not None  # ncu was launched: it was timed
    assert "Event timings (CUDA events" in out.text and "ERR_NVGPUCTRPERM" in out.text
    assert T.count_tools([program(profiler=out.text)])[T.NCU].usable == 1
    monkeypatch.setenv("MODE", "nomem")
    out = profiler.profiler_report(get_task("gemm"), b"cubin", None, None, gpu=True)
    assert (out.run.cause, out.run.timings) == ("gpu-memory", False)
    assert out.text.endswith(T.statement(T.NCU, "gpu-memory")) and "cuCtxCreate" not in out.text


ALONE = """#!/bin/sh
# A stand-in for the program run alone by launch_once: what it prints is chosen by $ALONE.
echo "launch_once: launched gemm" >&2
case "${ALONE}" in
  faults) echo "launch_once: LaunchError: cuCtxSynchronize failed: an illegal memory access was encountered" >&2
          exit 1;;
  *) exit 0;;
esac
"""


def test_a_program_that_fails_under_nsight_compute_is_asked_alone(
        fake_tool: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.runner.kernels.feedback import profiler
    from cudanalyst.tasks import get_task

    alone = tmp_path / "alone"
    alone.write_text(ALONE)
    alone.chmod(0o755)
    (tmp_path / "ncu.txt").write_text("==PROF== Disconnected from process 1\n" + NCU_FAULTED_TAIL + "\n")
    monkeypatch.setattr(profiler, "find_ncu", lambda: str(fake_tool))
    monkeypatch.setattr(profiler, "launch_command", lambda task, path, runs=1: [str(alone)])
    monkeypatch.setenv("MODE", "faulted")
    monkeypatch.setenv("NCU_TEXT", str(tmp_path / "ncu.txt"))
    monkeypatch.setenv("ALONE", "faults")
    ok, lines, run = profiler.ncu_report(get_task("gemm"), b"cubin", timeout_s=5)
    assert (ok, run.status, run.cause) == (False, "failed", "program-failed")
    assert lines == [T.statement(T.NCU, "program-failed", "the program failed under it: LaunchError: "
                                 "cuCtxSynchronize failed: an illegal memory access was encountered")]
    assert "(!) nan" in run.detail and "the program alone (exit status 1)" in run.detail
    monkeypatch.setenv("ALONE", "runs")  # the same ncu failure, but the program runs fine alone: ncu's own
    ok, lines, run = profiler.ncu_report(get_task("gemm"), b"cubin", timeout_s=5)
    assert (ok, run.cause, lines) == (False, "tool-error", [T.statement(T.NCU, "tool-error")])
    assert "the program alone (exit status 0)" in run.detail


# ---- the recorder beside its model server, and the recording that checks the targets -------------------------


def test_the_recorder_leaves_the_tools_their_share_of_gpu_memory() -> None:
    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.local.record import TOOLS_SHARE_CAP, server_share

    greedy = ModelSpec(model="m", serve="local", gpu_memory_utilization=0.85)
    assert server_share(greedy, gpu=True).gpu_memory_utilization == TOOLS_SHARE_CAP < 0.85
    assert server_share(greedy, gpu=False) is greedy  # compiled only: no GPU tool shares the device
    modest = ModelSpec(model="m", serve="local", gpu_memory_utilization=0.4)
    assert server_share(modest, gpu=True) is modest
    remote = ModelSpec(model="m", serve="endpoint", endpoint="http://127.0.0.1:9/v1")
    assert server_share(remote, gpu=True) is remote


NEW_FAMILIES = {"dl": {"softmax", "layer_norm", "linear_bias_gelu", "conv2d_nchw", "sum_reduction"},
                "xsbench": {"xs_lookup", "xs_lookup_unionized"}, "npb": {"cg_spmv", "mg_resid"}}


def test_the_h200_recording_covers_the_new_families_with_the_15b_coder() -> None:
    from cudanalyst.api.recording import load_recording
    from cudanalyst.tasks import UnknownTaskError, get_task

    rec = load_recording(ROOT / "examples" / "h200-recording-feedback.yaml")
    tasks = set(rec.spec.tasks)
    assert len(tasks) >= 8 and rec.spec.model.model == "qwen2.5-coder-1.5b-instruct"
    for family, names in NEW_FAMILIES.items():
        assert len(tasks & names) >= 2, family
    assert tasks <= set().union(*NEW_FAMILIES.values())
    try:
        for task in tasks:
            get_task(task)
    except UnknownTaskError as exc:
        pytest.skip(f"the new tasks are not in this checkout yet (issue 28 part 3, the tasks branch): {exc}")


def test_a_programs_tools_report_side_by_side_in_the_registrys_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # One after the other, an evaluation queued for Nsight Compute only once compute-sanitizer was done.
    import threading
    import time

    from cudanalyst import players
    from cudanalyst.runner.kernels.feedback import reports

    barrier = threading.Barrier(len(players.TOOLS), timeout=10)  # passes only when every tool runs at once

    def tool(name: str):
        def run(facts: object) -> str:
            barrier.wait()
            time.sleep(0.01 * (len(players.TOOLS) - players.TOOLS.index(next(t for t in players.TOOLS
                                                                            if t.name == name))))
            return f"{name} on {facts}"
        return run

    monkeypatch.setattr(reports, "reporter", lambda t: tool(t.name))
    got = reports.all_reports("p")  # type: ignore[arg-type]
    assert list(got) == [t.name for t in players.TOOLS]  # the registry's order, whichever finished first
    assert got == {t.name: f"{t.name} on p" for t in players.TOOLS}

    def failing(t: players.FeedbackTool):
        def run(facts: object) -> str:
            raise RuntimeError(f"{t.name} broke")
        return run if t.name == players.TOOLS[-1].name else (lambda facts: "fine")

    monkeypatch.setattr(reports, "reporter", failing)
    with pytest.raises(RuntimeError, match=f"{players.TOOLS[-1].name} broke"):
        reports.all_reports("p")  # type: ignore[arg-type]
