"""A recorder's gate settings for evaluator tests: what evolve.py gives OpenEvolve's workers, in a test's folder."""

from __future__ import annotations

from pathlib import Path

import pytest


def shown_tools_only(monkeypatch: pytest.MonkeyPatch, folder: Path, withheld: dict[str, list[str]]) -> Path:
    """Point this process's evaluator at a policy that withholds `withheld` ({state: [component]}) under
    `runTools: shown`; the settings file's path (gate.ENV names it)."""
    from cudanalyst.api.policy import ComponentRule, PolicySpec, StateRule
    from cudanalyst.runner.record import gate

    policy = PolicySpec(states={s: StateRule(components=[ComponentRule(component=c, show=False) for c in cs])
                                for s, cs in withheld.items()})
    settings = gate.GateSettings(policy=policy, gating="policy", seed=0, log_path=str(folder / "gating.jsonl"),
                                 coder_url="", coder_model="", run_tools="shown")
    path = folder / "gating.json"
    path.write_text(settings.to_json())
    monkeypatch.setenv(gate.ENV, str(path))
    return path
