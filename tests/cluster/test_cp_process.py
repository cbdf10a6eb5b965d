"""Readiness waits fail with the component's name, the reason and the end of its log."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cp_cluster import Etcd, start_apiserver
from cp_process import Component, ComponentError, free_port, http_probe


def test_a_component_that_exits_early_is_named_with_its_status_and_log(tmp_path: Path) -> None:
    comp = Component("flaky", [sys.executable, "-c", "print('listening failed: boom'); raise SystemExit(3)"],
                     tmp_path / "flaky.log").start()
    with pytest.raises(ComponentError) as err:
        comp.wait_ready(lambda: "not yet", deadline_s=10)
    message = str(err.value)
    assert "flaky exited with status 3" in message
    assert "listening failed: boom" in message


def test_a_component_that_never_gets_ready_times_out_with_the_last_probe(tmp_path: Path) -> None:
    comp = Component("sleeper", [sys.executable, "-c", "print('still starting'); import time; time.sleep(60)"],
                     tmp_path / "sleeper.log").start()
    port = free_port()  # nothing listens there
    try:
        with pytest.raises(ComponentError) as err:
            comp.wait_ready(http_probe(f"http://127.0.0.1:{port}/healthz"), deadline_s=1.5)
    finally:
        comp.stop(grace_s=5)
    message = str(err.value)
    assert "sleeper was not ready within 2 s" in message
    assert f"127.0.0.1:{port}/healthz" in message
    assert "still starting" in message
    assert not comp.alive()


def test_apiserver_without_etcd_fails_with_its_own_log(control_plane_bins: Path, tmp_path: Path) -> None:
    dead = Etcd(Component("etcd", [], tmp_path / "unused.log"), f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ComponentError) as err:
        start_apiserver(control_plane_bins, tmp_path, dead, deadline_s=8)
    message = str(err.value)
    assert message.startswith("kube-apiserver ")
    assert "kube-apiserver.log" in message
    assert "127.0.0.1" in message  # the log tail shows the etcd address it could not reach
