"""Does a learned feedback policy make the agent better? The comparison of issue 30, part 3: its spec, the
recordings of its arms, and the analysis of what `scripts/policy_comparison.py measure` re-measured (pure).

Arms (each a TrajectoryRecording per seed over the same held-out tasks, iterations, model server and sampling):
  all       every report shown raw: today's recorder (no policy)
  none      every report withheld in every state
  learned   the learned policy
  random    the learned policy's number of withheld components per state, drawn at random per parent program
  split     every report shown, a planner (the large model) writes a plan, the small model writes the code
  small     every report shown, the small model alone (the split's own baseline: the paper compares the split with
            the planner model alone, which is `all`)
A unit is one (task, seed). Per arm: the best verified speedup over the task's baseline after N iterations
(re-verified and re-timed by the kernel stage's own verify and compare, on inputs the agent never saw: never the
agent's fitness), its geometric mean over units with a t-interval on the log scale; the difference from `all`
paired by unit; compile and pass rates per iteration and over all; tokens and GPU seconds per unit.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from cudanalyst.api.spec import EvaluationSpec, Model, ModelSpec

ARMS = ("all", "none", "learned", "random", "split", "small")
# Per (arm, task, seed), from the recordings (scripts/policy_comparison.py analyse): tokens; GPU seconds as the
# recording's wall time shared by its tasks; and the GPU seconds its tools ran on its distinct compiled programs.
USAGE = ("promptTokens", "completionTokens", "plannerTokens", "savedTokens", "gpuSeconds", "toolSeconds")
REFERENCE = "all"
# Besides each arm against `all`: the learned policy against its own control (does the attribution's choice of what
# to withhold matter, or only how much is withheld?) and the split against the small model alone (does the plan help
# the model that writes the code?). Each paired by unit, as the ratio to all.
CONTRASTS = (("learned", "random"), ("split", "small"))
ArmName = Literal["all", "none", "learned", "random", "split", "small"]


class SharedServers(Model):
    """Serve `large` and `small` once, on these loopback ports, for every recording of a machine: the arms run side
    by side on one GPU (scripts/device/policy.sh) instead of each starting its own server. The ports are fixed
    because each recording's spec names its endpoint, and a recording resumes only under the same spec."""

    large: int = Field(8101, ge=1024, le=65535)
    small: int = Field(8102, ge=1024, le=65535)

    @model_validator(mode="after")
    def _apart(self) -> SharedServers:
        if self.large == self.small:
            raise ValueError("large and small need ports of their own")
        return self


