"""scripts/recording_provenance.py: a finished recording's provenance, every figure read from its folder and logs."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from cudanalyst.tasks import get_task
from cudanalyst.trajectory.format import FrozenProgram, dump_programs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "recording_provenance.py"
LAUNCHED = "Status: compiled\ncompute-sanitizer (memcheck) on task gemm, its kernels launched:\n[memcheck] no errors"
COUNTERS = "Event timings (CUDA events, L2 flushed, 20 trials): program median 0.1 ms\nNsight Compute:\n  Section: x"


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def _program(pid: str, task: str, generation: int, metrics: dict[str, float], source: str = "") -> FrozenProgram:
    built = metrics.get("compiled") == 1
    return FrozenProgram(task=task, generation=generation, program_id=pid, source=source or f"int {pid};",
                         metrics=metrics,
                         feedback={"debugger": LAUNCHED if built else "Status: FAILED to compile",
                                   "profiler": COUNTERS if built else ""})


def _recording(root: Path) -> Path:
    folder = root / "rec"
    (folder / "trajectory").mkdir(parents=True)
    (folder / "spec.json").write_text(json.dumps({"name": "rec", "spec": {  # as recording.prepare_store writes it
        "model": {"model": "qwen2.5-coder-1.5b-instruct"}, "tasks": ["gemm", "atax"], "iterations": 10}}))
    ok = {"compiled": 1, "contract": 1, "correct": 1}
    programs = [_program("b1", "gemm", 0, {"compiled": 0}),
                _program("w1", "gemm", 0, {"compiled": 1, "contract": 1, "correct": 0}),
                _program("c1", "gemm", 10, {**ok, "speedup": 1.05},       # within the tolerance: correct;
                         "// resubmitted\n" + get_task("gemm").baseline_source),  # the baseline unchanged
                _program("f1", "gemm", 10, {**ok, "speedup": 1.5}),       # fast
                _program("x1", "atax", 0, {"compiled": 1, "contract": 0, "correct": 1}),  # a main(): broken
                _program("u1", "atax", 0, {"compiled": 1})]               # no GPU verdict: unknown
    (folder / "trajectory" / "programs.jsonl").write_text(dump_programs(programs))
    (folder / "progress").mkdir()
    (folder / "progress" / "gemm.json").write_text(json.dumps({"task": "gemm", "checkpoint": 10, "iterations": 10}))
    logs = folder / "openevolve" / "gemm" / "evaluations"
    logs.mkdir(parents=True)
    tool = {"status": "ok", "cause": None, "timings": False, "seconds": 4.0, "waitedSeconds": 1.0}
    line = {"task": "gemm", "sha256": "0" * 16, "seconds": 12.0, "compiled": True,
            "tools": {"compute-sanitizer": tool, "nsight-compute": tool}}
    (logs / "pass-1-from-0.jsonl").write_text(json.dumps(line) + "\n")
    (logs / "pass-2-from-4.jsonl").write_text(json.dumps(line | {"repeat": True, "seconds": 0.0}) + "\n")
    return folder


def test_the_provenance_reads_states_tools_and_device_time_from_the_recording(tmp_path: Path) -> None:
    folder = _recording(tmp_path)
    calls = []
    for i, wall in enumerate((540, 212)):
        log = tmp_path / f"call{i}" / "console.log"
        log.parent.mkdir()
        log.write_text(f"vllm 0.22.0 pydantic 2.13.4\n05:59:52  starting the model server (x, vLLM)\n"
                       f"06:01:09  warming up the model (x)\npipeline wall time {wall} s, exit 124\n")
        calls += ["--console", str(log)]
    with tarfile.open(tmp_path / "run-rec.tgz", "w:gz") as tar:  # as pipeline.sh brings it back
        tar.add(folder, arcname="rec")
    out = tmp_path / "out"
    res = _run(str(tmp_path / "run-rec.tgz"), "--out", str(out), *calls, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    p = json.loads((out / "provenance.json").read_text())
    assert p["recording"] == "rec" and p["programs"] == 6 and p["generations"] == {"0": 4, "10": 2}
    assert p["states"]["byTask"]["gemm"] == {"broken": 1, "wrong": 1, "correct": 1, "fast": 1, "unknown": 0}
    assert p["states"]["byTask"]["atax"] == {"broken": 1, "wrong": 0, "correct": 0, "fast": 0, "unknown": 1}
    assert p["states"]["baselineCopies"] == {"broken": 0, "wrong": 0, "correct": 1, "fast": 0, "unknown": 0}
    assert p["fastTolerance"] == 0.12  # the spec's default, the rule of fastVsBaseline
    assert p["model"]["sha256"].startswith("cc324af0") and p["model"]["gguf"].endswith("q4_k_m.gguf")
    assert p["passesPerTask"] == {"gemm": 2} and p["progress"]["gemm"]["checkpoint"] == 10
    assert (p["evaluations"]["evaluations"], p["evaluations"]["repeats"], p["evaluations"]["compiled"]) == (2, 1, 1)
    assert p["device"]["pipelineSeconds"] == 752 and p["device"]["calls"][0]["serverReady"] == "06:01:09"
    san = p["tools"]["tools"]["compute-sanitizer"]
    # Over the programs the harness labels `compile` or better; the one with a main() is counted on its own.
    assert (san["usable"], san["compiled"], p["tools"]["compiledButContractBroken"]) == (4, 4, 1)
    page = (out / "provenance.md").read_text()
    assert "| gemm | 1 | 1 | 1 | 1 | 0 | 4 |" in page and "| all | 2 | 1 | 1 | 1 | 1 | 6 |" in page
    assert "| of them, the baseline's source (up to whitespace and comments) | 0 | 0 | 1 | 0 | 0 | 1 |" in page
    assert "Device calls: 2, 752 s" in page and "vLLM 0.22.0" in page
    # A stricter tolerance moves the 1.05x program to fast.
    res = _run(str(folder), "--out", str(tmp_path / "strict"), "--fast-tolerance", "0.01", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "strict" / "provenance.json").read_text())["states"]["total"]["fast"] == 2
    # The archive kept in git between sessions (scripts/recording_archive.py keep) reads as the device's .tgz.
    kept = subprocess.run([sys.executable, str(ROOT / "scripts" / "recording_archive.py"), "keep",
                           str(tmp_path / "run-rec.tgz"), str(tmp_path / "kept")], capture_output=True, text=True)
    assert kept.returncode == 0, kept.stderr
    res = _run(str(tmp_path / "kept" / "rec.tar.xz"), "--out", str(tmp_path / "from-xz"), *calls, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "from-xz" / "provenance.json").read_text()) == p


def test_bad_input_is_named_with_exit_2_and_nothing_written(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = _run(str(tmp_path / "empty"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2 and "empty: not a recording's folder (no spec.json)" in res.stderr
    folder = _recording(tmp_path)
    res = _run(str(folder), "--out", str(tmp_path / "out"), "--console", str(tmp_path / "nope.log"), cwd=tmp_path)
    assert res.returncode == 2 and "nope.log" in res.stderr
    (folder / "trajectory" / "programs.jsonl").unlink()  # not imported yet: a task still short of its iterations
    res = _run(str(folder), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert res.returncode == 2 and "trajectory/" in res.stderr
    assert not (tmp_path / "out").exists()
