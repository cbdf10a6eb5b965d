"""Token accounting (issue 34): shards' usage objects summed per stage, priced per million, and estimated before a run."""

from __future__ import annotations

import pytest

from cudanalyst.api import AttributionRun
from cudanalyst.planned_run import plan_run
from cudanalyst.runfolder import usage_key
from cudanalyst.store import open_store
from cudanalyst.usage import ShardUsage, estimate, lines, read_usage, summary


def make_run(tmp_path, planning: str = "explicit", **models) -> AttributionRun:
    return AttributionRun.model_validate({
        "apiVersion": "cudanalyst.dev/v1alpha1", "kind": "AttributionRun", "metadata": {"name": "u"},
        "spec": {"trajectory": {"uri": "builtin://example", "generations": [0], "programsPerGeneration": 1,
                                "tasks": ["sum_reduction"]},
                 "players": ["debugger", "analyzer"], "planning": planning, "feedback": {"modes": {"analyzer": "summary"}},
                 "controls": ["dummyPlan"],
                 "models": models or {"planner": {"endpoint": "https://gw.example/v1", "model": "big",
                                                  "price": {"inputPerMillion": 3, "outputPerMillion": 15}},
                                      "coder": {"model": "small", "serve": "local"}},
                 "sampling": {"rollouts": 2, "samplesPerCoalition": 3, "maxTokens": 100},
                 "output": {"uri": str(tmp_path)}}})


def test_shards_sum_per_stage_and_the_priced_stages_cost(tmp_path) -> None:
    run = make_run(tmp_path)
    store = open_store(str(tmp_path))
    a, b = ShardUsage(shard=0), ShardUsage(shard=1)
    a.count("planner", "big", 1000, 200)
    a.count("coder", "small", 5000, 900)
    b.count("planner", "big", 3000, 800)
    b.count("planner", "big", None, None)  # an answer without usage fields: counted as such, not as zero tokens
    store.put_json(usage_key(0), a.wire())
    store.put_json(usage_key(1), b.wire())
    used = summary(run, read_usage(store))
    planner, coder = used["stages"]["planner"], used["stages"]["coder"]
    assert (planner["requests"], planner["promptTokens"], planner["completionTokens"]) == (3, 4000, 1000)
    assert planner["withoutUsage"] == 1
    assert planner["cost"] == pytest.approx((4000 * 3 + 1000 * 15) / 1e6)
    assert coder["cost"] is None and used["unpriced"] == ["coder"]  # a local model without a price
    assert used["cost"] == pytest.approx(planner["cost"]) and used["currency"] == "USD"
    assert used["models"]["big"]["stages"] == ["planner"] and used["models"]["small"]["promptTokens"] == 5000
    text = "\n".join(lines(used))
    assert "tokens, planner (big): 4,000 prompt + 1,000 completion in 3 requests" in text
    assert "1 answers without usage fields" in text and "estimated cost: 0.0270 USD (not priced: coder)" in text


def test_no_usage_yet_is_empty(tmp_path) -> None:
    assert read_usage(open_store(str(tmp_path))) == {}
    assert summary(make_run(tmp_path), {})["stages"] == {}


def test_the_estimate_counts_requests_as_the_stage_makes_them(tmp_path) -> None:
    run = make_run(tmp_path)
    plan = plan_run(run)
    est = estimate(run, plan.programs, plan.units)["stages"]
    groups = 1 * (4 + 1) * 2  # one program x (4 coalitions + dummyPlan) x 2 rollouts; samples share a request
    assert est["coder"]["requests"] == groups
    assert est["coder"]["maxCompletionTokens"] == groups * 3 * 100
    assert est["planner"]["requests"] == groups - 2  # no planner for dummyPlan
    assert est["planner"]["maxCost"] is not None and est["coder"]["maxCost"] is None
    programs_with_analyzer = sum(1 for p in plan.programs if p.feedback.get("analyzer"))
    assert est.get("summarizer", {"requests": 0})["requests"] == programs_with_analyzer
    implicit = estimate(make_run(tmp_path, "implicit"), plan.programs, plan.units)["stages"]
    assert "planner" not in implicit and implicit["coder"]["requests"] == groups


def test_a_prompt_longer_than_the_models_context_is_warned_with_its_field(tmp_path) -> None:
    from cudanalyst.usage import context_warnings

    roomy = make_run(tmp_path, planner={"model": "big", "serve": "local", "maxModelLen": 32768},
                     coder={"model": "small", "serve": "local", "maxModelLen": 32768})
    plan = plan_run(roomy)
    est = estimate(roomy, plan.programs, plan.units)
    planner = est["stages"]["planner"]["longestPrompt"]
    assert planner["programId"] in {p.program_id for p in plan.programs}
    # The longest planner prompt carries the reports: longer than the coder's, which carries a plan of 100 tokens.
    assert planner["tokens"] > est["stages"]["coder"]["longestPrompt"]["tokens"] - 100
    assert context_warnings(roomy, est, plan.programs) == []
    tight = planner["tokens"] + 100  # fits the prompt, not the plan's 100-token cap on top of it
    small = make_run(tmp_path, planner={"model": "big", "serve": "local", "maxModelLen": tight - 1},
                     coder={"model": "small", "serve": "local", "maxModelLen": 32768})
    warned = context_warnings(small, estimate(small, plan.programs, plan.units), plan.programs)
    planner_line = next(w for w in warned if "the longest planner prompt" in w)
    assert planner_line.startswith("warning: spec.models.planner.maxModelLen: the longest planner prompt is about "
                                   f"{planner['tokens']:,} tokens (program {planner['programId']}, task sum_reduction)")
    assert planner_line.endswith(f"+ 100 completion > {tight - 1:,}: the server refuses such requests, and their "
                                 "units fail as prompt-too-long")
    # The analyzer's summaries also go to the planner's model (no summarizer of its own), with 512 tokens each.
    assert sorted(w.split("the longest ")[1].split()[0] for w in warned) == ["planner", "summarizer"]
    # Without a coder of its own, the coder's requests go to the planner's model, and the warning names that field.
    alone = make_run(tmp_path, planner={"model": "big", "serve": "local", "maxModelLen": 300})
    warned = context_warnings(alone, estimate(alone, plan.programs, plan.units), plan.programs)
    assert {w.split(":")[1].strip() for w in warned} == {"spec.models.planner.maxModelLen"}
    assert any("longest coder prompt" in w for w in warned) and any("longest planner prompt" in w for w in warned)
