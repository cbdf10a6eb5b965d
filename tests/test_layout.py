"""The card's layout (docs/decisions.md, "Layout"): operator/ and runner/ at the root hold their components, and no
folder that scripts start from carries a standard-library name (it would replace that module for them)."""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Folders a process starts from: the checkout root (python -m, pytest), bench/ and scripts/ (python bench/x.py puts
# bench/ first on sys.path), and the components' roots.
START_FOLDERS = [ROOT, ROOT / "bench", ROOT / "scripts", ROOT / "operator", ROOT / "runner"]


def stdlib_shadows(folder: Path) -> list[str]:
    """Entries of `folder` that an import of a standard-library module would find first."""
    hits = []
    for entry in folder.iterdir():
        name = entry.stem if entry.suffix == ".py" else entry.name if (entry / "__init__.py").is_file() else None
        if name in sys.stdlib_module_names:
            hits.append(str(entry.relative_to(ROOT)))
    return hits


def test_no_folder_scripts_start_from_shadows_the_standard_library() -> None:
    assert {str(f.relative_to(ROOT)) or ".": stdlib_shadows(f) for f in START_FOLDERS} == {
        str(f.relative_to(ROOT)) or ".": [] for f in START_FOLDERS}


def test_the_check_finds_a_shadowing_module(tmp_path: Path) -> None:
    (tmp_path / "operator.py").write_text("")
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("")
    (tmp_path / "runner").mkdir()  # a folder without __init__.py loses to the standard library: not a shadow
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert sorted(stdlib_shadows(tmp_path)) == ["json", "operator.py"]
    finally:
        ROOT = saved


def test_components_live_at_the_root() -> None:
    import cudanalyst.operator
    import cudanalyst.runner

    assert Path(cudanalyst.operator.__file__).resolve().parent == ROOT / "operator" / "cudanalyst" / "operator"
    assert Path(cudanalyst.runner.__file__).resolve().parent == ROOT / "runner" / "cudanalyst" / "runner"
    for component in ("operator", "runner"):
        assert not (ROOT / component / "__init__.py").exists()
        assert not (ROOT / component / "cudanalyst" / "__init__.py").exists()
        assert (ROOT / component / "README.md").is_file()


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment's Python that sees this checkout's packages: nothing imported at start-up but
    what a new venv imports, so a shadowing file is not hidden by a module some .pth loaded first."""
    target = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(target)
    site = subprocess.run([str(target / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # The installed packages, through a path file read after start-up (not as site-packages with their .pth files).
    here = [p for p in sys.path if p.endswith("site-packages")]
    Path(site, "outer.pth").write_text("\n".join(here + [str(ROOT / r) for r in ("src", "operator", "runner")]) + "\n")
    return target / "bin" / "python"


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "bench").glob("*.py")))
def test_each_bench_script_starts_in_a_fresh_environment(fresh_python: Path, script: str) -> None:
    out = subprocess.run([str(fresh_python), f"bench/{script}", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "usage" in out.stdout.lower()
