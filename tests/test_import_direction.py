"""Imports go one way (docs/architecture.md, "The rooms"; issues 17 and 31): operator -> core, runner -> core,
local executor -> runner + core, the CLI -> core, and no two modules import each other, however indirectly.

Every module's imports are read with `ast` (module level, inside functions and under TYPE_CHECKING alike: a lazy
import is still a dependency), resolved to the package's own modules and checked against the rooms:
- core: src/cudanalyst (cudanalyst.*): imports only the core;
- cli: src/cudanalyst/cli (cudanalyst.cli.*), the core's command line: the core and itself; nothing below it
  (the core, the runner, the operator) imports it;
- operator: operator/cudanalyst/operator (cudanalyst.operator.*): the core and itself, and no GPU code (pycuda, vLLM,
  torch);
- runner: runner/cudanalyst/runner (cudanalyst.runner.*): the core and itself, never the CLI, and never the
  Kubernetes API (kubernetes, kopf);
- local: runner/cudanalyst/runner/local (cudanalyst.runner.local.*), the executor of `cudanalyst run` and
  `record`: the runner and the core, not the CLI;
- entry: cudanalyst.entrypoints and cudanalyst.__main__, the console scripts at the top: every room (they hand the
  local executor's commands to the CLI).
A literal `importlib.import_module("cudanalyst.runner...")` is an import too, and no room may make one across the
rooms' direction: the CLI is given its local commands, it never names them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("src", "operator", "runner")  # the source roots (setup.py): under each, a module's folder is its import path
MAY_IMPORT = {"core": {"core"}, "cli": {"core", "cli"}, "operator": {"core", "operator"},
              "runner": {"core", "runner"}, "local": {"core", "runner", "local"},
              "entry": {"core", "cli", "operator", "runner", "local", "entry"}}
NEVER = {"operator": {"pycuda", "vllm", "torch"}, "runner": {"kubernetes", "kopf", "kubernetes_asyncio"}}
ENTRY = {"cudanalyst.entrypoints", "cudanalyst.__main__"}


def room(module: str) -> str:
    if module in ENTRY:
        return "entry"
    for prefix, name in (("cudanalyst.runner.local", "local"), ("cudanalyst.runner", "runner"),
                         ("cudanalyst.operator", "operator"), ("cudanalyst.cli", "cli")):
        if module == prefix or module.startswith(prefix + "."):
            return name
    return "core"


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """{module name: file} of the distribution: every module under the source roots' cudanalyst folders."""
    out = {}
    for path in sorted(p for source in SOURCES for p in (root / source / "cudanalyst").rglob("*.py")):
        parts = list(path.relative_to(root / path.relative_to(root).parts[0]).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, source: str, is_package: bool, known: Collection[str]) -> list[tuple[str, bool]]:
    """(imported module, by name at run time) for every import in a module's source (pure). `from pkg import x`
    is pkg.x when that is one of the `known` modules, else pkg; relative imports are resolved against `name`."""
    found: list[tuple[str, bool]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            found += [(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base, False) for a in node.names]
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
                   or isinstance(node.func, ast.Name) and node.func.id in ("import_module", "__import__"))):
            found.append((node.args[0].value, True))
    return list(dict.fromkeys(found))


def module_imports(modules: Mapping[str, Path]) -> dict[str, list[tuple[str, bool]]]:
    return {name: imports_of(name, path.read_text(), path.name == "__init__.py", modules)
            for name, path in modules.items()}


def graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """{module: the package's modules it imports}."""
    return {name: {m for m, _ in found if m in modules and m != name} for name, found in module_imports(modules).items()}


