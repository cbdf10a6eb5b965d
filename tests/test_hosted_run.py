"""A whole run against a hosted API's limits (issue 34): `cudanalyst run` through the loopback stand-in
(tests/hosted_api.py) that wants a key, answers 429 with Retry-After and then 500s for a while. Every unit
comes out once, each request was paid once, the tokens the run recorded are the ones the API reported, and
the key is nowhere in the run folder, the logs or the console. Then a long outage: the shard stops with the
reason, keeps what it wrote, and a second pass finishes the rest without asking for anything twice.

The kernel stage compiles each candidate (nvcc from PyPI); pass and fast are not evaluated without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hosted_api import HostedApi, serving

KEY = "sk-hosted-5b1e77d0c2"
VAR = "HOSTED_GATEWAY_KEY"
UNITS = 8  # 1 program x 4 coalitions of 2 players x 1 rollout x 2 samples
GROUPS = 4  # one planner and one coder request per coalition


def spec_file(tmp_path: Path, api: HostedApi, out: Path, name: str = "hosted") -> Path:
    doc: dict[str, Any] = {
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": name},
        "spec": {
            "trajectory": {"uri": "builtin://example", "generations": [0], "programsPerGeneration": 1,
                           "tasks": ["sum_reduction"]},
            "players": ["debugger", "analyzer"],
            "planning": "explicit",
            "models": {"planner": {"endpoint": api.base_url, "model": api.model, "apiKey": {"env": VAR},
                                   "maxConcurrency": 4,
                                   "price": {"inputPerMillion": 2.0, "outputPerMillion": 8.0}}},
            "sampling": {"rollouts": 1, "samplesPerCoalition": 2, "maxTokens": 64, "seed": 0},
            "resources": {"shards": 2, "gpusPerShard": 0},
            "output": {"uri": str(out)},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def env(tmp: Path, key: str | None = KEY) -> dict[str, str]:
    out = {**os.environ, "TMPDIR": str(tmp)}
    out.pop(VAR, None)
    if key is not None:
        out[VAR] = key
    return out


def files_holding(root: Path, text: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_a_run_through_rate_limits_and_500s_completes_every_unit_once(tmp_path: Path) -> None:
    out, work = tmp_path / "runs", tmp_path / "work"
    work.mkdir()
    with serving(HostedApi(key=KEY, rate_limited=3, retry_after_s=1, server_errors=4)) as api:
        spec = spec_file(tmp_path, api, out)
        plan = subprocess.run([sys.executable, "-m", "cudanalyst", "plan", str(spec), "--json"], capture_output=True,
                              text=True, env=env(work), timeout=300)
        assert plan.returncode == 0, plan.stderr[-2000:]
        tokens = json.loads(plan.stdout)["tokens"]
        assert tokens["stages"]["planner"]["requests"] == GROUPS and tokens["stages"]["coder"]["requests"] == GROUPS
        assert tokens["maxCost"] > 0 and tokens["currency"] == "USD"

        done = subprocess.run([sys.executable, "-m", "cudanalyst", "run", str(spec)], capture_output=True, text=True,
                              env=env(work), timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        assert api.statuses[429] == 3 and api.statuses[500] == 4  # the limits were really hit
        assert api.early == 0  # and no request came back before its Retry-After
        # Each planner and coder request answered once: no unit was asked for (and paid) twice.
        assert sorted(api.answered.values()) == [1] * (2 * GROUPS)
    folder = out / "hosted"
    for kind in ("candidates", "outcomes"):
        assert len(list((folder / kind).glob("*.json"))) == UNITS, kind
    assert not list((folder / "errors").glob("*.json"))
    # The tokens recorded are the API's own usage fields, per stage; the cost is theirs times the price.
    usage = json.loads((folder / "report" / "report.json").read_text())["usage"]
    recorded = usage["stages"]
    assert recorded["planner"]["requests"] == recorded["coder"]["requests"] == GROUPS
    assert recorded["planner"]["promptTokens"] + recorded["coder"]["promptTokens"] == api.prompt_tokens
    assert recorded["planner"]["completionTokens"] + recorded["coder"]["completionTokens"] == api.completion_tokens
    assert usage["cost"] == pytest.approx((api.prompt_tokens * 2.0 + api.completion_tokens * 8.0) / 1e6, abs=1e-6)
    assert "tokens, coder (hosted-coder)" in done.stderr and "estimated cost:" in done.stderr
    assert "Tokens and cost" in (folder / "report" / "report.html").read_text()
    # The key is in none of the run's files, the run's temporary files, or what it printed.
    assert files_holding(folder, KEY) == [] and files_holding(work, KEY) == []
    assert KEY not in done.stdout + done.stderr
    assert api.authorizations >= {f"Bearer {KEY}"}


def test_a_long_outage_stops_the_shard_with_its_reason_and_a_second_pass_finishes(tmp_path: Path) -> None:
    out, logs = tmp_path / "runs", tmp_path / "logs"
    logs.mkdir()
    with serving(HostedApi(key=KEY, outage_after=5)) as api:
        spec = spec_file(tmp_path, api, out, "outage")
        doc = yaml.safe_load(spec.read_text())
        doc["spec"]["resources"]["shards"] = 1
        spec.write_text(yaml.safe_dump(doc))
        shard = [sys.executable, "-m", "cudanalyst.runner.shard", "--spec", str(spec), "--shard", "0", "--of", "1",
                 "--stage", "llm", "--outage-timeout", "3", "--log-dir", str(logs)]
        first = subprocess.run(shard, capture_output=True, text=True, env=env(tmp_path), timeout=600)
        assert first.returncode == 1, first.stderr[-3000:]  # unfinished, not invalid: run again to resume
        assert "unavailable" in first.stderr and "outage allowance" in first.stderr and "503" in first.stderr
        folder = out / "outage"
        written = {p.name for p in (folder / "candidates").glob("*.json")}
        assert 0 < len(written) < UNITS  # what came back before the outage is kept
        progress = json.loads((folder / "progress" / "shard-0.json").read_text())
        assert progress["state"] == "failed" and any("outage allowance" in f["reason"] for f in progress["failures"])

        api.outage_after = None  # the API is back
        second = subprocess.run(shard, capture_output=True, text=True, env=env(tmp_path), timeout=600)
        assert second.returncode == 0, second.stderr[-3000:]
        assert sorted(api.answered.values()) == [1] * (2 * GROUPS)  # nothing was asked for twice
    assert written < {p.name for p in (folder / "candidates").glob("*.json")}
    assert len(list((folder / "candidates").glob("*.json"))) == UNITS
    assert not list((folder / "errors").glob("*.json"))
    # Tokens of both passes are in the shard's usage: exactly what the API reported over both.
    used = json.loads((folder / "usage" / "shard-0.json").read_text())["stages"]
    assert sum(s["promptTokens"] for s in used.values()) == api.prompt_tokens
    assert files_holding(folder, KEY) == [] and files_holding(logs, KEY) == []
