"""Following runs on child events (cudanalyst.operator.follow, Operations.refresh): without a cluster."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest
from harness import NS, RUNS, operator_config, run_body

from cudanalyst.operator.follow import (
    POD_QUIET,
    ChildChanges,
    Follower,
    Sweeper,
    job_relevant,
    pod_relevant,
    run_key,
)
from cudanalyst.operator.kube import Kube
from cudanalyst.operator.lifecycle import Operations, Services
from cudanalyst.operator.pods import job_summary, pod_summary


def test_child_changes_report_only_a_different_summary() -> None:
    changes = ChildChanges()
    assert changes.changed("u1", {"active": 1})
    assert not changes.changed("u1", {"active": 1})
    assert changes.changed("u1", {"active": 0, "succeeded": 1})
    assert changes.changed("u2", {"active": 1})
    assert changes.forget("u1") == {"active": 0, "succeeded": 1}
    assert changes.forget("u1") is None and len(changes) == 1
    assert changes.changed("u1", {"active": 0, "succeeded": 1})  # seen anew after a deletion


def test_a_quiet_first_sight_is_no_change() -> None:
    changes = ChildChanges()
    assert not changes.changed("p1", POD_QUIET, POD_QUIET)
    assert changes.changed("p1", {"problem": {"reason": "Unschedulable"}}, POD_QUIET)
    assert changes.changed("p1", POD_QUIET, POD_QUIET)  # the problem went: that is news
    assert changes.changed("p2", {"problem": {"reason": "OOMKilled"}}, POD_QUIET)


def test_only_what_the_status_depends_on_is_relevant() -> None:
    pod = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                                               "reason": "Unschedulable", "message": "0/4 nodes"}]}
    running = pod_summary({"metadata": {"name": "p"}, "status": {"phase": "Running"}})
    succeeded = pod_summary({"metadata": {"name": "p"}, "status": {"phase": "Succeeded"}})
    assert pod_relevant(running) == pod_relevant(succeeded) == POD_QUIET  # a phase alone changes nothing
    assert pod_relevant(pod_summary({"metadata": {"name": "p"}, "status": pod}))["problem"]["reason"] == \
        "Unschedulable"
    job = {"metadata": {"name": "j"}, "status": {"active": 1, "ready": 0}}
    ready = {"metadata": {"name": "j"}, "status": {"active": 1, "ready": 1}}
    done = {"metadata": {"name": "j"}, "status": {"active": 0, "succeeded": 1}}
    assert job_relevant(job_summary(job)) == job_relevant(job_summary(ready))
    assert job_relevant(job_summary(job)) != job_relevant(job_summary(done))


def test_run_key_comes_from_the_run_label() -> None:
    meta = {"namespace": "ns", "name": "r1-runner", "labels": {"cudanalyst.dev/run": "r1"}}
    assert run_key(meta, "cudanalyst.dev/run") == ("ns", "r1")
    assert run_key({"namespace": "ns", "name": "x"}, "cudanalyst.dev/run") is None


@pytest.mark.asyncio
async def test_pokes_during_a_refresh_fold_into_one_more_refresh() -> None:
    follower = Follower()
    gate = asyncio.Event()
    calls: list[str] = []

    def refresh(tag: str) -> Any:
        async def run() -> bool:
            calls.append(tag)
            if tag == "first":
                await gate.wait()
            return True
        return run

    key = ("ns", "r1")
    first = asyncio.create_task(follower.poke(key, refresh("first")))
    await asyncio.sleep(0)
    # Three changes while the first refresh is under way: one more refresh, with the latest callable.
    for tag in ("a", "b", "c"):
        await follower.poke(key, refresh(tag))
    other = asyncio.create_task(follower.poke(("ns", "r2"), refresh("other run")))
    await asyncio.sleep(0)
    assert calls == ["first", "other run"]  # another run is not held up
    gate.set()
    await asyncio.gather(first, other)
    assert calls == ["first", "other run", "c"]
    await follower.poke(key, refresh("later"))
    assert calls[-1] == "later"


@pytest.mark.asyncio
async def test_a_run_not_started_yet_is_refreshed_when_its_start_is_seen() -> None:
    follower = Follower()
    started = False
    calls = 0

    async def refresh() -> bool:
        nonlocal calls
        calls += 1
        return started

    key = ("ns", "r1")
    await follower.poke(key, refresh)
    assert follower.waiting() == {key} and calls == 1
    started = True
    await follower.started(key, refresh)
    assert follower.waiting() == set() and calls == 2
    await follower.started(key, refresh)  # already followed: nothing to do
    assert calls == 2
    await follower.poke(("ns", "r2"), refresh)
    await follower.started(("ns", "r3"), refresh)
    assert calls == 3


@pytest.mark.asyncio
async def test_a_sweep_refreshes_each_running_run_once_and_survives_a_failing_one() -> None:
    calls: list[tuple[str, str]] = []

    def refresh_of(key: tuple[str, str]) -> Any:
        async def run() -> bool:
            calls.append(key)
            if key == ("ns", "broken"):
                raise RuntimeError("the API server said no")
            return True
        return run

    sweeper = Sweeper(3600, Follower(), workers=2)
    try:
        for name, running in (("r1", True), ("broken", True), ("r2", True), ("done", False), ("r3", True)):
            sweeper.track(("ns", name), running, refresh_of)
        sweeper.track(("ns", "r3"), False, refresh_of)  # finished since
        sweeper.track(("ns", "gone"), True, refresh_of)
        sweeper.forget(("ns", "gone"))  # deleted
        await sweeper.sweep()
        assert sorted(calls) == [("ns", "broken"), ("ns", "r1"), ("ns", "r2")]
        assert sweeper.running() == [("ns", "r1"), ("ns", "broken"), ("ns", "r2")]
        await sweeper.sweep()  # the failing run is tried again, and so is every other
        assert len(calls) == 6 and calls.count(("ns", "broken")) == 2
    finally:
        sweeper.stop()


@pytest.mark.asyncio
async def test_a_sweep_runs_at_most_its_workers_at_once() -> None:
    gate = asyncio.Event()
    active = peak = 0

    def refresh_of(key: tuple[str, str]) -> Any:
        async def run() -> bool:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            await gate.wait()
            active -= 1
            return True
        return run

    sweeper = Sweeper(3600, Follower(), workers=3)
    try:
        for i in range(20):
            sweeper.track(("ns", f"r{i}"), True, refresh_of)
        sweep = asyncio.create_task(sweeper.sweep())
        for _ in range(10):
            await asyncio.sleep(0)
        assert peak == 3
        gate.set()
        await sweep
        assert peak == 3 and active == 0 and sweeper.sweeps == 1
    finally:
        sweeper.stop()


@pytest.mark.asyncio
async def test_the_sweep_starts_with_the_first_run_event_and_repeats() -> None:
    calls = 0

    def refresh_of(key: tuple[str, str]) -> Any:
        async def run() -> bool:
            nonlocal calls
            calls += 1
            return True
        return run

    sweeper = Sweeper(0.01, Follower())
    try:
        sweeper.track(("ns", "r1"), True, refresh_of)
        for _ in range(500):
            if sweeper.sweeps >= 3:
                break
            await asyncio.sleep(0.01)
        assert sweeper.sweeps >= 3 and calls >= 3
    finally:
        sweeper.stop()


def test_no_timer_or_daemon_on_runs() -> None:
    """kopf keeps the last whole body of every object of a kind that has a timer or daemon, finished ones too, for
    the operator's life (its DaemonsMemory.live_fresh_body): the runs' safety net is the Sweeper, which keeps keys.
    Recordings, a few per batch, keep their timer."""
    from cudanalyst.operator.handlers import build_registry

    registry = build_registry(Services(operator_config()))
    spawning = registry._spawning.get_all_handlers()  # kopf has no public listing of timers and daemons
    assert [h.id for h in spawning] == ["recording_follow"]
    assert {h.selector.any_name for h in spawning if h.selector is not None} == {"trajectoryrecordings"}


class FakeKube:
    """Test double of operator.kube.Kube for Operations.refresh: one run, status patches recorded."""

    def __init__(self, body: dict[str, Any] | None) -> None:
        self.body = body
        self.patches: list[dict[str, Any]] = []
        self.created: list[str] = []

    def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.body

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> bool:
        self.patches.append(status)
        return True

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> bool:
        self.created.append(body["metadata"]["name"])
        return True

    def create_job(self, namespace: str, body: dict[str, Any]) -> bool:
        self.created.append(body["metadata"]["name"])
        return True


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """kopf.event needs a running operator's queue; here the reasons are recorded instead."""
    posted: list[str] = []
    monkeypatch.setattr(kopf, "event", lambda body, *, type, reason, message: posted.append(reason))
    return posted


