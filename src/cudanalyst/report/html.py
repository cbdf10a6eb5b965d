"""The self-contained HTML page of a report: figures embedded as data: URIs, tables, provenance.

No scripts, no external styles or fonts: the file opens the same from a laptop, an S3 console
download or a CI artifact.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cudanalyst.attribution.result import BOOTSTRAP_MIN_UNITS
from cudanalyst.report.compute import coalition_order, summary_lines
from cudanalyst.report.table import NOT_EVALUATED, from_report, plain_rows

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1300px;color:#222;
padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}h2{margin-top:2.2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;margin:.6rem 0;font-size:.9rem}
th,td{border:1px solid #ddd;padding:.25rem .6rem;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
td.ne{color:#888;font-style:italic}figure{margin:1rem 0}figure img{max-width:100%;height:auto}
figcaption{color:#555;font-size:.9rem}.note{color:#555;font-size:.9rem}
pre{background:#f7f7f7;padding:.8rem;overflow:auto;font-size:.8rem;text-align:left}
.badge{display:inline-block;padding:.1rem .5rem;border-radius:.6rem;background:#eee;font-size:.8rem}
.ne-badge{background:#fbe9d0}table.kv td,table.kv th{text-align:left}
"""

FIGURE_CAPTIONS = {
    "attribution.png": "Banzhaf value of each player per generation, per metric; bands and bars are the "
                       "analytic intervals; the diamond at the right is pooled over all generations.",
    "interactions.png": "Pairwise Banzhaf interactions (pooled): red = the pair does better together than "
                        "apart, blue = they substitute for each other.",
    "coalitions.png": "Outcome rate of every coalition (pooled), with intervals; control arms in grey.",
    "tasks.png": "Per-task breakdown: pooled Banzhaf value of each player on each task.",
}


def _e(x: Any) -> str:
    return html.escape(str(x))


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return NOT_EVALUATED
    return f"{x:+.3f}" if signed else f"{x:.3f}"


