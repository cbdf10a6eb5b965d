"""1,000+ specs generated from the CRD's own schema (tests/cluster/spec_fuzz.py), on the real API server, the
operator and `cudanalyst validate` / `cudanalyst plan` in-process (issue 33, part 2).

Cheap by design: every spec goes to the one API server as a server-side dry-run create (schema, defaults, CEL,
strict field validation as `kubectl apply` asks for it; nothing stored), and through the operator's own parse of
what the API server returns (defaults applied). Local mode is `cudanalyst validate` run in this process on a
file of the spec. Then a sample is created for real while the operator runs: every spec the API server admits
but the operator must refuse, and valid ones with few shards (each makes a Job and pods). `cudanalyst run` is
not run on them: its verdict on a spec is `validate` then `plan`, both run here in-process; what it adds is
executing the units (a model server per run, 25-40 s each), which test_e2e_run.py and the local-mode tests cover.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cp_cluster import Cluster, wait_for
from e2e_support import OperatorProcess, Runs, condition, is_true
from spec_fuzz import Case, field_cases, names_a_field, random_cases

from cudanalyst.api import API_GROUP, API_VERSION, PLURAL, SpecError
from cudanalyst.operator.lifecycle import parse_body

pytestmark = pytest.mark.cluster

PLANNER_ENDPOINT = "http://127.0.0.1:9/v1"  # never reached: no pod is played
TOTAL = 1000
RANDOM_AT_LEAST = 200
REAL_INVALID = 40  # admitted by the API server, refused by the operator: created for real, at most this many
REAL_VALID = 12
# A valid spec may still stall on these. InvalidChild: the API server refused the run's Job for a field the spec's
# schema let through; the operator stalls (no Job, no loop) with the API server's words. Each one found is then
# held to Kubernetes' syntax in the spec (tolerations, quantities, label values, names: api/spec.py).
OPERATOR_REASONS = {"PlanFailed", "StoreUnavailable", "KueueNotEnabled", "InvalidChild"}


def local_validate(case: Case, folder: Path) -> tuple[int, str]:
    """`cudanalyst validate FILE` in this process: its exit status and what it printed."""
    from cudanalyst.cli import main

    path = folder / f"{case.name}.json"
    path.write_text(json.dumps(case.body))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(["validate", str(path)])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def local_plan(case: Case, folder: Path) -> tuple[int, str]:
    from cudanalyst.cli import main

    path = folder / f"{case.name}.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = main(["plan", "--json", str(path)])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def dry_run(co: Any, namespace: str, case: Case) -> tuple[bool, str, dict[str, Any] | None]:
    """The API server's verdict on creating the spec (nothing stored): (admitted, its message, the object)."""
    from kubernetes.client.exceptions import ApiException

    try:
        obj = co.create_namespaced_custom_object(API_GROUP, API_VERSION, namespace, PLURAL, case.body,
                                                 dry_run="All", field_validation="Strict")
        return True, "", dict(obj)
    except ApiException as exc:
        if exc.status not in (400, 422):
            raise
        try:
            message = json.loads(exc.body).get("message", exc.body)
        except ValueError:
            message = str(exc.body)
        return False, str(message), None


def operator_verdict(obj: dict[str, Any]) -> tuple[bool, str]:
    """The operator's own parse of the object as the API server holds it (lifecycle.parse_body)."""
    try:
        parse_body(obj)
        return True, ""
    except SpecError as exc:
        return False, str(exc)


