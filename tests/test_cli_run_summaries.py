"""`cudanalyst run` prints each shard's stage summary before a successful run removes its logs."""

from pathlib import Path

from cudanalyst.runner.local.display import stage_summaries


def test_stage_summaries_reads_each_shards_summary_line(tmp_path: Path) -> None:
    (tmp_path / "shard-0-kernels.log").write_text(
        "noise\ncudanalyst-runner: kernel stage: 10 of 10 candidates in 3.0 s (compile and verify 2.0 s)\n")
    (tmp_path / "shard-0-llm.log").write_text("cudanalyst-runner: LLM stage: 10 units\nother\n")
    (tmp_path / "shard-1-llm.log").write_text("nothing to report\n")
    assert stage_summaries(tmp_path) == [
        "shard-0-kernels: kernel stage: 10 of 10 candidates in 3.0 s (compile and verify 2.0 s)",
        "shard-0-llm: LLM stage: 10 units",
    ]
