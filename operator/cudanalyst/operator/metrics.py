"""Prometheus metrics of the operator: runs by phase, units done, reconcile errors and latency."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

PHASES = ("Pending", "Queued", "Running", "Suspended", "Aggregating", "Succeeded", "Failed", "Stalled")


class Metrics:
    """One set of metrics in its own registry (tests and benchmarks make as many as they like)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.runs = Gauge("cudanalyst_runs", "AttributionRuns by phase.", ["phase"], registry=self.registry)
        self.units_done = Gauge(
            "cudanalyst_units_done", "Units with an outcome record, per run.", ["namespace", "run"],
            registry=self.registry,
        )
        self.units_total = Gauge(
            "cudanalyst_units_total", "Units in the plan, per run.", ["namespace", "run"], registry=self.registry
        )
        self.errors = Counter(
            "cudanalyst_reconcile_errors_total", "Reconcile attempts that raised, by handler and reason.",
            ["handler", "reason"], registry=self.registry,
        )
        self.latency = Histogram(
            "cudanalyst_reconcile_duration_seconds", "Time spent in one reconcile, by handler.", ["handler"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=self.registry,
        )
        self._phase_of: dict[tuple[str, str], str] = {}
        for phase in PHASES:
            self.runs.labels(phase).set(0)

    @contextmanager
    def reconcile(self, handler: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        except Exception as exc:
            self.errors.labels(handler, type(exc).__name__).inc()
            raise
        finally:
            self.latency.labels(handler).observe(time.perf_counter() - start)

    def set_phase(self, namespace: str, run: str, phase: str) -> None:
        key = (namespace, run)
        old = self._phase_of.get(key)
        if old == phase:
            return
        if old is not None:
            self.runs.labels(old).dec()
        self._phase_of[key] = phase
        self.runs.labels(phase).inc()

    def set_progress(self, namespace: str, run: str, done: int, total: int) -> None:
        self.units_done.labels(namespace, run).set(done)
        self.units_total.labels(namespace, run).set(total)

    def forget(self, namespace: str, run: str) -> None:
        old = self._phase_of.pop((namespace, run), None)
        if old is not None:
            self.runs.labels(old).dec()
        for gauge in (self.units_done, self.units_total):
            with suppress(KeyError):
                gauge.remove(namespace, run)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
