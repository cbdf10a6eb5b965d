"""What can be checked of the two images without a Docker engine: pinned bases, non-root users, the
entry points they call, and that the operator image's install set covers everything the operator imports."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stages() -> dict[str, list[str]]:
    """Dockerfile lines per stage name (logical lines, continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / "Dockerfile").read_text())
    out: dict[str, list[str]] = {}
    current = "<args>"
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if match:
            current = match.group(2) or match.group(1)
        out.setdefault(current, []).append(line)
    return out


def scripts() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_bases_pinned_by_digest() -> None:
    args = [line for line in stages()["<args>"] if line.startswith("ARG ")]
    assert len(args) == 2
    for line in args:
        assert re.search(r"@sha256:[0-9a-f]{64}$", line), line
    assert any("vllm/vllm-openai:" in line for line in args)


@pytest.mark.parametrize("target,user,entry", [("operator", "65532:65532", "cudanalyst-operator"),
                                               ("runner", "1000:1000", "cudanalyst-runner")])
def test_final_stages_are_non_root_and_call_declared_entry_points(target: str, user: str, entry: str) -> None:
    lines = stages()[target]
    assert f"USER {user}" in lines
    entrypoint = [line for line in lines if line.startswith("ENTRYPOINT")]
    assert entrypoint == [f'ENTRYPOINT ["{entry}"]']
    assert entry in scripts()


def test_operator_image_installs_no_gpu_extras_and_runner_image_does() -> None:
    build = " ".join(stages()["operator-build"])
    assert '".[operator]"' in build and "gpu" not in build and "runner]" not in build
    # The runner's source root is never copied in, and the operator is imported after the install.
    assert "COPY operator ./operator" in build and "COPY runner" not in build
    assert build.index("pip install") < build.index("import cudanalyst.operator.main")
    assert "COPY operator" not in " ".join(stages()["runner-build"])
    runner = " ".join(stages()["runner"])
    assert "cudanalyst[runner,gpu]" in runner
    assert "pycuda" in " ".join(stages()["runner-build"])


def test_runner_image_carries_bytecode_its_pods_cannot_write() -> None:
    """Every runner pod's model server imports vLLM and torch twice (API server, engine process); the runtime
    forbids writing bytecode, so the image must hold it: compiled after the install, before the import check."""
    runner = stages()["runner"]
    install = next(line for line in runner if "pip install" in line)
    assert "compileall" in install and "site.getsitepackages()" in install
    assert install.index("pip install") < install.index("compileall") < install.index("import pycuda, vllm")
    assert any(line.startswith("ENV ") and "PYTHONDONTWRITEBYTECODE=1" in line for line in runner)


def test_operator_install_set_covers_its_imports(tmp_path: Path) -> None:
    """Import the operator in a Python that sees only its image's install set: this tree's package without
    the runner (as the Dockerfile leaves it out), the core dependencies, the operator extra and their
    requirements, linked into a site folder of their own (no real site-packages, no PYTHONPATH). Optional
    imports may fall back; a required one fails here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["dependencies"] + project["optional-dependencies"]["operator"]
    closure = _requirements_closure({_norm(re.split(r"[<>=\\[ ;]", d, maxsplit=1)[0]) for d in declared})
    site_dir = tmp_path / "site"
    (site_dir / "cudanalyst").mkdir(parents=True)
    # The core's root and the operator's, as the image copies them; the runner's root is left out.
    for entry in [*(ROOT / "src" / "cudanalyst").iterdir(), ROOT / "operator" / "cudanalyst" / "operator"]:
        if entry.name != "__pycache__":
            (site_dir / "cudanalyst" / entry.name).symlink_to(entry)
    for dist in distributions():
        if _norm(dist.metadata["Name"]) not in closure:
            continue
        for file in dist.files or []:
            top = file.parts[0]
            source = Path(str(dist.locate_file(top)))
            if top == ".." or not source.exists() or (site_dir / top).exists():
                continue
            (site_dir / top).symlink_to(source)
    assert not (site_dir / "pycuda").exists() and not (site_dir / "vllm").exists()
    code = (
        "import importlib.util, site, sys\n"
        "site.addsitedir(sys.argv[1])\n"
        "assert importlib.util.find_spec('cudanalyst.runner') is None\n"
        "import cudanalyst.operator.main, cudanalyst.operator.handlers, cudanalyst.operator.lifecycle\n"
        "from cudanalyst.operator.handlers import build_registry\n"
        "from cudanalyst.operator.lifecycle import Services\n"
        "from cudanalyst.operator.config import load_config\n"
        "build_registry(Services(load_config({})))\n"
        "assert not any(p.endswith('site-packages') for p in sys.path), sys.path\n"
        "assert not any(m == 'cudanalyst.runner' or m.startswith('cudanalyst.runner.') for m in sys.modules)\n"
        "assert cudanalyst.operator.main.__file__.startswith(sys.argv[1]), cudanalyst.operator.main.__file__\n"
        "print('imported', len(sys.modules))\n"
    )
    # -I: no PYTHONPATH, no user site, no cwd on the path; -S: no site-packages. Only the site folder counts.
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(site_dir)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("imported")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements_closure(roots: set[str]) -> set[str]:
    from importlib.metadata import PackageNotFoundError, requires

    seen: set[str] = set()
    todo = [_norm(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue  # optional extras of a dependency are not installed with it
            todo.append(_norm(re.split(r"[<>=!~\[ ;(]", req, maxsplit=1)[0]))
    return seen


def test_runner_entry_point_exists() -> None:
    module, _, func = scripts()["cudanalyst-runner"].partition(":")
    mod = __import__(module, fromlist=[func])
    assert callable(getattr(mod, func))
