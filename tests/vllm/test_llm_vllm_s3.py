"""Plan transfer with S3 everywhere (and a base-model coder found to need the completion API): trajectory, weights and records in a real S3 endpoint (moto server).

The planner and summarizer are the session's chat server (serve: endpoint); the coder is another
model (the base variant, completion API) that the shard serves itself from weights synced out of S3.
"""

from __future__ import annotations

import json
from pathlib import Path

from llm_support import VLLM_CPU_ARGS, endpoint_model, feedback_of, processes_mentioning, program, write_spec

from cudanalyst.runner.shard import main
from cudanalyst.trajectory import dump_programs

RUN = "transfer"


def test_plan_transfer_with_weights_and_records_in_s3(tmp_path: Path, monkeypatch, vllm_server, tiny_models,
                                                      s3_endpoint, s3_bucket) -> None:
    client = s3_endpoint.client()
    base = tiny_models["tiny-llama-base"]
    for f in base.iterdir():
        client.put_object(Bucket=s3_bucket, Key=f"models/tiny-llama-base/{f.name}", Body=f.read_bytes())
    programs = [program("p1", feedback=feedback_of("p1")), program("p2", feedback=feedback_of("p2"))]
    client.put_object(Bucket=s3_bucket, Key="traj/programs.jsonl", Body=dump_programs(programs).encode())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_endpoint.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_endpoint.secret_access_key)
    monkeypatch.setenv("CUDANALYST_CACHE", str(tmp_path / "cache"))
    coder_uri = f"s3://{s3_bucket}/models/tiny-llama-base/"
    spec = write_spec(
        tmp_path / "run.yaml", name=RUN, trajectory=f"s3://{s3_bucket}/traj/",  # type: ignore[arg-type]
        output=f"s3://{s3_bucket}/runs/", planner=endpoint_model(vllm_server), samples=1, max_tokens=16,
        # No `api`: the default is chat, and the runner must notice the base model has no chat template.
        coder={"model": coder_uri, "serve": "local", "maxModelLen": 2048, "dtype": "float32", "extraArgs": VLLM_CPU_ARGS},
        feedback={"mode": "raw", "modes": {"analyzer": "summary"}},
        s3={"endpoint": s3_endpoint.url, "region": s3_endpoint.region},
    )
    assert main(["--spec", str(spec), "--shard", "0", "--of", "1", "--stage", "llm"]) == 0

    def get(key: str) -> dict:
        return json.loads(client.get_object(Bucket=s3_bucket, Key=f"runs/{RUN}/{key}")["Body"].read())

    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket, Prefix=f"runs/{RUN}/candidates/")["Contents"]]
    assert len(keys) == 8  # 2 programs x 4 coalitions x 1 sample
    for key in keys:
        rec = json.loads(client.get_object(Bucket=s3_bucket, Key=key)["Body"].read())
        assert rec["models"] == {"coder": coder_uri, "planner": "tiny"}
        assert rec["api"] == {"coder": "completion", "planner": "chat"}
        coder = rec["prompts"]["coder"]
        # a base-model coder: the prompt opens the code block itself; the transferred plan is there as text
        assert coder.endswith("## Answer\n```cuda\n") and rec["plan"].strip() in coder
        assert coder.index("## Plan for this revision") < coder.index("## What earlier generations tried")
        planner_user = json.loads(rec["prompts"]["planner"])[1]["content"]
        if "analyzer" in rec["coalition"]:
            assert "Feedback from the analyzer (summary)" in planner_user
            assert "analyzer report of" not in planner_user  # the summary replaced the raw report
        assert 1 <= rec["tokens"]["coderCompletion"] <= 16
    summary = get("feedback/summaries/p1/analyzer.json")
    assert summary["player"] == "analyzer" and summary["tokens"]["completion"] >= 1
    progress = get("progress/shard-0.json")
    assert progress["state"] == "succeeded" and progress["byStage"]["llm"]["done"] == 8
    assert progress["gpuSeconds"] > 0  # the coder's local server held the device
    synced = list((tmp_path / "cache" / "weights").glob("*/config.json"))
    assert len(synced) == 1
    assert processes_mentioning(str(synced[0].parent)) == []  # the coder's server was stopped