def test_fuzzed_specs_agree_between_api_server_operator_and_local_mode(
        cluster: Cluster, operator: OperatorProcess, runs: Runs, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    cases = field_cases(store, PLANNER_ENDPOINT)
    # Several fields at once, always some (the single-field mutations alone passed 1,000 once the spec grew).
    cases += random_cases(max(RANDOM_AT_LEAST, TOTAL - len(cases)), store, PLANNER_ENDPOINT)
    assert len(cases) >= TOTAL
    files = tmp_path / "specs"
    files.mkdir()

    local = {c.name: local_validate(c, files) for c in cases}
    assert {code for code, _ in local.values()} <= {0, 2}, "validate exits 0 (valid) or 2 (invalid), nothing else"
    with ThreadPoolExecutor(4) as pool:
        api = dict(zip([c.name for c in cases], pool.map(lambda c: dry_run(runs.co, runs.ns, c), cases), strict=True))
    op = {name: operator_verdict(obj) for name, (ok, _, obj) in api.items() if ok and obj is not None}

    disagree, unnamed = [], []
    for case in cases:
        local_ok = local[case.name][0] == 0
        api_ok, api_msg, _ = api[case.name]
        op_ok, op_msg = op.get(case.name, (False, ""))
        cluster_ok = api_ok and op_ok
        if local_ok != cluster_ok:
            disagree.append(f"{case.how}: local {'valid' if local_ok else 'invalid'}, cluster "
                            f"{'valid' if cluster_ok else 'invalid'} ({api_msg or op_msg or local[case.name][1]})"[:400])
        for refused, message in ((not local_ok, local[case.name][1]), (not api_ok, api_msg),
                                 (api_ok and not op_ok, op_msg)):
            if refused and not names_a_field(message, case.paths):
                unnamed.append(f"{case.how}: {message}"[:400])
    valid = [c for c in cases if local[c.name][0] == 0]
    api_only = [c for c in cases if api[c.name][0] and not op[c.name][0]]
    print(f"{len(cases)} specs: {len(valid)} valid, {len(cases) - len(valid)} invalid "
          f"({sum(not api[c.name][0] for c in cases)} refused by the API server, {len(api_only)} only by the operator)")
    assert not disagree, f"{len(disagree)} specs where local mode and the cluster disagree:\n" + "\n".join(disagree[:40])
    assert not unnamed, f"{len(unnamed)} refusals that name no changed field:\n" + "\n".join(unnamed[:40])
    assert len(valid) >= 200 and len(cases) - len(valid) >= 400  # both sides are well covered

    # For real, with the operator: the specs only it refuses, and a few valid ones (1-2 shards: each makes pods).
    small = [c for c in valid if int(((c.body["spec"].get("resources") or {}).get("shards")) or 1) <= 2
             and not (c.body["spec"].get("trajectory") or {}).get("recording")]
    sample_valid = small[:: max(1, len(small) // REAL_VALID)][:REAL_VALID]
    for case in api_only[:REAL_INVALID] + sample_valid:
        runs.create(case.body)
    for case in api_only[:REAL_INVALID]:
        run = runs.wait(case.name, lambda r: is_true(r, "Stalled"), 60, "Stalled", operator)
        stalled = condition(run, "Stalled")
        assert stalled["reason"] == "InvalidSpec" and names_a_field(stalled["message"], case.paths), (case.how,
                                                                                                    stalled)
        assert runs.jobs(case.name) == [], case.how  # nothing half-made
    for case in sample_valid:
        plan_code, plan_out = local_plan(case, files)
        run = runs.wait(case.name, lambda r: (r.get("status") or {}).get("startTime") or is_true(r, "Stalled"),
                        60, "started or stalled", operator)
        stalled = condition(run, "Stalled")
        if is_true(run, "Stalled"):
            assert stalled["reason"] in OPERATOR_REASONS, (case.how, stalled)
            assert runs.jobs(case.name) == [], case.how
            assert (plan_code == 2) == (stalled["reason"] == "PlanFailed"), (case.how, plan_out, stalled)
        else:
            assert plan_code == 0, (case.how, plan_out)
            jobs = wait_for(lambda n=case.name: runs.jobs(n), 30, f"the Job of {case.name}")
            shards = int(((case.body["spec"].get("resources") or {}).get("shards")) or 1)
            assert len(jobs) == 1 and jobs[0].spec.completions == shards, case.how
    # The operator never crashed and did not loop: a handful of start attempts per created run at most.
    assert operator.alive() and operator.healthy()
    starts = re.search(r'^cudanalyst_reconcile_duration_seconds_count\{handler="start"\} ([0-9.e+]+)$',
                       operator.metrics(), re.M)
    created = len(api_only[:REAL_INVALID]) + len(sample_valid)
    assert starts is not None and float(starts.group(1)) <= 3 * created, starts