def _services(kube: FakeKube) -> Services:
    return Services(operator_config(), kube_factory=lambda: kube,  # type: ignore[arg-type,return-value]
                    clock=lambda: datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC))


def _job(**status: Any) -> dict[str, Any]:
    return {"name": "r1-runner", "suspend": False, "active": 0, "ready": 0, "succeeded": 0, "failed": 0,
            "failedIndexes": "", "conditions": [], **status}


def test_refresh_of_a_run_not_started_writes_nothing(trajectory: str, output: str) -> None:
    kube = FakeKube(run_body("r1", trajectory, output))
    assert Operations(_services(kube)).refresh("ns1", "r1", [_job(active=2)], []) is False
    assert kube.patches == []


def test_refresh_of_a_gone_run_is_done(trajectory: str, output: str) -> None:
    kube = FakeKube(None)
    assert Operations(_services(kube)).refresh("ns1", "r1", [], []) is True
    assert kube.patches == [] and kube.created == []


def test_refresh_writes_only_what_changed(trajectory: str, output: str, events: list[str]) -> None:
    body = run_body("r1", trajectory, output)
    body["status"] = {"startTime": "2026-01-01T12:00:00Z", "phase": "Running",
                      "progress": {"done": 0, "total": 64}}
    kube = FakeKube(body)
    ops = Operations(_services(kube))
    assert ops.refresh("ns1", "r1", [_job(active=2)], []) is True
    (patch,) = kube.patches
    assert patch["shards"] == {"active": 2, "succeeded": 0, "failed": 0}
    assert patch["message"] == "2 shard(s) running, 0/64 units" and "phase" not in patch  # still Running
    # The same observation again: the status already says all of it, so nothing is sent.
    body["status"].update(patch)
    assert ops.refresh("ns1", "r1", [_job(active=2)], []) is True
    assert len(kube.patches) == 1
    assert events == ["Running"]  # the Ready condition's reason was unset before: one transition event


