"""A second agent configuration for `cudanalyst record` (spec.search, issue 29): OpenEvolve gets the strategy the
spec asks for, a spec without `search` records exactly as before, and bad combinations are named. The recording
itself with the tiny model is in tests/vllm/test_record_vllm.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_record import spec

from cudanalyst.api import SpecError
from cudanalyst.api.recording import SearchSpec, load_recording, parse_recording
from cudanalyst.recording import recorded_spec

EXAMPLES = Path(__file__).parents[1] / "examples"


def config(rec_data: dict) -> object:
    from openevolve.config import Config

    from cudanalyst.runner.record.evolve import openevolve_config

    return Config.from_dict(openevolve_config(parse_recording(rec_data), "conv2d", "http://127.0.0.1:9/v1", "tiny",
                                              gpu=False))


def test_without_search_openevolve_gets_what_every_earlier_recording_got(tmp_path: Path) -> None:
    from openevolve.config import Config

    from cudanalyst.runner.record.evolve import WHOLE_SOURCE

    got, default = config(spec(tmp_path)), Config()
    assert not got.diff_based_evolution and got.full_rewrite_probability == 0.0  # type: ignore[attr-defined]
    for name in ("exploration_ratio", "exploitation_ratio", "elite_selection_ratio", "migration_interval",
                 "migration_rate"):
        assert getattr(got.database, name) == getattr(default.database, name), name  # type: ignore[attr-defined]
    for name in ("num_top_programs", "num_diverse_programs"):
        assert getattr(got.prompt, name) == getattr(default.prompt, name), name  # type: ignore[attr-defined]
    assert WHOLE_SOURCE in got.prompt.system_message  # type: ignore[attr-defined]
    # A folder recorded before `search` existed holds no such key, and a default spec still matches it.
    assert "search" not in recorded_spec(parse_recording(spec(tmp_path)))


def test_a_second_strategy_reaches_openevolve(tmp_path: Path) -> None:
    from cudanalyst.runner.record.evolve import AS_ASKED, WHOLE_SOURCE

    search = {"evolution": "diff", "fullRewriteProbability": 0.25, "explorationRatio": 0.5,
              "exploitationRatio": 0.3, "eliteSelectionRatio": 0.2, "migrationInterval": 4, "migrationRate": 0.25,
              "topPrograms": 2, "diversePrograms": 1}
    got = config(spec(tmp_path, islands=3, search=search))
    assert got.diff_based_evolution and got.full_rewrite_probability == 0.25  # type: ignore[attr-defined]
    db = got.database  # type: ignore[attr-defined]
    assert (db.num_islands, db.exploration_ratio, db.exploitation_ratio, db.elite_selection_ratio,
            db.migration_interval, db.migration_rate) == (3, 0.5, 0.3, 0.2, 4, 0.25)
    assert (got.prompt.num_top_programs, got.prompt.num_diverse_programs) == (2, 1)  # type: ignore[attr-defined]
    # The system text no longer demands a whole program when OpenEvolve asks for SEARCH/REPLACE blocks.
    assert AS_ASKED in got.prompt.system_message and WHOLE_SOURCE not in got.prompt.system_message  # type: ignore
    assert recorded_spec(parse_recording(spec(tmp_path, search=search)))["search"]["evolution"] == "diff"


@pytest.mark.parametrize(("search", "field"), [
    ({"explorationRatio": 0.5, "exploitationRatio": 0.6}, "explorationRatio + exploitationRatio"),
    ({"fullRewriteProbability": 0.5}, "fullRewriteProbability is for evolution: diff"),
    ({"evolution": "patch"}, "spec.search.evolution"),
    ({"migrationInterval": 0}, "spec.search.migrationInterval"),
    ({"islands": 2}, "spec.search.islands"),
])
def test_bad_search_settings_are_named(tmp_path: Path, search: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field.replace("+", r"\+")):
        parse_recording(spec(tmp_path, search=search))


def test_the_study_recordings_differ_only_in_their_search(tmp_path: Path) -> None:
    from cudanalyst.tasks import get_task

    first = load_recording(EXAMPLES / "study-real" / "recordings" / "1.5b.yaml")
    second = load_recording(EXAMPLES / "study-real" / "recordings" / "1.5b-islands-diff.yaml")
    assert first.spec.search == SearchSpec() and second.spec.search.evolution == "diff"
    assert second.spec.islands > 1 and second.spec.search.migration_interval < second.spec.iterations
    # The second agent records the first one's original 16 tasks; the first gained 7 more for the study's task level
    # (docs/decisions.md, "The study's design, from its pilot"). On the tasks both have, only the search differs.
    assert len(second.spec.tasks) >= 16 and first.spec.tasks[: len(second.spec.tasks)] == second.spec.tasks
    for recorded in (first.spec, second.spec):
        families = {get_task(t).family for t in recorded.tasks}
        assert len(families) >= 4, families
    same = {k: v for k, v in first.spec.model_dump().items() if k not in ("search", "islands", "tasks")}
    assert same == {k: v for k, v in second.spec.model_dump().items() if k not in ("search", "islands", "tasks")}
