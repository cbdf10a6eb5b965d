"""Every console script, and every `cudanalyst` subcommand that needs an optional extra, names the missing extra
and exits 2 instead of dying with a traceback. The extra is made missing by blocking its module in a fresh
interpreter (`sys.modules[name] = None` makes `import name` fail as if it were not installed)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cudanalyst.entrypoints import extra_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def run_script(name: str, args: list[str], blocked: list[str]) -> subprocess.CompletedProcess[str]:
    """The console script `name` as its generated wrapper runs it, with `blocked` modules not importable."""
    module, _, func = SCRIPTS[name].partition(":")
    code = (f"import sys\nfor m in {blocked!r}: sys.modules[m] = None\n"
            f"sys.argv = [{name!r}, *{args!r}]\nfrom {module} import {func}\nsys.exit({func}())")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_extras_are_read_from_the_package_metadata():
    assert extra_for("openai") == "runner" and extra_for("httpx") == "runner"
    assert extra_for("kopf") == "operator" and extra_for("prometheus_client") == "operator"
    assert extra_for("matplotlib") == "report" and extra_for("pycuda") == "gpu"
    assert extra_for("numpy") is None and extra_for(None) is None  # a core dependency, not an extra


@pytest.mark.parametrize("script,blocked,extra", [
    ("cudanalyst-runner", ["openai"], "runner"),
    ("cudanalyst-operator", ["kopf"], "operator"),
])
def test_a_script_without_its_extra_names_it_and_exits_2(script, blocked, extra):
    done = run_script(script, ["--help"], blocked)
    assert done.returncode == 2, done.stderr
    assert f"'{extra}' extra" in done.stderr and f"pip install 'cudanalyst[{extra}]'" in done.stderr
    assert blocked[0] in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_script_answers_help_when_installed(script):
    pytest.importorskip("kopf", reason="the operator extra is needed for cudanalyst-operator --help")
    pytest.importorskip("openai", reason="the runner extra is needed for cudanalyst-runner --help")
    done = run_script(script, ["--help"], [])
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower() or script in done.stdout


def test_run_without_the_runner_extra_names_it_before_any_work(tmp_path):
    out = tmp_path / "runs"
    done = run_script("cudanalyst", ["run", str(ROOT / "examples" / "quickstart.yaml"), "--output", str(out)],
                      ["openai"])
    assert done.returncode == 2, done.stderr
    assert "cudanalyst run" in done.stderr and "'runner' extra" in done.stderr and "Traceback" not in done.stderr
    assert not out.exists()  # nothing written


def test_status_without_the_kubernetes_client_names_the_operator_extra():
    done = run_script("cudanalyst", ["status", "demo"], ["kubernetes"])
    assert done.returncode == 2 and "cudanalyst[operator]" in done.stderr, done.stderr


def test_report_without_matplotlib_names_the_report_extra(tmp_path):
    from cudanalyst.report.demo import demo_spec, write_demo_run
    from cudanalyst.store import open_store

    store = open_store(str(tmp_path)).child("demo/")
    write_demo_run(store, demo_spec(output_uri=str(tmp_path)), gpu=True)
    done = run_script("cudanalyst", ["report", str(tmp_path / "demo")], ["matplotlib"])
    assert done.returncode == 2, done.stderr
    assert "'report' extra" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "demo" / "report" / "report.html").exists()
    assert json.loads((tmp_path / "demo" / "spec.json").read_text())  # the run folder itself is untouched