def test_refresh_after_the_job_vanished_makes_it_again(trajectory: str, output: str, events: list[str]) -> None:
    body = run_body("r1", trajectory, output)
    body["status"] = {"startTime": "2026-01-01T12:00:00Z", "phase": "Running",
                      "progress": {"done": 0, "total": 64}}
    kube = FakeKube(body)
    assert Operations(_services(kube)).refresh("ns1", "r1", [], []) is True
    assert kube.created == ["r1-spec", "r1-runner"]
    assert kube.patches[0]["phase"] == "Pending"
    assert events == ["JobCreated", "CreatingJob"]


@pytest.mark.asyncio
async def test_status_patches_and_gets_reuse_one_connection(kube: Any, trajectory: str, output: str) -> None:
    """Unparsed responses are read to the end, so each call does not open a new connection (at scale, the
    TLS handshakes of fresh connections took most of the operator's CPU)."""
    kube.objects[RUNS, NS, "r1"] = run_body("r1", trajectory, output)
    client = Kube.from_environment()

    def calls() -> dict[str, Any] | None:
        for i in range(5):
            assert client.patch_run_status(NS, "r1", {"message": f"m{i}"})
            body = client.get_run(NS, "r1")
        return body

    try:
        body = await asyncio.to_thread(calls)
        manager = client.api.rest_client.pool_manager
        # urllib3's pool container refuses plain iteration (not thread-safe); keys() is its safe copy.
        pools = [manager.pools[key] for key in manager.pools.keys()]  # noqa: SIM118
        assert [pool.num_connections for pool in pools] == [1]
        assert body is not None and body["status"]["message"] == "m4"
        assert await asyncio.to_thread(client.get_run, NS, "gone") is None
    finally:
        client.close()


class _ExistingJobKube(FakeKube):
    """The run's Job is there already (an operator restarted): create answers 'exists', as the API's 409 does."""

    def create_job(self, namespace: str, body: dict[str, Any]) -> bool:
        self.created.append(body["metadata"]["name"])
        return False