class ComparisonSpec(Model):
    """What `scripts/policy_comparison.py specs` turns into one TrajectoryRecording per arm and seed."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?$")
    policy: str = Field(description="The learned FeedbackPolicy's file, relative to this spec's folder.")
    tasks: list[str] = Field(min_length=1, description="Held-out tasks: none of the policy's own (spec.tasks).")
    seeds: list[int] = Field(min_length=1)
    iterations: int = Field(ge=1, description="N: the budget per (task, seed), the same for every arm.")
    arms: list[ArmName] = Field(default_factory=lambda: list(ARMS))
    large: ModelSpec = Field(description="The model of every arm but split's coder and small.")
    small: ModelSpec = Field(description="split's coder, and small's model.")
    population: int = 20
    parallel: int = 4
    max_tokens: int = 2048
    temperature: float = 0.8
    recording_evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec,
                                                 description="How the recorder evaluates (the agent's fitness).")
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec,
                                       description="How `measure` re-verifies and re-times (the AttributionRun's).")
    output: str = Field("/tmp/runs", description="The recordings' output.uri.")
    run_tools: Literal["all", "shown"] = Field(
        "all", description="Each recording's spec.runTools. shown: an arm runs only the tools whose reports its "
        "prompts show (none runs no tool), so each arm's tool GPU seconds are what that agent would spend.")
    shared_servers: SharedServers | None = Field(
        None, description="Absent: each recording serves its own model(s). Set: `scripts/serve_models.py` serves "
        "large and small once on these ports and every recording is pointed at them (serve: endpoint).")

    @model_validator(mode="after")
    def _reference(self) -> ComparisonSpec:
        if REFERENCE not in self.arms:
            raise ValueError(f"arms: the reference arm {REFERENCE!r} must be one of them")
        if self.iterations <= self.parallel:
            # The recorder runs generations of `parallel` iterations: one generation only evolves the baseline.
            raise ValueError(f"iterations ({self.iterations}) must exceed parallel ({self.parallel}): with one "
                             "generation every child evolves the baseline and no policy is tried on an evolving agent")
        return self


class ComparisonSpecError(ValueError):
    """A comparison spec that cannot be used: the message names the file and each field that is wrong."""


def load_spec(path: str | Path) -> ComparisonSpec:
    """The ComparisonSpec in a YAML file; ComparisonSpecError naming the file and each field that is wrong."""
    import yaml
    from pydantic import ValidationError

    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ComparisonSpecError(f"{path}: file not found") from None
    try:
        return ComparisonSpec.model_validate(data)
    except ValidationError as exc:
        # A check of the whole spec has no location: its message names the fields itself.
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"]
                             else e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ComparisonSpecError(f"{path}: {problems}") from None


def recording_name(spec: ComparisonSpec, arm: str, seed: int) -> str:
    return f"{spec.name}-{arm}-s{seed}"


def arm_policy(arm: str, learned: Any, large: str, small: str) -> dict[str, Any] | None:
    """The `spec.policy` of an arm's recordings (None: ungated). `learned`: the learned PolicySpec."""
    players = list(learned.players)
    if arm in ("all", "small"):
        return None
    if arm == "none":
        states = {s: {"components": [{"component": p, "show": False, "reason": "the no-feedback arm"}
                                     for p in players]} for s in ("broken", "unverified", "wrong", "correct", "fast")}
        return {"players": players, "states": states, "notes": ["arm none: every report withheld"]}
    if arm == "split":
        return {"players": players, "models": {"planner": large, "coder": small,
                                               "reason": "the split arm: the large model plans, the small codes"},
                "notes": ["arm split: every report shown, a plan first"]}
    return learned.model_dump(by_alias=True, mode="json")  # learned, random (the recording's gating says which)


def served_name(model: ModelSpec) -> str:
    """The name a local model is served under (the runner's: its folder's name) (pure)."""
    return Path(str(model.model).rstrip("/")).name


def shared_endpoint(model: ModelSpec, port: int) -> dict[str, Any]:
    """A recording's model when `scripts/serve_models.py` serves `model` on `port` (pure)."""
    return {"model": served_name(model), "serve": "endpoint", "endpoint": f"http://127.0.0.1:{port}/v1",
            "api": model.api}


def recording_models(spec: ComparisonSpec) -> dict[str, dict[str, Any]]:
    """{"large": ..., "small": ...}: each model as the recordings name it, served by themselves or shared (pure)."""
    if spec.shared_servers is None:
        return {"large": spec.large.model_dump(by_alias=True, exclude_none=True),
                "small": spec.small.model_dump(by_alias=True, exclude_none=True)}
    return {"large": shared_endpoint(spec.large, spec.shared_servers.large),
            "small": shared_endpoint(spec.small, spec.shared_servers.small)}