def violations(modules: Mapping[str, Path]) -> list[str]:
    """Every import against the rooms' direction, and every forbidden third-party import, as 'a -> b' lines."""
    bad = []
    for name, found in module_imports(modules).items():
        for target, by_name in found:
            top = target.split(".")[0]
            if top in NEVER.get(room(name), set()):
                bad.append(f"{name} -> {target} (the {room(name)} never imports {top})")
            if top != "cudanalyst":
                continue
            if room(target) not in MAY_IMPORT[room(name)]:
                how = " by name" if by_name else ""
                bad.append(f"{name} -> {target}{how} (the {room(name)} may import {sorted(MAY_IMPORT[room(name)])})")
    return sorted(set(bad))


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (strongly connected, pure)."""
    names = sorted(edges)
    index = {n: i for i, n in enumerate(names)}
    pairs = [(index[a], index[b]) for a in names for b in edges[a] if b in index]
    rows, cols = zip(*pairs, strict=True) if pairs else ((), ())
    matrix = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names), len(names)))
    count, labels = connected_components(matrix, directed=True, connection="strong")
    groups = [[n for n, label in zip(names, labels, strict=True) if label == k] for k in range(count)]
    return sorted(g for g in groups if len(g) > 1)


def test_every_import_goes_the_rooms_way():
    modules = package_modules()
    assert {"cudanalyst.runner.local.executor", "cudanalyst.cli.plan", "cudanalyst.entrypoints"} <= set(modules)
    assert violations(modules) == []


def test_no_two_modules_import_each_other():
    edges = graph(package_modules())
    assert sum(len(v) for v in edges.values()) > 300  # the whole package's imports are read, not a few
    assert cycles(edges) == []


def test_the_checks_catch_what_they_forbid(tmp_path):
    """A made-up package with one of each mistake: the checks name them all."""
    sources = {
        "src/cudanalyst/__init__.py": "",
        "src/cudanalyst/plan.py": "from cudanalyst.runner import shard\n",  # core -> runner at module level
        "src/cudanalyst/lazy.py": "def f():\n    from cudanalyst.operator.jobs import x\n",  # in a function
        "src/cudanalyst/typed.py": textwrap.dedent("""
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from cudanalyst.runner.local.executor import Lane
            """),
        "src/cudanalyst/named.py": "import importlib\nimportlib.import_module('cudanalyst.runner.shard')\n",
        "src/cudanalyst/a.py": "from cudanalyst import b\n",  # a -> b -> c -> a
        "src/cudanalyst/b.py": "from cudanalyst.c import thing\n",
        "src/cudanalyst/c.py": "from . import a\n",
        "runner/cudanalyst/runner/__init__.py": "",
        "runner/cudanalyst/runner/shard.py": "import kopf\nfrom cudanalyst.runner.local import executor\n",
        "runner/cudanalyst/runner/units.py": "from cudanalyst.operator import jobs\n",  # runner -> operator
        "runner/cudanalyst/runner/local/__init__.py": "",
        "runner/cudanalyst/runner/local/executor.py": "from cudanalyst.runner import shard\n",
        "runner/cudanalyst/runner/local/command.py": "from cudanalyst.cli.common import die\n",  # local -> CLI
        "runner/cudanalyst/runner/weights.py": "import cudanalyst.cli\n",  # runner -> CLI
        "src/cudanalyst/cli/__init__.py": "",
        "src/cudanalyst/cli/common.py": "",
        "src/cudanalyst/cli/run.py": "import importlib\nimportlib.import_module('cudanalyst.runner.local.command')\n",
        "src/cudanalyst/exits.py": "from cudanalyst.cli import common\n",  # core -> CLI
        "src/cudanalyst/entrypoints.py": "from cudanalyst.runner.local import command\nfrom cudanalyst.cli import main\n",
        "operator/cudanalyst/operator/__init__.py": "",
        "operator/cudanalyst/operator/jobs.py": "import pycuda.driver\nfrom ..runner import shard\n",
    }
    for rel, text in sources.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = package_modules(tmp_path)
    found = violations(modules)
    expected = [
        "cudanalyst.cli.run -> cudanalyst.runner.local.command by name",
        "cudanalyst.exits -> cudanalyst.cli.common",
        "cudanalyst.lazy -> cudanalyst.operator.jobs", "cudanalyst.named -> cudanalyst.runner.shard by name",
        "cudanalyst.operator.jobs -> cudanalyst.runner.shard", "cudanalyst.operator.jobs -> pycuda.driver",
        "cudanalyst.plan -> cudanalyst.runner.shard", "cudanalyst.runner.local.command -> cudanalyst.cli.common",
        "cudanalyst.runner.shard -> cudanalyst.runner.local.executor", "cudanalyst.runner.shard -> kopf", "cudanalyst.runner.units -> cudanalyst.operator.jobs",
        "cudanalyst.runner.weights -> cudanalyst.cli",
        "cudanalyst.typed -> cudanalyst.runner.local.executor",
    ]
    assert [line.split(" (")[0] for line in found] == expected
    # The local room may use the runner; the runner's shard importing the local room is the mistake, and a cycle.
    assert cycles(graph(modules)) == [["cudanalyst.a", "cudanalyst.b", "cudanalyst.c"],
                                      ["cudanalyst.runner.local.executor", "cudanalyst.runner.shard"]]


BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    EXTRAS = {"openai", "httpx", "vllm", "pycuda", "torch", "kopf", "kubernetes"}

    class Missing(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in EXTRAS:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Missing())
    """)


def python_without_extras(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Python with the runner's, the GPU's and the operator's modules missing, as on a core-only install."""
    return subprocess.run([sys.executable, "-c", BLOCKER + code, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200"})


def test_the_core_and_its_cli_need_no_runner_extras(tmp_path):
    core = [m for m in package_modules() if room(m) in ("core", "cli", "entry") and not m.endswith("__main__")]
    res = python_without_extras("import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n",
                                *core)
    assert res.returncode == 0, res.stderr[-3000:]
    cli = "import sys\nfrom cudanalyst.entrypoints import cli\nsys.exit(cli(sys.argv[1:]))\n"
    helped = python_without_extras(cli, "--help")
    assert helped.returncode == 0 and " run " in helped.stdout, helped.stderr[-3000:]
    run_help = python_without_extras(cli, "run", "--help")
    assert run_help.returncode == 0 and "--gpus" in run_help.stdout, run_help.stderr[-3000:]
    # Running it says which extra is missing, exit 2, before any work (nothing written).
    ran = python_without_extras(cli, "run", "examples/quickstart.yaml", "--output", str(tmp_path / "runs"))
    assert ran.returncode == 2 and "pip install 'cudanalyst[runner]'" in ran.stderr, ran.stderr[-3000:]
    assert not (tmp_path / "runs").exists()