def _table(rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head, *body = rows
    out = [f'<table class="{cls}"><thead><tr>' if cls else "<table><thead><tr>", *(f"<th>{_e(h)}</th>" for h in head), "</tr></thead><tbody>"]
    for row in body:
        out.append("<tr>")
        for cell in row:
            cls = ' class="ne"' if NOT_EVALUATED in str(cell) else ""
            out.append(f"<td{cls}>{_e(cell)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _interval(est: Mapping[str, Any] | None, signed: bool = True) -> str:
    """value [low, high]; unsigned values are rates, whose intervals are clipped to [0, 1]."""
    if not est or est.get("value") is None:
        return NOT_EVALUATED
    text = _fmt(est["value"], signed)
    if est.get("low") is not None and est.get("high") is not None:
        low, high = (est["low"], est["high"]) if signed else (max(est["low"], 0.0), min(est["high"], 1.0))
        text += f" [{_fmt(low, signed)}, {_fmt(high, signed)}]"
    return text


def _figure(name: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure><img src="data:image/png;base64,{data}" alt="{_e(name)}" data-file="{_e(name)}">'
            f"<figcaption>{_e(FIGURE_CAPTIONS.get(name, name))} (also saved as {_e(name)})</figcaption></figure>")


def _results_section(report: Mapping[str, Any]) -> str:
    att = report["attribution"]
    parts = ["<h2>Results</h2>", f"<p>Pooled over generations {_e(report['generations'])}.</p>",
             _table(plain_rows(from_report(report)))]
    for gen in report["generations"]:
        parts.append(f"<h3>Generation {_e(gen)}</h3>")
        parts.append(_table(plain_rows(from_report(report, gen))))
    rows = [["metric", "player", "Banzhaf", "bootstrap interval", "Shapley"]]
    for game in (g for g in att["games"] if g["pooled"]):
        for player in att["players"]:
            b = game["banzhaf"].get(player)
            s = (game.get("shapley") or {}).get(player)
            # Shown only where it covers what it claims (from BOOTSTRAP_MIN_UNITS units; never of zero width).
            boot = (f"[{_fmt(b['bootstrapLow'], True)}, {_fmt(b['bootstrapHigh'], True)}]"
                    if b and b.get("bootstrapLow") is not None else
                    ("not shown: covers less than it claims" if game["evaluated"] and att.get("bootstrap")
                     and (game.get("units") or 0) < BOOTSTRAP_MIN_UNITS else
                     "-" if game["evaluated"] else NOT_EVALUATED))
            rows.append([game["metric"], player, _interval(b), boot, _interval(s) if s else "-"])
    parts += ["<h3>Banzhaf beside Shapley (pooled)</h3>", _table(rows)]
    pair_rows = [["metric", "pair", "interaction"]]
    for game in (g for g in att["games"] if g["pooled"]):
        for pair, est in game["interactions"].items():
            pair_rows.append([game["metric"], pair, _interval(est)])
    if len(att["players"]) > 1:
        parts += ["<h3>Pairwise interactions (pooled)</h3>", _table(pair_rows)]
    return "".join(parts)


def _games_section(report: Mapping[str, Any]) -> str:
    """Each game's design: estimator, units of replication, programs in and out, balance."""
    att = report["attribution"]
    rows = [["metric", "scope", "estimator", "unit", "units", "programs", "left out", "rollouts", "best of",
             "notes"]]
    for g in att["games"]:
        notes = "; ".join(x for x in (g.get("estimatorNote"), g.get("reason"), g.get("intervalNote"),
                                      g.get("balance"),
                                      *(f"{e['programs']} left out: {e['reason']}" for e in g.get("exclusions", [])))
                          if x)
        rows.append([g["metric"], "pooled" if g["pooled"] else f"generation {g['generation']}", g["estimator"],
                     g.get("unit", "program"), str(g.get("units", "")), str(g["programs"]),
                     str(g.get("excludedPrograms", 0)), str(g["rollouts"]), str(g.get("samples", "")), notes or "-"])
    family = att.get("holmFamily", 0)
    return ("<h2>Games</h2><p class=\"note\">Intervals come from the variation between units of replication "
            "(frozen programs; tasks when generations are pooled). * marks an interval that still excludes 0 after "
            f"Holm's correction over the {family} Banzhaf values and interactions of these games.</p>" + _table(rows))


def _copies_section(report: Mapping[str, Any]) -> str:
    copies = report.get("copies")
    if not copies:
        return ""
    def cell(item: Mapping[str, Any]) -> str:
        return f"{item['unchanged']} of {item['units']} ({item['rate'] * 100:.0f}%)" if item.get("rate") is not None else "-"
    rows = [["arm", "unchanged copies"]] + [[arm, cell(item)] for arm, item in copies["byArm"].items()]
    crow = [["coalition", "unchanged copies"]] + [[k or "(none)", cell(item)] for k, item in copies["byCoalition"].items()]
    policy = report.get("unchanged", "count")
    return ("<h3>Unchanged copies of the frozen program</h3>"
            f"<p class=\"note\">Candidates identical to their frozen program up to whitespace and comments; "
            f"attribution.unchanged = {_e(policy)} ({'counted like any candidate' if policy == 'count' else 'left out of the rates'}).</p>"
            + _table(rows) + _table(crow))


def _coalitions_section(report: Mapping[str, Any]) -> str:
    att = report["attribution"]
    pooled = {g["metric"]: g for g in att["games"] if g["pooled"]}
    players = att["players"]
    keys = sorted({k for g in pooled.values() for k in g["values"]}, key=lambda k: coalition_order(k, players))
    rows = [["coalition", *att["metrics"]]]
    for key in keys:
        rows.append([key or "(none)", *(_interval(pooled[m]["values"].get(key), signed=False) if m in pooled and
                                        pooled[m]["evaluated"] else NOT_EVALUATED for m in att["metrics"])])
    out = ["<h2>Outcome rates per coalition</h2>", _table(rows)]
    controls = [c for c in att.get("controls", []) if c["pooled"]]
    if controls:
        crow = [["control arm", "metric", "rate"]]
        for c in controls:
            est = next(iter(c["rates"].values()), None)
            crow.append([c["arm"], c["metric"], _interval(est, signed=False) if c["evaluated"] else NOT_EVALUATED])
        out += ["<h3>Control arms</h3>", _table(crow)]
    labels = report["units"]["labels"]
    lrow = [["arm", "fail", "compile", "pass", "fast"]]
    lrow += [[arm, *(str(c[k]) for k in ("fail", "compile", "pass", "fast"))] for arm, c in labels.items()]
    out += ["<h3>Sample labels (unit records)</h3>", _table(lrow)]
    reached = report["units"].get("reached")
    if reached:
        mrow = [["arm", *att["metrics"]]]
        mrow += [[arm, *(f"{c[m]['reached']} of {c[m]['known']}" for m in att["metrics"])] for arm, c in reached.items()]
        out += ["<h3>Samples reaching each metric (unit records)</h3><p class=\"note\">Reached of established. "
                "fastVsBaseline: pass and faster than the task's baseline (the paper's fast); fastVsFrozen (fast): "
                "faster than the frozen program. The labels above carry the frozen-program comparison.</p>",
                _table(mrow)]
    refs = report["units"].get("references")
    if refs:
        out += ["<h3>What fast (fastVsFrozen) was measured against</h3>", _table([["reference", "units"],
                ["frozen program", str(refs.get("frozen", 0))], ["task baseline (frozen program untimeable)",
                str(refs.get("baseline", 0))], ["not timed", str(refs.get("notTimed", 0))]])]
    out.append(_copies_section(report))
    return "".join(out)


def _tasks_section(report: Mapping[str, Any]) -> str:
    att = report["attribution"]
    rows = [["task", "programs", "metric", *att["players"]]]
    for task in report["tasks"]:
        for game in task["games"]:
            rows.append([task["task"], str(task["programs"]), game["metric"],
                         *(_interval(game["banzhaf"].get(p)) if game["evaluated"] else NOT_EVALUATED
                           for p in att["players"])])
    return "<h2>Per-task breakdown</h2>" + _table(rows)


def _tools_section(report: Mapping[str, Any]) -> str:
    """Whether the frozen programs' reports are the GPU tools' real output (issue 28)."""
    counts = report.get("toolReports")
    head = "<h2>Tool reports behind the feedback</h2>"
    if not counts:
        return head + '<p class="note">Not available: the trajectory could not be read where the report was built.</p>'
    rows = [["tool", "compiled frozen programs", "ok", "failed (by cause)", "not run", "usable"]]
    warn = []
    for tool, c in counts.items():
        causes = ", ".join(f"{k} {v}" for k, v in sorted(c["failed"].items(), key=lambda kv: -kv[1])) or "0"
        share = f"{c['usable']}/{c['compiled']}" + (f" ({c['usable'] / c['compiled']:.0%})" if c["compiled"] else "")
        rows.append([tool, str(c["compiled"]), str(c["ok"]), f"{sum(c['failed'].values())}: {causes}"
                     if c["failed"] else "0", str(c["notRun"]), share])
        if c.get("mostlyFailed"):
            warn.append(f"{tool}: most of its reports are failures of the tool, not feedback about the program")
    note = ('<p class="note">A failed tool leaves one plain line in its player\'s report; the agent is told that '
            "the tool could not run, never the failure text. Usable: a launched kernel checked (compute-sanitizer); "
            "counters, or event timings with the reason counters were denied (Nsight Compute).</p>")
    return head + _table(rows) + note + "".join(f'<p class="note">warning: {_e(w)}</p>' for w in warn)


def _provenance_section(report: Mapping[str, Any]) -> str:
    prov = report["provenance"]
    rows = [["item", "value"]]
    for key, label in (("run", "run"), ("runFolder", "run folder"), ("createdAt", "report created"),
                       ("codeVersion", "cudanalyst version"), ("gitCommit", "git commit"),
                       ("promptTemplateVersion", "prompt-template version"), ("planDigest", "plan digest")):
        rows.append([label, str(prov.get(key) or "unknown")])
    for role, model in prov.get("models", {}).items():
        rows.append([f"model: {role}", model])
    for role, names in prov.get("modelsInCandidates", {}).items():
        rows.append([f"model served ({role})", ", ".join(names)])
    spec = json.dumps(prov["spec"], indent=2, sort_keys=False)
    return ("<h2>Provenance</h2>" + _table(rows, "kv") +
            f"<details><summary>spec (click to show)</summary><pre>{_e(spec)}</pre></details>")


def _usage_section(report: Mapping[str, Any]) -> str:
    """Tokens per stage as the servers counted them, and the cost where the spec gives a price."""
    used = report.get("usage") or {}
    stages = used.get("stages") or {}
    if not stages:
        return ""
    rows = [["stage", "model", "requests", "prompt tokens", "completion tokens", "estimated cost"]]
    for stage, row in stages.items():
        cost = f"{row['cost']:.4f} {row.get('currency', '')}" if row.get("cost") is not None else "no price in the spec"
        rows.append([stage, row["model"], f"{row['requests']:,}", f"{row['promptTokens']:,}",
                     f"{row['completionTokens']:,}", cost])
    if used.get("cost") is not None:
        rows.append(["all", "", "", f"{used['promptTokens']:,}", f"{used['completionTokens']:,}",
                     f"{used['cost']:.4f} {used['currency']}"])
    return ("<h2>Tokens and cost</h2><p class=\"note\">From the servers' usage fields, summed over the shards "
            "(and over interrupted attempts); cost = tokens x the spec's price per million.</p>" + _table(rows))


def render_html(report: Mapping[str, Any], figures: Mapping[str, bytes]) -> str:
    """The whole page; `figures` maps file names to PNG bytes, in display order."""
    not_eval = report["notEvaluated"]
    badge = "".join(f' <span class="badge ne-badge">{_e(m)}: {NOT_EVALUATED}</span>' for m in not_eval)
    units = report["units"]
    planned = f" of {units['planned']} planned units" if units.get("planned") else ""
    header = (f"<h1>Attribution report: {_e(report['run'])}</h1>"
              f"<p>Players: {_e(', '.join(report['players']))}. Metrics: {_e(', '.join(report['metrics']))}"
              f"{badge}. {units['outcomes']} outcome records"
              f"{planned}; "
              f"intervals at {report['confidence'] * 100:g}% confidence.</p>")
    for line in summary_lines(dict(report)):
        header += f'<p class="note">{_e(line)}</p>'
    if not_eval:
        header += '<p class="note">Metrics not evaluated are shown as such, not as zeros.</p>'
    notes = "".join(f"<li>{_e(n)}</li>" for n in report["attribution"].get("notes", []))
    figs = "".join(_figure(name, png) for name, png in figures.items())
    body = (header + "<h2>Figures</h2>" + figs + _results_section(report) + _games_section(report) + _tools_section(report) +
            _coalitions_section(report) +
            _tasks_section(report) + _usage_section(report) + _provenance_section(report) + f"<h2>Method notes</h2><ul>{notes}</ul>")
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(report["run"])}: '
            f"cudanalyst report</title><style>{STYLE}</style></head><body>{body}</body></html>\n")
