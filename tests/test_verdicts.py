"""Verification verdicts are stored once and found again by what decides them (runner.kernels.verdicts).

The pool below is a stand-in for the GPU workers (none here): it answers verify requests and counts
them, so these tests check the cache and the kernel stage's use of it, not verification itself
(tests/gpu/test_early_verification.py does that on the GPU).
"""

from __future__ import annotations

from typing import Any

import pytest

from cudanalyst.runner.kernels.verify import verdicts
from cudanalyst.runner.kernels.verify.verdicts import VerdictCache, verify_once
from cudanalyst.runner.kernels.workers.requests import EvalSettings, derive_seeds, verify_request
from cudanalyst.tasks import get_task

GEMM = get_task("gemm")


class CountingPool:
    def __init__(self, reply: dict[str, Any]) -> None:
        self.reply, self.calls = reply, 0

    def verify(self, request: dict[str, Any], timeout_s: float, ready_s: float | None = None) -> dict[str, Any]:
        self.calls += 1
        return dict(self.reply)


def _request(cubin: bytes = b"\x7fELF-1", **cfg: Any) -> dict[str, Any]:
    cfg.setdefault("seed", 7)  # a fixed seed: the same inputs each call (else each call draws a secret)
    return verify_request(GEMM, cubin, EvalSettings(**cfg))


def test_a_verdict_is_computed_once_then_read(tmp_path):
    cache = VerdictCache(tmp_path)
    pool = CountingPool({"ok": True, "correct": False, "stage": "verify", "reason": "seed 1000: differs",
                         "seconds": 0.25, "sticky": True})
    first = verify_once(pool, cache, _request(), 10)
    again = verify_once(pool, cache, _request(), 10)
    assert pool.calls == 1
    assert again["reason"] == first["reason"] and again["seconds"] == 0.25 and again["cached"]
    assert "sticky" not in again  # the worker's state then, not part of the verdict


@pytest.mark.parametrize("change", [
    {"cubin": b"\x7fELF-2"}, {"correctness_trials": 2}, {"rtol": 1e-3}, {"atol": 1e-2},
])
def test_anything_that_decides_the_verdict_is_in_its_key(tmp_path, change):
    cache = VerdictCache(tmp_path)
    cache.put(_request(), {"ok": True, "correct": True, "reason": "correct"})
    cubin = change.pop("cubin", b"\x7fELF-1")
    assert cache.get(_request(cubin, **change)) is None
    assert cache.get(_request()) is not None


def test_other_sizes_and_another_harness_miss(tmp_path, monkeypatch):
    cache = VerdictCache(tmp_path)
    cache.put(_request(), {"ok": True, "correct": True, "reason": "correct"})
    other = verify_request(GEMM.with_sizes(NI=64), b"\x7fELF-1", EvalSettings(seed=7))
    assert cache.get(other) is None
    monkeypatch.setattr(verdicts, "harness_version", lambda: "another-harness")
    assert cache.get(_request()) is None


@pytest.mark.parametrize("reply", [
    {"ok": False, "kind": "timeout", "error": "no result within 60 s"},
    {"ok": False, "kind": "crash", "error": "the worker process died"},
    {"ok": True, "pid": 7},  # no verdict in it
])
def test_timeouts_crashes_and_non_verdicts_are_not_kept(tmp_path, reply):
    cache = VerdictCache(tmp_path)
    pool = CountingPool(reply)
    verify_once(pool, cache, _request(), 10)
    verify_once(pool, cache, _request(), 10)
    assert pool.calls == 2 and not list(tmp_path.rglob("*.json"))


def test_a_verdict_is_keyed_by_the_inputs_it_was_made_on(tmp_path):
    """Runs with different secrets judge on different inputs: a verdict of one is never read by the other;
    the same secret (a resumed run, another shard) finds it."""
    cache = VerdictCache(tmp_path)
    one = verify_request(GEMM, b"\x7fELF-1", EvalSettings(), derive_seeds(11, 5))
    cache.put(one, {"ok": True, "correct": True, "reason": "correct"})
    assert cache.get(verify_request(GEMM, b"\x7fELF-1", EvalSettings(), derive_seeds(11, 5))) is not None
    assert cache.get(verify_request(GEMM, b"\x7fELF-1", EvalSettings(), derive_seeds(12, 5))) is None
    # No secret and no fixed seed: a fresh secret per call, so nothing is shared by accident.
    assert cache.get(verify_request(GEMM, b"\x7fELF-1", EvalSettings())) is None