def test_a_restart_leaves_the_verdict_to_the_refresh_from_the_live_job(trajectory: str, output: str,
                                                                       events: list[str]) -> None:
    """kopf's resume handler (start) and the refresh that the Job's first event brings run side by side after
    a restart. The start handler's patch is applied when it returns, so if it judged from the Job as made
    ("PodsStarting") it could land after the refresh had written Succeeded and leave a finished run with
    Ready=False for good (seen once in tests/cluster's killed-operator test). It writes no verdict now."""
    body = run_body("r1", trajectory, output)
    body["status"] = {"startTime": "2026-01-01T12:00:00Z", "phase": "Running", "jobName": "r1-runner",
                      "progress": {"done": 32, "total": 64},
                      "conditions": [{"type": "Ready", "status": "False", "reason": "Running", "message": "",
                                      "lastTransitionTime": "2026-01-01T12:00:00Z"}]}
    kube = _ExistingJobKube(body)
    ops = Operations(_services(kube))
    stale = {**body, "status": dict(body["status"])}  # what kopf handed the resume handler
    patch = kopf.Patch()
    ops.start(stale, patch)
    assert kube.created == ["r1-spec", "r1-runner"]  # tried, found there
    assert not {"phase", "conditions", "message"} & set(patch.get("status", {}))
    # The order that lost the verdict: the refresh first (the Job is complete), then the start handler's patch.
    assert ops.refresh("ns1", "r1", [_job(succeeded=2, conditions=[{"type": "Complete", "status": "True"}])], [])
    judged = dict(kube.patches[-1])
    assert judged["phase"] != "Running"  # the refresh saw the finished Job (here its store has no outcomes)
    body["status"].update(judged)
    body["status"].update(dict(patch.get("status", {})))
    assert body["status"]["phase"] == judged["phase"] and body["status"]["conditions"] == judged["conditions"]


def test_a_start_handed_a_body_from_before_the_first_start_leaves_the_live_status_alone(
        trajectory: str, output: str, events: list[str]) -> None:
    """kopf ran `start` a second time with the body from before the first one's patch (no status at all; kmock's
    follow test, about 1 run in 15). Judged from that body and the Job as made, its patch turned a Failed run back to
    Running. The status the API server holds decides now."""
    body = run_body("r1", trajectory, output)
    stale = {**body, "status": {}}  # what kopf handed the second start
    for phase, reason in (("Failed", "FailedIndexes"), ("Running", "Running")):
        body["status"] = {"startTime": "2026-01-01T12:00:00Z", "phase": phase, "jobName": "r1-runner",
                          "progress": {"done": 0, "total": 64},
                          "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": "",
                                          "lastTransitionTime": "2026-01-01T12:00:00Z"}]}
        kube = _ExistingJobKube(body)
        patch = kopf.Patch()
        Operations(_services(kube)).start(stale, patch)
        assert not {"phase", "conditions", "message"} & set(patch.get("status", {})), (phase, dict(patch))
        if phase == "Failed":
            assert kube.created == [] and not patch.get("status")  # a finished run: nothing made, nothing written


def test_a_start_that_outlasts_the_run_makes_no_job_after_it_finished(trajectory: str, output: str,
                                                                      events: list[str]) -> None:
    """A second start read the live status while the run was running, then spent long enough planning that the run
    failed and the TTL controller removed its Job; creating the Job then would run the finished run again (kmock's
    TTL test under CI load). The status is read again just before the Job is made."""
    body = run_body("r1", trajectory, output)
    running = {"startTime": "2026-01-01T12:00:00Z", "phase": "Running", "jobName": "r1-runner",
               "progress": {"done": 0, "total": 64}}
    failed = {**running, "phase": "Failed"}
    statuses = iter([running, failed])

    class FinishesWhilePlanning(FakeKube):
        def get_run(self, namespace: str, name: str) -> dict[str, Any] | None:
            return {**body, "status": next(statuses, failed)}

    kube = FinishesWhilePlanning(body)
    patch = kopf.Patch()
    Operations(_services(kube)).start({**body, "status": dict(running)}, patch)
    assert kube.created == [] and not patch.get("status")
    # The same start with the run still running makes its children as before.
    statuses = iter([running, running])
    Operations(_services(kube)).start({**body, "status": dict(running)}, kopf.Patch())
    assert kube.created == ["r1-spec", "r1-runner"]
