"""`cudanalyst run`: bad input stops before any work with exit 2 and a message that names the problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cudanalyst", "run", *args], capture_output=True, text=True,
                          timeout=120)


def spec_file(tmp_path: Path, **edits: object) -> Path:
    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["spec"].update(edits)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_missing_spec_file(tmp_path):
    res = run_cli(str(tmp_path / "nope.yaml"))
    assert res.returncode == 2 and "nope.yaml" in res.stderr and "not found" in res.stderr


def test_invalid_spec_names_the_field(tmp_path):
    res = run_cli(str(spec_file(tmp_path, sampling={"rollouts": 0})))
    assert res.returncode == 2 and "spec.sampling.rollouts" in res.stderr


def test_output_folder_not_writable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    res = run_cli(str(spec_file(tmp_path)), "--output", str(blocker / "runs"))
    assert res.returncode == 2 and "not usable" in res.stderr, res.stderr
    assert blocker.read_text() == "not a folder"


def test_generation_without_programs_is_refused_before_work(tmp_path):
    spec = spec_file(tmp_path, trajectory={"uri": "builtin://example", "generations": [0, 7]})
    res = run_cli(str(spec), "--output", str(tmp_path / "runs"))
    assert res.returncode == 2 and "generation 7 has no program" in res.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_run_folder_of_another_spec_is_refused(tmp_path):
    out = tmp_path / "runs"
    first = spec_file(tmp_path)
    folder = out / "quickstart"
    folder.mkdir(parents=True)
    data = yaml.safe_load(first.read_text())
    data["spec"]["sampling"]["temperature"] = 0.1  # another spec under the same name
    import json

    (folder / "spec.json").write_text(json.dumps(data))
    res = run_cli(str(first), "--output", str(out))
    assert res.returncode == 2 and "different spec" in res.stderr and "spec.sampling" in res.stderr
    assert json.loads((folder / "spec.json").read_text())["spec"]["sampling"]["temperature"] == 0.1


def test_missing_model_is_named_before_work(tmp_path):
    spec = spec_file(tmp_path, models={"planner": {"model": str(tmp_path / "no-such-model"), "serve": "local"}})
    res = run_cli(str(spec), "--output", str(tmp_path / "runs"))
    assert res.returncode == 2 and "spec.models.planner.model" in res.stderr and "no-such-model" in res.stderr


def test_a_model_servers_capacity_may_change_between_passes_and_nothing_else_of_it(tmp_path):
    # A prompt longer than maxModelLen fails its unit (prompt-too-long) at every pass: a larger context, or more GPU
    # memory, must be able to finish the folder. The model, its API and its arguments decide what a unit computes.
    import pytest

    from cudanalyst.api import load_run
    from cudanalyst.planned_run import PlannedRun
    from cudanalyst.runner.local.executor import RunInputError, prepare_folder

    def run_with(**planner: object):
        data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
        data["spec"]["output"] = {"uri": str(tmp_path / "runs")}
        data["spec"]["models"]["planner"].update(planner)
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_run(str(path))

    first = run_with()
    prepare_folder(PlannedRun.resolve(first))
    bigger = run_with(maxModelLen=16384, gpuMemoryUtilization=0.3)
    prepare_folder(PlannedRun.resolve(bigger))  # accepted: the folder resumes
    for change in ({"api": "completion"}, {"extraArgs": ["--dtype", "float16"]}, {"model": "tiny-llama"}):
        other = run_with(**change)
        with pytest.raises(RunInputError, match=r"different spec \(spec\.models differ\)"):
            prepare_folder(PlannedRun.resolve(other))


def test_a_run_may_add_rollouts_to_its_folder_and_not_drop_them(tmp_path):
    # The study's pilot (one rollout) becomes main's first rollout when main asks for two (docs/decisions.md, "The
    # study's design, from its pilot"): a unit's key does not depend on the number of rollouts.
    import pytest

    from cudanalyst.api import load_run
    from cudanalyst.planned_run import PlannedRun, plan_run
    from cudanalyst.runner.local.executor import RunInputError, prepare_folder

    def run_with(rollouts: int, temperature: float = 0.8):
        data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
        data["spec"]["output"] = {"uri": str(tmp_path / "runs")}
        data["spec"]["sampling"].update(rollouts=rollouts, temperature=temperature)
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_run(str(path))

    one, two = run_with(1), run_with(2)
    assert {u.key for u in plan_run(one).units} < {u.key for u in plan_run(two).units}  # the first rollout's keys kept
    prepare_folder(PlannedRun.resolve(one))
    prepare_folder(PlannedRun.resolve(two))  # accepted: the folder grows a rollout
    with pytest.raises(RunInputError, match=r"spec\.sampling\.rollouts differ: the folder holds 2 rollouts"):
        prepare_folder(PlannedRun.resolve(one))
    with pytest.raises(RunInputError, match=r"different spec \(spec\.sampling differ\)"):
        prepare_folder(PlannedRun.resolve(run_with(3, temperature=0.5)))


def test_a_pass_with_every_candidate_written_needs_no_model(tmp_path):
    # A folder packed to travel keeps the candidates of the units without an outcome; resumed, the LLM stage has
    # nothing to write, so the pass is the kernel stage alone and the models need not be on this machine. One unit
    # with neither brings the model check back.
    import pytest

    from cudanalyst.api import load_run
    from cudanalyst.planned_run import PlanError, PlannedRun
    from cudanalyst.runner.local.executor import llm_units_left, prepare, prepare_folder, stage_to_run

    data = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    data["spec"]["output"] = {"uri": str(tmp_path / "runs")}
    data["spec"]["models"]["planner"] = {"model": str(tmp_path / "no-such-model"), "serve": "local"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    run = load_run(str(path))
    planned = PlannedRun.resolve(run)
    keys = sorted(u.key for u in planned.plan.units)
    assert llm_units_left(planned) == len(keys) and stage_to_run(planned, "all") == "all"  # no folder yet
    with pytest.raises(PlanError, match="no-such-model"):
        prepare(run)
    prepare_folder(planned)
    folder = tmp_path / "runs" / run.metadata.name
    (folder / "candidates").mkdir()
    (folder / "outcomes").mkdir()
    for i, key in enumerate(keys):  # half with an outcome only, half with a candidate only
        (folder / ("outcomes" if i % 2 else "candidates") / f"{key}.json").write_text("{}")
    assert llm_units_left(planned) == 0
    assert stage_to_run(planned, "all") == "kernels" and stage_to_run(planned, "llm") == "llm"
    assert prepare(run).name == run.metadata.name  # no model needed
    (folder / "candidates" / f"{keys[0]}.json").unlink()
    assert llm_units_left(planned) == 1 and stage_to_run(planned, "all") == "all"
    with pytest.raises(PlanError, match="no-such-model"):
        prepare(run)


def test_a_bad_first_attempt_setting_is_named_before_work(tmp_path):
    import os

    from cudanalyst.runner.kernels.limits import FIRST_ATTEMPT_ENV

    res = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec_file(tmp_path)), "--output",
                          str(tmp_path / "runs")], capture_output=True, text=True, timeout=120,
                         env={**os.environ, FIRST_ATTEMPT_ENV: "soon"})
    assert res.returncode == 2 and f"{FIRST_ATTEMPT_ENV}='soon'" in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()  # nothing written


def test_more_servers_per_gpu_than_shards_is_named_before_work(tmp_path):
    res = run_cli(str(spec_file(tmp_path)), "--output", str(tmp_path / "runs"), "--servers-per-gpu", "2")
    assert res.returncode == 2 and "--servers-per-gpu 2" in res.stderr and "a lane has 1" in res.stderr, res.stderr
    assert not (tmp_path / "runs").exists()  # nothing written