def recordings(spec: ComparisonSpec, learned: Any) -> dict[str, dict[str, Any]]:
    """{name: TrajectoryRecording} for every arm and seed (pure)."""
    large, small = served_name(spec.large), served_name(spec.small)
    models = recording_models(spec)
    out = {}
    for arm in spec.arms:
        for seed in spec.seeds:
            coder = models["small"] if arm in ("split", "small") else models["large"]
            body: dict[str, Any] = {
                "tasks": list(spec.tasks), "model": coder,
                "iterations": spec.iterations, "islands": 1, "population": spec.population, "seed": seed,
                "temperature": spec.temperature, "maxTokens": spec.max_tokens, "parallel": spec.parallel,
                "checkpointInterval": max(1, spec.iterations // 4),
                # generation = the iteration a program was found in: "after N iterations" is generation <= N
                "iterationsPerGeneration": 1,
                "evaluation": spec.recording_evaluation.model_dump(by_alias=True, exclude_none=True),
                "output": {"uri": spec.output}, "resources": {"gpusPerShard": 1},
            }
            policy = arm_policy(arm, learned, large, small)
            if policy is not None:
                body["policy"] = policy
            if arm == "random":
                body["gating"] = "random"
            if spec.run_tools != "all":  # only when set: the specs of comparisons before the field stay as they were
                body["runTools"] = spec.run_tools
            if arm == "split":
                body["planner"] = models["large"]
            name = recording_name(spec, arm, seed)
            out[name] = {"apiVersion": "cudanalyst.dev/v1alpha1", "kind": "TrajectoryRecording",
                         "metadata": {"name": name, "labels": {"arm": arm, "seed": str(seed)}}, "spec": body}
    return out


# ---- the analysis (pure) --------------------------------------------------------------------------------------


def t_interval(values: Sequence[float], confidence: float) -> tuple[float, float | None, float | None]:
    """(mean, low, high) of a t-interval over units; no interval from fewer than two."""
    from scipy import special

    n = len(values)
    if n == 0:
        return math.nan, None, None
    mean = sum(values) / n
    if n < 2:
        return mean, None, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(special.stdtrit(n - 1, 0.5 + confidence / 2)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _exp(x: tuple[float, float | None, float | None]) -> dict[str, float | None]:
    return {"value": math.exp(x[0]) if math.isfinite(x[0]) else None,
            "low": None if x[1] is None else math.exp(x[1]), "high": None if x[2] is None else math.exp(x[2])}


def _plain(x: tuple[float, float | None, float | None], low: float = -math.inf,
           high: float = math.inf) -> dict[str, float | None]:
    """A t-interval clipped to what the quantity can be (a rate in [0, 1], a count >= 0): a bound outside it says
    nothing the clipped one does not, and the clipped interval covers whenever the raw one does."""
    def clip(v: float | None) -> float | None:
        return None if v is None else min(high, max(low, v))

    return {"value": x[0] if math.isfinite(x[0]) else None, "low": clip(x[1]), "high": clip(x[2])}


def best_speedups(programs: Iterable[Mapping[str, Any]], iterations: int) -> dict[tuple[str, str, int], float]:
    """Per (arm, task, seed): the best re-measured speedup over the baseline among programs found by iteration N
    that the re-verification found correct; 1.0 (the baseline itself) when none is."""
    best: dict[tuple[str, str, int], float] = {}
    for p in programs:
        key = (p["arm"], p["task"], int(p["seed"]))
        best.setdefault(key, 1.0)
        if p["iteration"] <= iterations and p.get("correct") and p.get("speedup"):
            best[key] = max(best[key], float(p["speedup"]))
    return best


def _pairs(values: Mapping[tuple[str, str, int], float], arm: str, other: str) -> list[tuple[float, float]]:
    """(arm's value, other's value) for each unit (task, seed) both arms have, in unit order."""
    return [(v, values[(other, t, s)]) for (a, t, s), v in sorted(values.items())
            if a == arm and (other, t, s) in values]


def paired_ratio(best: Mapping[tuple[str, str, int], float], arm: str, other: str, confidence: float
                 ) -> dict[str, Any]:
    """`arm`'s best speedup over `other`'s, unit by unit (the units both have): the geometric mean of the ratios
    with a t-interval on the log scale, and the number of pairs."""
    paired = [math.log(x) - math.log(y) for x, y in _pairs(best, arm, other)]
    return {**_exp(t_interval(paired, confidence)), "pairs": len(paired)}


def paired_difference(values: Mapping[tuple[str, str, int], float], arm: str, other: str, confidence: float
                      ) -> dict[str, Any]:
    """`arm`'s rate minus `other`'s, unit by unit (the units both have a rate for): the mean difference with a
    t-interval, clipped to [-1, 1], and the number of pairs. Paired because a task's difficulty moves both arms."""
    paired = [x - y for x, y in _pairs(values, arm, other)]
    return {**_plain(t_interval(paired, confidence), -1.0, 1.0), "pairs": len(paired)}


def analyse(programs: Sequence[Mapping[str, Any]], usage: Sequence[Mapping[str, Any]], iterations: int,
            confidence: float = 0.95) -> dict[str, Any]:
    """Each arm's numbers with intervals over its units (task x seed). `programs`: one re-measured program a row
    (arm, task, seed, iteration, compiled, correct, speedup); `usage`: one recording's task a row (arm, task, seed,
    promptTokens, completionTokens, plannerTokens, savedTokens, gpuSeconds, toolSeconds)."""
    best = best_speedups(programs, iterations)
    arms = sorted({k[0] for k in best}, key=lambda a: ARMS.index(a) if a in ARMS else len(ARMS))
    units = {a: sorted((t, s) for b, t, s in best if b == a) for a in arms}
    rates: dict[tuple[str, str, int], dict[str, list[float]]] = defaultdict(lambda: {"compiled": [], "pass": []})
    curve: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for p in programs:
        if 1 <= p["iteration"] <= iterations:  # the children, not the baseline
            key = (p["arm"], p["task"], int(p["seed"]))
            rates[key]["compiled"].append(float(bool(p.get("compiled"))))
            rates[key]["pass"].append(float(bool(p.get("correct"))))
            curve[p["arm"]][int(p["iteration"])].append((float(bool(p.get("compiled"))), float(bool(p.get("correct")))))
    spent: dict[tuple[str, str, int], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for u in usage:
        key = (u["arm"], u["task"], int(u["seed"]))
        for k in USAGE:
            spent[key][k] += float(u.get(k) or 0)
    # What each arm's prompts cost against all feedback, unit by unit: the gating's saving in any runTools mode (the
    # gating log's savedTokens count only reports that were made, and under runTools: shown a withheld one is not).
    prompt_tokens = {k: v["promptTokens"] for k, v in spent.items() if v["promptTokens"] > 0}
    # A unit's rate over its children; a unit without a child has none (it is left out, as in the arm's own rate).
    unit_rate = {m: {k: sum(v[m]) / len(v[m]) for k, v in rates.items() if v[m]} for m in ("compiled", "pass")}
    out: dict[str, Any] = {"iterations": iterations, "confidence": confidence, "reference": REFERENCE, "arms": []}
    for a in arms:
        logs = [math.log(best[(a, t, s)]) for t, s in units[a]]
        row: dict[str, Any] = {"arm": a, "units": len(units[a]),
                               "tasks": sorted({t for t, _ in units[a]}), "seeds": sorted({s for _, s in units[a]}),
                               "bestSpeedup": _exp(t_interval(logs, confidence))}
        if REFERENCE in arms and a != REFERENCE:
            row["speedupRatioToAll"] = paired_ratio(best, a, REFERENCE, confidence)
            row["promptTokensRatioToAll"] = paired_ratio(prompt_tokens, a, REFERENCE, confidence)
            for metric in ("compiled", "pass"):
                row[f"{metric}RateDifferenceToAll"] = paired_difference(unit_rate[metric], a, REFERENCE, confidence)
        for metric in ("compiled", "pass"):
            per_unit = [unit_rate[metric][(a, t, s)] for t, s in units[a] if (a, t, s) in unit_rate[metric]]
            row[f"{metric}Rate"] = _plain(t_interval(per_unit, confidence), 0.0, 1.0)
        # Over the N iterations, not over the children: an iteration whose answer held no program (OpenEvolve keeps
        # no child) counts as one that gave nothing, so an arm cannot look better by answering less.
        row["childRate"] = _plain(t_interval([min(1.0, len(rates[(a, t, s)]["compiled"]) / iterations)
                                              for t, s in units[a]], confidence), 0.0, 1.0)
        row["compiledPerIteration"] = _plain(t_interval([min(1.0, sum(rates[(a, t, s)]["compiled"]) / iterations)
                                                         for t, s in units[a]], confidence), 0.0, 1.0)
        # Per iteration: the share of that iteration's children (one per unit) that compiled / passed, with a
        # t-interval over them (none from fewer than two).
        row["alongIterations"] = [
            {"iteration": i, "programs": len(v), "compiled": sum(c for c, _ in v) / len(v),
             "pass": sum(p for _, p in v) / len(v),
             "compiledInterval": _bounds(_plain(t_interval([c for c, _ in v], confidence), 0.0, 1.0)),
             "passInterval": _bounds(_plain(t_interval([p for _, p in v], confidence), 0.0, 1.0))}
            for i, v in sorted(curve[a].items())]
        for k in USAGE:
            row[k] = _plain(t_interval([spent[(a, t, s)][k] for t, s in units[a]], confidence), 0.0)
        out["arms"].append(row)
    out["contrasts"] = [{"arm": a, "against": b, "speedupRatio": paired_ratio(best, a, b, confidence),
                         **{f"{m}RateDifference": paired_difference(unit_rate[m], a, b, confidence)
                            for m in ("compiled", "pass")}}
                        for a, b in CONTRASTS if a in arms and b in arms]
    cards: dict[str, set[str]] = defaultdict(set)  # rows measured since 2026-12-05 name the card that timed them
    for p in programs:
        if p.get("gpu"):
            cards[str(int(p["seed"]))].add(str(p["gpu"]))
    if cards:
        out["cards"] = {seed: sorted(names) for seed, names in sorted(cards.items(), key=lambda kv: int(kv[0]))}
    return out


def _bounds(x: Mapping[str, float | None]) -> list[float | None]:
    return [x["low"], x["high"]]


def _fmt(x: Mapping[str, Any], digits: int = 3, suffix: str = "") -> str:
    if x.get("value") is None:
        return "n/a"
    iv = "" if x.get("low") is None else f" [{x['low']:.{digits}f}, {x['high']:.{digits}f}]"
    return f"{x['value']:.{digits}f}{suffix}{iv}"


def _signed(x: Mapping[str, Any], digits: int = 3) -> str:
    """A difference with its sign, so that "-0.150 [-0.260, -0.040]" reads as a drop at a glance."""
    if x.get("value") is None:
        return "n/a"
    iv = "" if x.get("low") is None else f" [{x['low']:+.{digits}f}, {x['high']:+.{digits}f}]"
    return f"{x['value']:+.{digits}f}{iv}"


TABLE_MARK = "<!-- the table -->"


def readme(result: Mapping[str, Any], title: str, preface: str = "") -> str:
    """The results page: the preface, one row per arm, the curves (markdown). What follows TABLE_MARK in the
    preface goes after them (what is kept, how it ran), so the reading comes first and the table next to it."""
    preface, _, after = preface.partition(TABLE_MARK)
    conf = f"{result['confidence']:.0%}"
    missing = result.get("notMeasured") or []
    gaps = []
    if missing:
        recorded = [m["recording"] for m in missing if m["recorded"]]
        # "started" is absent from pages written before it: a recording not recorded then counted as absent.
        stopped = [m["recording"] for m in missing if not m["recorded"] and m.get("started")]
        absent = [m["recording"] for m in missing if not m["recorded"] and not m.get("started")]
        gaps = ["**Not on this page:** " + "; ".join(
            part for part in (f"{', '.join(recorded)} (recorded, not measured yet)" if recorded else "",
                              f"{', '.join(stopped)} (recording stopped part-way; it resumes)" if stopped else "",
                              f"{', '.join(absent)} (not recorded)" if absent else "") if part) + ".", ""]
    lines = [f"# {title}", "", preface.strip(), "", *gaps,
             f"Best verified speedup over the task's baseline after {result['iterations']} iterations (geometric mean "
             f"over units = task x seed, {conf} t-interval on the log scale), re-verified and re-timed by the kernel "
             "stage on inputs the agent never saw; its ratio to `all` paired by unit; compile and pass rates of the "
             "children (mean over units); the share of the iterations that gave a child and that gave one that "
             "compiled (an iteration whose answer held no program gives none); tokens and GPU seconds per unit "
             "(GPU s: a recording's wall seconds, shared by its tasks, on a GPU it shared with the other arms when "
             "they ran side by side; tool GPU s: what compute-sanitizer and Nsight Compute ran on the unit's distinct "
             "compiled programs, waits for a tool's slot left out).", "",
             "| arm | units | best speedup | ratio to all | compile rate | pass rate | iterations with a child "
             "| compiled per iteration | prompt tokens | saved tokens | GPU s | tool GPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["arms"]:
        ratio = _fmt(r["speedupRatioToAll"], suffix="x") if "speedupRatioToAll" in r else "(reference)"
        lines.append(f"| {r['arm']} | {r['units']} | {_fmt(r['bestSpeedup'], suffix='x')} | {ratio} | "
                     f"{_fmt(r['compiledRate'])} | {_fmt(r['passRate'])} | {_fmt(r['childRate'])} | "
                     f"{_fmt(r['compiledPerIteration'])} | {_fmt(r['promptTokens'], 0)} | "
                     f"{_fmt(r['savedTokens'], 0)} | {_fmt(r['gpuSeconds'], 0)} | {_fmt(r['toolSeconds'], 0)} |")
    if result.get("cards"):
        lines += ["", "Re-timed on: " + "; ".join(f"seed {seed} {', '.join(names)}" for seed, names in
                                                  result["cards"].items()) + ". A seed's arms were recorded side by "
                  "side on one machine and are paired by unit, so a seed's card is a block of the design, not a "
                  "difference between arms."]
    contrasts = [c for c in result.get("contrasts", []) if c["speedupRatio"]["pairs"]]
    if contrasts:
        lines += ["", "Paired by unit, as the ratio to all: " + "; ".join(
            f"{c['arm']} against {c['against']} {_fmt(c['speedupRatio'], suffix='x')} ({c['speedupRatio']['pairs']} "
            "units)" for c in contrasts) + "."]
    differences = [r for r in result["arms"] if (r.get("passRateDifferenceToAll") or {}).get("pairs")]
    if differences:
        lines += ["", "Compile and pass rates, paired by unit, as the difference from all (mean over units of the "
                  "arm's rate minus all's, a t-interval): " + "; ".join(
                      f"{r['arm']} compile {_signed(r['compiledRateDifferenceToAll'])}, pass "
                      f"{_signed(r['passRateDifferenceToAll'])} ({r['passRateDifferenceToAll']['pairs']} units)"
                      for r in differences) + "."]
        rated = [c for c in result.get("contrasts", []) if (c.get("passRateDifference") or {}).get("pairs")]
        if rated:
            lines += ["", "The same differences between " + "; ".join(
                f"{c['arm']} and {c['against']}: compile {_signed(c['compiledRateDifference'])}, pass "
                f"{_signed(c['passRateDifference'])} ({c['passRateDifference']['pairs']} units)"
                for c in rated) + "."]
    tokens = [r for r in result["arms"] if (r.get("promptTokensRatioToAll") or {}).get("pairs")]
    if tokens:
        lines += ["", "Prompt tokens per unit, paired by unit, as the ratio to all (each arm's own trajectory, so not "
                  "the gating's effect alone): " + "; ".join(
                      f"{r['arm']} {_fmt(r['promptTokensRatioToAll'], suffix='x')} "
                      f"({r['promptTokensRatioToAll']['pairs']} units)" for r in tokens) + "."]
    if result.get("runTools") == "shown":
        lines += ["", "Under `runTools: shown` an arm runs only the tools whose reports its prompts show, so a withheld "
                  "report is never made: *saved tokens* count only the reports that were made and then withheld "
                  "(none, which runs no tool, saves 0 there). The prompt tokens' ratio to all is its saving."]
    lines += ["", "Compile / pass rate along the iterations:", ""]
    for r in result["arms"]:
        lines.append(f"- {r['arm']}: " + ", ".join(f"{p['iteration']}: {p['compiled']:.2f}/{p['pass']:.2f}"
                                                   for p in r["alongIterations"]))
    if after.strip():
        lines += ["", after.strip()]
    return "\n".join(lines) + "\n"
