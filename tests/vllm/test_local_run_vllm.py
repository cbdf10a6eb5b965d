"""`cudanalyst run` end to end with real vLLM (CPU build) and the tiny model: results, resume, Ctrl-C.

Kernels are compiled (nvcc from PyPI) but not run here, so pass and fast must come out "not evaluated".
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from llm_support import tiny_quickstart


def write_spec(tmp_path: Path, tiny_models: dict[str, Path]) -> Path:
    return tiny_quickstart(
        tmp_path / "run.yaml", tiny_models,
        trajectory={"uri": "builtin://example", "generations": [0], "programsPerGeneration": 1, "tasks": ["sum_reduction"]},
        players=["debugger", "analyzer"],
        planning="explicit",
        controls=["noFeedback"],
        sampling={"rollouts": 1, "samplesPerCoalition": 2, "maxTokens": 32, "temperature": 0.8, "seed": 0},
        resources={"shards": 2, "gpusPerShard": 0},
    )


def cudanalyst(*args: str, timeout: float = 900, tmpdir: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)} if tmpdir else None
    return subprocess.run([sys.executable, "-m", "cudanalyst", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def test_run_reports_then_resumes_without_work(tmp_path, tiny_models):
    spec = write_spec(tmp_path, tiny_models)
    out = tmp_path / "runs"
    work = tmp_path / "tmp"  # where the run makes its temporary folder (spec copies, logs)
    work.mkdir()
    first = cudanalyst("run", str(spec), "--output", str(out), tmpdir=work)
    assert first.returncode == 0, first.stderr[-3000:]
    # a run that succeeded removes its temporary folder (what vLLM and torch leave there is the test's tmp_path)
    assert not list(work.glob("cudanalyst-*"))
    # the log says what happens from the start, and the run ends with what the user saw and what comes next
    assert "starting the model server" in first.stderr and "writing plans" in first.stderr, first.stderr[-3000:]
    assert "What you saw:" in first.stdout and "Next:" in first.stdout
    # ... and last, where its wall time went on the user's clock (issue 32)
    table = first.stderr[first.stderr.index("where the wall time went"):]
    for row in ("start (to the model server ready)", "LLM stage: plans", "LLM stage: kernels after the last plan",
                "kernel stage's tail after it", "report", "wall", "units/h from the command", "tokens/s"):
        assert row in table, table
    # ... with where the server's own start went, read from the real server's log (server_start.py), then its warm-up
    assert re.search(r"healthy after [\d.]+ s \(\d+ s to the API server's first log line, \d+ s more to the engine "
                     r"process's, \d+ s in the engine \(weights [\d.]+ s\), \d+ s to healthy\), then warmed up in [\d.]+ s",
                     table), table
    folder = out / "quickstart"
    units = json.loads((folder / "plan.json").read_text())["units"]
    assert units == 1 * (4 + 1) * 2  # one program x (2^2 coalitions + 1 control) x 2 samples
    outcomes = sorted((folder / "outcomes").glob("*.json"))
    assert len(outcomes) == units
    levels = {json.loads(p.read_text())["evaluatedUpTo"] for p in outcomes}
    # no GPU: a compiled candidate is established only up to "compile"; a unit with no code is a known fail
    assert levels <= {"compile", "fast"}
    assert (folder / "report" / "report.html").is_file() and "debugger" in first.stdout
    report = json.loads((folder / "report" / "report.json").read_text())
    assert report["units"]["outcomes"] == units
    if "compile" in levels:
        assert "pass" in report["notEvaluated"] and "not evaluated" in first.stderr

    stamps = {p.name: p.stat().st_mtime_ns for p in (folder / "candidates").glob("*.json")}
    again = cudanalyst("run", str(spec), "--output", str(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "candidates").glob("*.json")} == stamps
    # Nothing was left to do, so no model server was started for it; the report is there again.
    assert "nothing to run" in again.stderr and "starting the model server" not in again.stderr
    assert "What you saw:" in again.stdout

    # A folder packed to travel (scripts/recording_archive.py snapshot) keeps the candidates of the units without an
    # outcome only. Resumed, the LLM stage has nothing to write: the kernel stage alone, no model server.
    keys = sorted(p.stem for p in outcomes)
    open_keys, done_keys = keys[:2], keys[2:]
    for key in open_keys:
        (folder / "outcomes" / f"{key}.json").unlink()
    for key in done_keys:
        (folder / "candidates" / f"{key}.json").unlink()
    packed = cudanalyst("run", str(spec), "--output", str(out))
    assert packed.returncode == 0, packed.stderr[-3000:]
    assert "no model server started" in packed.stderr and "starting the model server" not in packed.stderr
    # ... and its clock counts the pass's own units, under a kernel stage of its own
    assert "kernel stage (no LLM stage in this pass)" in packed.stderr and "2 units:" in packed.stderr
    assert sorted(p.stem for p in (folder / "outcomes").glob("*.json")) == keys
    assert sorted(p.stem for p in (folder / "candidates").glob("*.json")) == open_keys
    assert "What you saw:" in packed.stdout

    # One unit with neither: the model server starts for it alone, and the units with an outcome get no candidate.
    (folder / "outcomes" / f"{open_keys[0]}.json").unlink()
    (folder / "candidates" / f"{open_keys[0]}.json").unlink()
    one = cudanalyst("run", str(spec), "--output", str(out))
    assert one.returncode == 0, one.stderr[-3000:]
    assert "starting the model server" in one.stderr
    assert sorted(p.stem for p in (folder / "candidates").glob("*.json")) == open_keys
    assert sorted(p.stem for p in (folder / "outcomes").glob("*.json")) == keys


def ours(work: Path, *patterns: str) -> list[tuple[str, str]]:
    """(pattern, pid) of the running processes matching a pattern whose environment has TMPDIR=work."""
    found = []
    for pattern in patterns:
        for pid in subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:  # gone meanwhile
                continue
            if f"TMPDIR={work}".encode() in environ:
                found.append((pattern, pid))
    return found


def test_ctrl_c_stops_everything_and_a_rerun_finishes(tmp_path, tiny_models):
    spec = write_spec(tmp_path, tiny_models)
    out = tmp_path / "runs"
    work = tmp_path / "work"  # the executor's spec copies and logs land here: shards name it on their command line
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "cudanalyst", "run", str(spec), "--output", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(work)})
    time.sleep(8)  # the model server is starting: the hardest moment to stop cleanly
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "resume" in err
    model = str(tiny_models["tiny-llama-base"])
    # No shard, no model server of this run left behind. "Of this run": its processes inherit TMPDIR=work, so a
    # tiny-model server of another test running on the same machine is not taken for ours. A server gets SIGTERM
    # and shuts its engine down, so it may take a few seconds to go.
    deadline = time.monotonic() + 60
    while (left := ours(work, str(work), f"api_server --model {model} ")) and time.monotonic() < deadline:
        time.sleep(1)
    assert left == [], left
    done = cudanalyst("run", str(spec), "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(list((out / "quickstart" / "outcomes").glob("*.json"))) == 10


def test_the_stages_run_apart_from_one_store(tmp_path, tiny_models):
    """`--stage llm` writes every candidate and no outcome; `--stage kernels` (another machine, the same store)
    then writes every outcome without a model server."""
    spec = write_spec(tmp_path, tiny_models)
    out = tmp_path / "runs"
    llm = cudanalyst("run", str(spec), "--output", str(out), "--stage", "llm")
    assert llm.returncode == 0, llm.stderr[-3000:]
    folder = out / "quickstart"
    units = json.loads((folder / "plan.json").read_text())["units"]
    assert len(list((folder / "candidates").glob("*.json"))) == units
    assert not (folder / "outcomes").exists() or not list((folder / "outcomes").glob("*.json"))
    assert "done: llm stage" in llm.stderr and "What you saw:" not in llm.stdout  # no report after one stage
    kernels = cudanalyst("run", str(spec), "--output", str(out), "--stage", "kernels")
    assert kernels.returncode == 0, kernels.stderr[-3000:]
    assert "starting the model server" not in kernels.stderr
    assert len(list((folder / "outcomes").glob("*.json"))) == units
