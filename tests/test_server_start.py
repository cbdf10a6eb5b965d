"""Where a vLLM server's start went, read from its log (runner/cudanalyst/runner/llm/server_start.py; issue 32).

The fixture is a real log: the 1.5B's warm start on the H200 kept in docs/results/h200-outcomes-2026-12-02/, whose
README split its 70 s by hand (19 s before the API server's first line, 27 s to the engine's, 20 s in the engine).
"""

from __future__ import annotations

import time
from pathlib import Path

from cudanalyst.runner.llm.server_start import StartPhases, start_phases

H200_LOG = Path(__file__).resolve().parents[1] / "docs/results/h200-outcomes-2026-12-02/vllm-warm-start.log"


def _at(stamp: str) -> float:
    """A local wall-clock time as the log writes it (its year given), in seconds since the epoch."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


def test_a_warm_h200_start_splits_into_the_two_processes_the_engine_and_the_rest() -> None:
    log = H200_LOG.read_text(errors="replace")
    launched = _at("2026-12-02 00:55:40")  # 19 s before the API server's first line (00:55:59)
    phases = start_phases(log, launched, healthy_after_s=70.0)
    assert phases.api_server_s == 19 and phases.engine_process_s == 27  # 00:55:59 -> 00:56:26
    assert phases.engine_s == 20 and phases.ready_s == 4  # 00:56:26 -> 00:56:46 ("init engine ... took"), -> +70 s
    assert phases.weights_s == 1.127873 and phases.compile_s == 4.29 and phases.graphs_s == 5
    assert phases.compile_cached  # "Directly load the compiled graph(s) ... from the cache"
    assert phases.describe() == (
        "19 s to the API server's first log line, 27 s more to the engine process's, 20 s in the engine (weights "
        "1.1 s, torch.compile 4.3 s from its cache, CUDA graphs 5 s), 4 s to healthy")


def test_a_cold_compile_is_not_called_cached() -> None:
    log = "\n".join(line for line in H200_LOG.read_text(errors="replace").splitlines()
                    if "Directly load" not in line)
    phases = start_phases(log, _at("2026-12-02 00:55:40"), 70.0)
    assert not phases.compile_cached and "torch.compile 4.3 s," in phases.describe()


def test_the_cpu_builds_log_gives_its_weights_from_the_line_it_has() -> None:
    log = ("(APIServer pid=1) INFO 12-04 04:17:54 [api_utils.py:347] version 0.32.0\n"
           "(EngineCore pid=2) INFO 12-04 04:18:05 [core.py:133] Initializing a V1 LLM engine\n"
           "/site-packages/vllm/x.py:138: FutureWarning: not a line of the log's own\n"
           "(EngineCore pid=2) INFO 12-04 04:18:07 [default_loader.py:501] Loading weights took 0.01 seconds\n"
           "(EngineCore pid=2) INFO 12-04 04:18:09 [core.py:402] init engine (profile, create kv cache, warmup "
           "model) took 0.62 s\n")
    phases = start_phases(log, _at("2026-12-04 04:17:45"), healthy_after_s=26.5)
    assert (phases.api_server_s, phases.engine_process_s, phases.engine_s) == (9, 11, 4)
    assert phases.ready_s == 2.5 and phases.weights_s == 0.01 and phases.compile_s is None
    assert phases.describe().endswith("4 s in the engine (weights 0.0 s), 2 s to healthy")


def test_model_runner_v2s_weights_line_is_read_too() -> None:
    # vLLM 0.22's model runner V2 (VLLM_USE_V2_MODEL_RUNNER=1, bench/pipeline.py's runner-v2) words the line without "memory".
    log = H200_LOG.read_text(errors="replace").replace("GiB memory and", "GiB and")
    assert "GiB and" in log and start_phases(log, _at("2026-12-02 00:55:40"), 70.0).weights_s == 1.127873


def test_a_start_across_new_year_counts_forward() -> None:
    log = "(APIServer pid=1) INFO 01-01 00:00:05 [utils.py:1] banner\n"
    assert start_phases(log, _at("2026-12-31 23:59:50"), 30.0).api_server_s == 15


def test_a_log_without_vllms_lines_says_nothing() -> None:
    phases = start_phases("Traceback (most recent call last):\nImportError: no vllm\n", time.time(), 3.0)
    assert phases == StartPhases() and phases.describe() == ""


def test_an_engine_vllm_spawned_where_it_was_asked_to_fork_is_named_with_vllms_reason() -> None:
    # vLLM 0.22's words (vllm/utils/system_utils.py), as the API server logs them before starting its engine.
    warning = ("(APIServer pid=1) WARNING 12-02 00:56:00 [system_utils.py:157] We must use the `spawn` "
               "multiprocessing start method. Overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'. See "
               "https://docs.vllm.ai/en/latest/usage/troubleshooting.html#python-multiprocessing for more "
               "information. Reasons: CUDA is initialized\n")
    log = H200_LOG.read_text(errors="replace")
    assert start_phases(log, _at("2026-12-02 00:55:40"), 70.0).forced_spawn is None  # asked to spawn, no warning
    phases = start_phases(log + warning, _at("2026-12-02 00:55:40"), 70.0)
    assert phases.forced_spawn == "CUDA is initialized" and phases.api_server_s == 19  # the phases as before
    assert phases.describe().endswith("4 s to healthy, the engine spawned, not forked (vLLM: CUDA is initialized)")
