"""LLM4AD/EoH sample files -> frozen programs (fixture run: tests/data/llm4ad/gemm_eoh)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cudanalyst.store import open_store
from cudanalyst.trajectory.format import TrajectoryError
from cudanalyst.trajectory.llm4ad import read_llm4ad

RUN = Path(__file__).parent / "data" / "llm4ad" / "gemm_eoh" / "20250301_101500_"


def test_generations_come_from_the_populations() -> None:
    programs, provenance = read_llm4ad(open_store(str(RUN)), "gemm")
    # Samples 3 (failed) and 5 were never kept in a population: they are left out and counted.
    assert [(p.program_id, p.generation) for p in programs] == [
        ("sample-1", 1), ("sample-2", 1), ("sample-4", 2), ("sample-6", 2)]
    assert provenance["skippedSamples"]["sampleOrders"] == [3, 5]
    assert provenance["generationFrom"] == ["population"]
    assert provenance["files"] == ["samples/samples_1~200.json"]  # samples_best.json repeats history


def test_samples_per_generation_places_every_sample() -> None:
    programs, provenance = read_llm4ad(open_store(str(RUN)), "gemm", samples_per_generation=3)
    assert [(p.program_id, p.generation) for p in programs] == [
        ("sample-1", 0), ("sample-2", 0), ("sample-3", 0), ("sample-4", 1), ("sample-5", 1), ("sample-6", 1)]
    assert "skippedSamples" not in provenance
    failed = programs[2]
    assert failed.metrics["score"] is None and failed.metrics["valid"] is False


def test_fields_are_mapped() -> None:
    p = read_llm4ad(open_store(str(RUN)), "gemm")[0][-1]
    assert p.task == "gemm" and p.parent_id is None and p.feedback == {}
    assert "sample 6" in p.source
    assert p.metrics["score"] == -0.7 and p.metrics["valid"] is True
    assert p.metrics["llm4ad"]["algorithm"].startswith("Idea 6: tiles + unroll")
    assert p.metrics["llm4ad"]["sampleOrder"] == 6


def test_own_generation_and_prompt_fields_win(tmp_path: Path) -> None:
    samples = [{"sample_order": 1, "function": "k1", "score": 1.0, "generation": 4, "prompt": "Write a kernel",
                "operation": "e1"},
               {"sample_order": 2, "function": "k2", "score": [1.0, 2.0], "generation": 5}]
    (tmp_path / "samples_1~200.json").write_text(json.dumps(samples))
    programs, _ = read_llm4ad(open_store(str(tmp_path)), "gemm")
    assert [(p.generation, p.context.prompt) for p in programs] == [(4, "Write a kernel"), (5, "")]
    assert programs[0].metrics["llm4ad"]["operation"] == "e1"
    assert programs[1].metrics["score"] == [1.0, 2.0]


def test_one_file_can_be_read_alone() -> None:
    programs, provenance = read_llm4ad(open_store(str(RUN / "samples")), "gemm", samples_per_generation=2,
                                       only_key="samples_1~200.json")
    assert len(programs) == 6 and provenance["populations"] == []


def test_several_sample_files_are_read_in_order(tmp_path: Path) -> None:
    (tmp_path / "samples").mkdir()
    (tmp_path / "samples" / "samples_201~400.json").write_text(json.dumps([{"sample_order": 201, "function": "b"}]))
    (tmp_path / "samples" / "samples_1~200.json").write_text(json.dumps([{"sample_order": 1, "function": "a"}]))
    programs, provenance = read_llm4ad(open_store(str(tmp_path)), "t", samples_per_generation=200)
    assert [(p.program_id, p.generation) for p in programs] == [("sample-1", 0), ("sample-201", 1)]
    assert provenance["files"] == ["samples/samples_1~200.json", "samples/samples_201~400.json"]


# ------------------------------------------------------------------------------------ bad input


def test_a_folder_without_samples(tmp_path: Path) -> None:
    (tmp_path / "run_log.txt").write_text("")
    with pytest.raises(TrajectoryError, match="holds no LLM4AD sample files"):
        read_llm4ad(open_store(str(tmp_path)), "gemm")


def test_no_generation_and_no_population_asks_for_samples_per_generation(tmp_path: Path) -> None:
    (tmp_path / "samples_1~200.json").write_text(json.dumps([{"sample_order": 1, "function": "a"}]))
    with pytest.raises(TrajectoryError, match=r"samples_1~200.json\[0\]: sample 1 has no generation.*--samples-per"):
        read_llm4ad(open_store(str(tmp_path)), "gemm")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    (json.dumps({"sample_order": 1}), "expected a JSON list"),
    (json.dumps([5]), r"[0]: expected an object"),
    (json.dumps([{"function": "a"}]), r"[0]: missing field 'sample_order'"),
    (json.dumps([{"sample_order": 1, "function": "a"}, {"sample_order": "2", "function": "b"}]),
     r"[1]: field 'sample_order' must be an integer"),
    (json.dumps([{"sample_order": 1, "function": 3}]), "field 'function' must be a string"),
    (json.dumps([{"sample_order": 1, "function": "a", "score": "high"}]), "field 'score' must be a number"),
    (json.dumps([{"sample_order": 1, "function": "a"}, {"sample_order": 1, "function": "b"}]),
     "sample_order 1 appears twice"),
])
def test_malformed_sample_files_are_named(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "samples_1~200.json").write_text(content)
    with pytest.raises(TrajectoryError) as info:
        read_llm4ad(open_store(str(tmp_path)), "gemm", samples_per_generation=1)
    assert "samples_1~200.json" in str(info.value) and message in str(info.value)


def test_a_malformed_population_file_is_named(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    (run / "population" / "pop_2.json").write_text(json.dumps([{"algorithm": "x"}]))
    with pytest.raises(TrajectoryError, match=r"pop_2.json\[0\]: expected an object with a string field 'function'"):
        read_llm4ad(open_store(str(run)), "gemm")
