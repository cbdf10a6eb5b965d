"""The test harness decides how each pod ends. kwok runs a bound pod forever until the harness
annotates it; kwok's stages (kwok-stages.yaml) then write the terminated container statuses and the
phase, as a kubelet would, so Jobs see ordinary pod completions and failures."""

from __future__ import annotations

from typing import Any

from cp_cluster import wait_for

RESULT = "harness.cudanalyst.dev/result"
EXIT_CODE = "harness.cudanalyst.dev/exit-code"
REASON = "harness.cudanalyst.dev/reason"


class PodHarness:
    def __init__(self, core_v1: Any) -> None:
        self.core = core_v1  # a kubernetes.client.CoreV1Api

    def finish(self, namespace: str, name: str, *, succeeded: bool = True, exit_code: int = 1,
               reason: str = "Error") -> None:
        """Ends the pod: Succeeded with exit code 0, or Failed with `exit_code` and `reason`."""
        if not succeeded and exit_code == 0:
            raise ValueError(f"pod {namespace}/{name}: a failed pod needs a non-zero exit code")
        annotations = {RESULT: "Succeeded" if succeeded else "Failed"}
        if not succeeded:
            annotations |= {EXIT_CODE: str(exit_code), REASON: reason}
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})

    def wait_phase(self, namespace: str, name: str, phases: set[str], deadline_s: float = 30) -> Any:
        def phase() -> Any:
            pod = self.core.read_namespaced_pod(name, namespace)
            return pod if pod.status.phase in phases else None

        return wait_for(phase, deadline_s, f"pod {namespace}/{name} to reach {sorted(phases)}")

    def running_pods(self, namespace: str, selector: str, count: int, deadline_s: float = 60) -> list[Any]:
        """Waits until `count` pods matching `selector` are bound and Running; returns them by name."""
        def running() -> list[Any] | None:
            pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
            live = [p for p in pods if p.status.phase == "Running" and p.spec.node_name]
            return sorted(live, key=lambda p: p.metadata.name) if len(live) >= count else None

        return wait_for(running, deadline_s, f"{count} running pods matching {selector!r} in {namespace}")
