"""OpenEvolve checkpoints -> frozen programs (fixture run: tests/data/openevolve/gemm)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cudanalyst.store import open_store
from cudanalyst.trajectory.format import TrajectoryError
from cudanalyst.trajectory.openevolve import player_for_artifact, read_openevolve

RUN = Path(__file__).parent / "data" / "openevolve" / "gemm"
ROOT, A, B, C = (
    "0b6f3c1e-7c1a-4c55-9d0e-1f2a3b4c5d60",
    "1c7e4d2f-8d2b-4d66-8e1f-2a3b4c5d6e71",
    "2d8f5e30-9e3c-4e77-9f20-3b4c5d6e7f82",
    "3e906f41-af4d-4f88-a031-4c5d6e7f8093",
)


def test_all_checkpoints_are_merged_in_generation_order() -> None:
    programs, provenance = read_openevolve(open_store(str(RUN)), "gemm")
    # checkpoint_20 lost the root to the population limit; checkpoint_10 still has it.
    assert [p.program_id for p in programs] == [ROOT, A, B, C]
    assert [p.generation for p in programs] == [0, 1, 1, 2]
    assert [p.parent_id for p in programs] == [None, ROOT, ROOT, B]
    assert provenance["checkpoints"] == [10, 20]
    assert all(p.task == "gemm" for p in programs)
    assert "variant c" in programs[3].source


def test_one_checkpoint_can_be_chosen_and_a_missing_one_is_named() -> None:
    programs, _ = read_openevolve(open_store(str(RUN / "checkpoints")), "gemm", checkpoint=20)
    assert [p.program_id for p in programs] == [A, B, C]
    with pytest.raises(TrajectoryError, match=r"no checkpoint_15 \(checkpoints here: 10, 20\)"):
        read_openevolve(open_store(str(RUN)), "gemm", checkpoint=15)


def test_a_single_checkpoint_folder_is_a_source() -> None:
    programs, provenance = read_openevolve(open_store(str(RUN / "checkpoints" / "checkpoint_10")), "gemm")
    assert [p.program_id for p in programs] == [ROOT, A, B]
    assert provenance["checkpoints"] == []


def test_artifacts_become_feedback_by_player() -> None:
    by_id = {p.program_id: p for p in read_openevolve(open_store(str(RUN)), "gemm")[0]}
    assert set(by_id[A].feedback) == {"debugger"}
    assert 'identifier "tile" is undefined' in by_id[A].feedback["debugger"]
    assert set(by_id[B].feedback) == {"analyzer", "profiler"}
    assert "Used 40 registers" in by_id[B].feedback["analyzer"]
    assert "Achieved Occupancy" in by_id[B].feedback["profiler"]
    assert '"median": 0.81' in by_id[B].feedback["profiler"]  # structured artifacts are dumped as JSON
    # Names that say nothing about a player, and binary artifacts, stay provenance.
    kept = by_id[B].metrics["openevolve"]["artifacts"]
    assert set(kept) == {"llm_notes", "blob"}
    assert by_id[ROOT].feedback == {}


def test_feedback_map_overrides_the_name_rules() -> None:
    programs, provenance = read_openevolve(open_store(str(RUN)), "gemm",
                                           feedback_map={"llm_notes": "planner", "ncu_profile": "none"})
    b = next(p for p in programs if p.program_id == B)
    assert b.feedback["planner"] == "[llm_notes]\nunrolled"
    assert "ncu_profile" not in b.feedback["profiler"]
    assert "ncu_profile" in b.metrics["openevolve"]["artifacts"]
    assert provenance["feedbackFromArtifacts"]["llm_notes"] == "planner"


@pytest.mark.parametrize(("name", "player"), [
    ("stderr", "debugger"), ("compile_log", "debugger"), ("compute_sanitizer", "debugger"),
    ("ptxas_info", "analyzer"), ("register_usage", "analyzer"), ("profile_stderr", "profiler"),
    ("ncu_report", "profiler"), ("timing_ms", "profiler"), ("llm_notes", None),
])
def test_artifact_name_rules(name: str, player: str | None) -> None:
    assert player_for_artifact(name) == player


def test_metrics_history_and_prompt_are_kept() -> None:
    by_id = {p.program_id: p for p in read_openevolve(open_store(str(RUN)), "gemm")[0]}
    c = by_id[C]
    assert c.metrics["speedup"] == 2.1 and c.metrics["combined_score"] == 0.9
    assert c.context.history == ["Change 1: unroll the k loop by 4", "Change 1: register-block 2x2 outputs per thread"]
    assert c.context.prompt.startswith("You are an expert CUDA engineer.")
    extra = c.metrics["openevolve"]
    assert extra["iterationFound"] == 9 and extra["language"] == "cuda"
    assert extra["responses"] == ["<<<<<<< SEARCH ... >>>>>>> REPLACE (c)"]
    assert extra["file"] == f"checkpoints/checkpoint_20/programs/{C}.json"


def test_generation_can_come_from_the_iteration() -> None:
    programs, _ = read_openevolve(open_store(str(RUN)), "gemm", generation_from="iteration")
    assert {p.program_id: p.generation for p in programs} == {ROOT: 0, A: 3, B: 5, C: 9}


def test_generations_can_be_windows_of_iterations_named_by_their_first() -> None:
    # iteration_found 0, 3, 5, 9: windows of 5 are 0..4 and 5..9, named 0 and 5.
    programs, provenance = read_openevolve(open_store(str(RUN)), "gemm", generation_from="iteration",
                                           iterations_per_generation=5)
    assert {p.program_id: p.generation for p in programs} == {ROOT: 0, A: 0, B: 5, C: 5}
    assert provenance["generationFrom"] == "iteration" and provenance["iterationsPerGeneration"] == 5
    with pytest.raises(TrajectoryError, match="iterations per generation must be >= 1, got 0"):
        read_openevolve(open_store(str(RUN)), "gemm", generation_from="iteration", iterations_per_generation=0)


def test_large_artifacts_are_read_from_artifact_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN / "checkpoints" / "checkpoint_10", run)
    (run / "artifacts" / ROOT).mkdir(parents=True)
    (run / "artifacts" / ROOT / "ncu_full_report").write_text("Section: SpeedOfLight\nDRAM 88%")
    path = run / "programs" / f"{ROOT}.json"
    raw = json.loads(path.read_text())
    raw["artifact_dir"] = f"artifacts/{ROOT}"  # relative: resolved against the checkpoint
    path.write_text(json.dumps(raw))
    root = next(p for p in read_openevolve(open_store(str(run)), "gemm")[0] if p.program_id == ROOT)
    assert "DRAM 88%" in root.feedback["profiler"]


def test_a_missing_artifact_dir_is_recorded_not_fatal(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN / "checkpoints" / "checkpoint_10", run)
    path = run / "programs" / f"{ROOT}.json"
    raw = json.loads(path.read_text())
    raw["artifact_dir"] = "/elsewhere/artifacts/x"
    path.write_text(json.dumps(raw))
    programs, provenance = read_openevolve(open_store(str(run)), "gemm")
    root = next(p for p in programs if p.program_id == ROOT)
    assert root.metrics["openevolve"]["artifactDirMissing"] == "/elsewhere/artifacts/x"
    assert provenance["artifactDirsMissing"] == 1


# ------------------------------------------------------------------------------------ bad input


def _broken_copy(tmp_path: Path, content: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RUN / "checkpoints" / "checkpoint_10", run)
    (run / "programs" / f"{A}.json").write_text(content)
    return run


def test_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(TrajectoryError, match="is not an OpenEvolve checkpoint: expected programs/"):
        read_openevolve(open_store(str(tmp_path)), "gemm")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"id": A}), "missing field 'code'"),
    (json.dumps({"id": A, "code": 5}), "field 'code' must be a string"),
    (json.dumps({"id": A, "code": "x", "generation": "one"}), "field 'generation' must be an integer"),
    (json.dumps({"id": A, "code": "x", "generation": -1}), "'generation' must be >= 0"),
    (json.dumps({"id": A, "code": "x", "metrics": [1]}), "field 'metrics' must be an object"),
    (json.dumps({"id": A, "code": "x", "artifacts_json": "{oops"}), "'artifacts_json' is not valid JSON"),
    (json.dumps({"id": "bad id/with space", "code": "x"}), "program_id"),
])
def test_malformed_program_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    run = _broken_copy(tmp_path, content)
    with pytest.raises(TrajectoryError) as info:
        read_openevolve(open_store(str(run)), "gemm")
    assert message in str(info.value)
    assert f"programs/{A}.json" in str(info.value)


def test_an_empty_programs_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "programs").mkdir()
    (tmp_path / "programs" / "x.txt").write_text("")
    with pytest.raises(TrajectoryError, match="not an OpenEvolve checkpoint"):
        read_openevolve(open_store(str(tmp_path)), "gemm")


def _program(pid: str, code: str, parent: str | None, *, migrant: bool = False, artifacts: dict | None = None) -> dict:
    return {"id": pid, "code": code, "language": "cuda", "parent_id": parent, "generation": 1, "iteration_found": 1,
            "metrics": {"compiled": 1.0}, "metadata": {"island": 1, **({"migrant": True} if migrant else {})},
            **({"artifacts_json": json.dumps(artifacts)} if artifacts else {})}


def test_an_island_copy_carries_its_originals_tool_reports(tmp_path: Path) -> None:
    """OpenEvolve's migration copies a program to another island under a new id with its metrics but not its
    artifacts: the tools ran on that very source, so the copy gets the original's reports (and says whose)."""
    folder = tmp_path / "run" / "checkpoints" / "checkpoint_1" / "programs"
    folder.mkdir(parents=True)
    report = {"compute-sanitizer": "ERROR SUMMARY: 0 errors"}
    programs = [
        _program("orig", "kernel A", None, artifacts=report),
        _program("copy", "kernel A", "orig", migrant=True),
        _program("copy-of-copy", "kernel A", "copy", migrant=True),
        _program("child", "kernel A", "orig"),  # same code, but a child the agent wrote: not a copy
        _program("changed", "kernel B", "orig", migrant=True),  # a migrant flag on other code: not a copy
        _program("own", "kernel A", "orig", migrant=True, artifacts={"compute-sanitizer": "its own"}),
    ]
    for raw in programs:
        (folder / f"{raw['id']}.json").write_text(json.dumps(raw))
    found = {p.program_id: p for p in read_openevolve(open_store(str(tmp_path / "run")), "gemm")[0]}
    source = "openevolve"
    assert "ERROR SUMMARY" in found["copy"].feedback["debugger"]
    assert found["copy"].metrics[source]["migratedFrom"] == "orig"
    assert found["copy-of-copy"].metrics[source]["migratedFrom"] == "orig"
    assert "ERROR SUMMARY" in found["copy-of-copy"].feedback["debugger"]
    assert found["child"].feedback == {} and "migratedFrom" not in found["child"].metrics[source]
    assert found["changed"].feedback == {} and "migratedFrom" not in found["changed"].metrics[source]
    assert found["own"].feedback["debugger"].endswith("its own")
    assert "migratedFrom" not in found["orig"].metrics[source]
