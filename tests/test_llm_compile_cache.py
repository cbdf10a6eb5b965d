"""vLLM's compiled artefacts kept per model, vLLM version and GPU kind (issue 32): the key, the local folder, and the
store a fresh machine or pod fetches them from (S3 through boto3 against moto's server; a folder as a volume).

A real vLLM server filling and finding the cache is tests/vllm/test_compile_cache_vllm.py.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest
from health_stand_in import HEALTHY

from cudanalyst.runner.llm import compile_cache
from cudanalyst.runner.llm.compile_cache import CompileCache, cache_key
from cudanalyst.store import open_store


def model(folder: Path, hidden: int = 128, weights: bytes = b"w" * 10) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"hidden_size": hidden}))
    (folder / "model.safetensors").write_bytes(weights)
    return folder


def compiled(cache: CompileCache) -> Path:
    """What a server start leaves: a torch.compile artefact and a Triton kernel."""
    artefact = cache.folder / "vllm" / "torch_compile_cache" / "abc123" / "rank_0_0" / "model.bin"
    artefact.parent.mkdir(parents=True)
    artefact.write_bytes(b"compiled graph")
    kernel = cache.folder / "triton" / "k1" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"cubin")
    return artefact


@pytest.fixture
def roots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(compile_cache.DIR_ENV, str(tmp_path / "machine-1"))
    monkeypatch.delenv(compile_cache.CACHE_URI_ENV, raising=False)
    monkeypatch.delenv(compile_cache.SWITCH_ENV, raising=False)
    return tmp_path


@pytest.fixture
def volume(roots: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder as the store (a volume the pods mount), named by CUDANALYST_VLLM_CACHE_URI."""
    folder = roots / "volume"
    folder.mkdir()
    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, str(folder))
    return folder


def test_the_key_names_the_model_the_vllm_version_and_the_gpu_kind(tmp_path: Path) -> None:
    coder = str(model(tmp_path / "Qwen2.5-Coder-1.5B"))
    key = cache_key(coder, "vllm-0.22.0", "NVIDIA H200")
    name, version, gpu = key.split("/")
    assert name.startswith("qwen2.5-coder-1.5b-") and version == "vllm-0.22.0" and gpu == "nvidia-h200"
    assert cache_key(coder, "vllm-0.22.0", "NVIDIA H200") == key  # stable
    assert cache_key(coder, "vllm-0.23.0", "NVIDIA H200") != key
    assert cache_key(coder, "vllm-0.22.0", "NVIDIA H100 80GB HBM3") != key
    other = str(model(tmp_path / "b" / "Qwen2.5-Coder-1.5B", hidden=256))  # same name, another model
    assert cache_key(other, "vllm-0.22.0", "NVIDIA H200") != key
    resized = str(model(tmp_path / "c" / "Qwen2.5-Coder-1.5B", weights=b"w" * 11))
    assert cache_key(resized, "vllm-0.22.0", "NVIDIA H200") != key


def test_the_server_environment_points_into_the_keyed_folder(roots: Path) -> None:
    cache = CompileCache.for_model(str(model(roots / "m")))
    assert cache is not None and cache.folder.is_relative_to(roots / "machine-1")
    env = cache.env()
    assert Path(env["VLLM_CACHE_ROOT"]).parent == cache.folder == Path(env["TRITON_CACHE_DIR"]).parent
    lane = CompileCache.for_model(str(model(roots / "m2")), part="gpu1")
    assert lane is not None and lane.folder.name == "gpu1"  # lanes starting together write apart


def test_a_second_start_on_the_same_machine_finds_the_folder(roots: Path) -> None:
    path = str(model(roots / "m"))
    first = CompileCache.for_model(path)
    assert first is not None and first.fetch() == "cold"
    artefact = compiled(first)
    again = CompileCache.for_model(path)
    assert again is not None and again.fetch() == "local" and again.folder == first.folder
    assert artefact.read_bytes() == b"compiled graph"


def test_switched_off_nothing_of_ours_is_used(roots: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compile_cache.SWITCH_ENV, "off")
    assert CompileCache.for_model(str(model(roots / "m"))) is None


def test_a_fresh_machine_fetches_what_the_first_cold_start_kept_in_s3(roots: Path, s3_bucket: str, s3_settings,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, f"s3://{s3_bucket}/vllm-cache")
    path = str(model(roots / "m"))
    first = CompileCache.for_model(path, s3=s3_settings)
    assert first is not None and first.fetch() == "cold"  # nothing in the bucket yet: said, not an error
    compiled(first)
    first.keep()
    first.wait()
    store = open_store(f"s3://{s3_bucket}/vllm-cache", s3_settings)
    assert store.exists(first.archive_key) and first.archive_key == f"{first.key}.tar.gz"

    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "machine-2"))  # another machine: empty local cache
    fresh = CompileCache.for_model(path, s3=s3_settings)
    assert fresh is not None and fresh.folder != first.folder and fresh.fetch() == "store"
    got = sorted(str(p.relative_to(fresh.folder)) for p in fresh.folder.rglob("*") if p.is_file())
    assert got == ["triton/k1/kernel.cubin", "vllm/torch_compile_cache/abc123/rank_0_0/model.bin"]
    assert (fresh.folder / got[1]).read_bytes() == b"compiled graph"
    # A start from the archive that compiled nothing more puts nothing back ...
    before = store.get_bytes(first.archive_key)
    fresh.keep()
    fresh.wait()
    assert store.get_bytes(first.archive_key) == before
    # ... one that compiled what the archive lacked (the sampler's kernels at the first requests) puts the fuller
    # folder in its place, so the next fresh machine finds them too
    (fresh.folder / "vllm" / "torch_compile_cache" / "abc123" / "triton_cache").mkdir(parents=True)
    (fresh.folder / "vllm" / "torch_compile_cache" / "abc123" / "triton_cache" / "topp.cubin").write_bytes(b"k")
    fresh.keep()
    fresh.wait()
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(first.archive_key)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == got + ["vllm/torch_compile_cache/abc123/triton_cache/topp.cubin"]
    # ... and a start from this machine's own folder puts nothing, whatever it compiled
    after = store.get_bytes(first.archive_key)
    again = CompileCache.for_model(path, s3=s3_settings)
    assert again is not None and again.fetch() == "local"
    (again.folder / "vllm" / "more").write_text("x")
    again.keep()
    again.wait()
    assert store.get_bytes(first.archive_key) == after


def test_a_volume_the_pods_mount_is_a_store_too(roots: Path, volume: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(model(roots / "m"))
    first = CompileCache.for_model(path)
    assert first is not None and first.fetch() == "cold"
    compiled(first)
    first.keep()
    first.wait()
    assert (volume / first.archive_key).is_file()
    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "pod-2"))
    second = CompileCache.for_model(path)
    assert second is not None and second.fetch() == "store"


def test_an_archive_member_outside_the_folder_is_refused(roots: Path, volume: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    cache = CompileCache.for_model(str(model(roots / "m")))
    assert cache is not None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escaped")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    target = volume / cache.archive_key
    target.parent.mkdir(parents=True)
    target.write_bytes(buf.getvalue())
    assert cache.fetch() == "cold"  # refused, and the server starts cold: a cache never fails a run
    assert not (roots / "escaped").exists() and not any(p.is_file() for p in cache.folder.rglob("*"))


def test_an_unusable_store_uri_starts_without_it(roots: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, "s3://")
    cache = CompileCache.for_model(str(model(roots / "m")))
    assert cache is not None and cache.store is None and cache.fetch() == "cold"


def test_the_store_keeps_what_the_warm_up_compiled(roots: Path, volume: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM JIT-compiles its sampler's kernels at the first requests, into the cache folder: the archive a fresh
    machine fetches is taken after the warm-up, not at /health (a server that answers /health stands in for vLLM)."""
    import sys

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm import serving

    path = str(model(roots / "m"))
    launched: dict[str, str] = {}
    launch = serving.launch_server

    def stand_in(cmd, endpoint, *, env=None, log_dir=None, unset=()):
        launched.update(env or {})
        port = endpoint.root.rsplit(":", 1)[1]
        return launch([sys.executable, "-c", HEALTHY, port], endpoint, env=env, log_dir=log_dir)

    monkeypatch.setattr(serving, "launch_server", stand_in)
    store = open_store(str(volume))
    seen_at_warm_up: list[bool] = []

    def warm_up(endpoint: serving.Endpoint) -> None:
        cache_dir = Path(launched["VLLM_CACHE_ROOT"])
        seen_at_warm_up.append(any(volume.rglob("*.tar.gz")))
        kernel = cache_dir / "torch_compile_cache" / "h1" / "triton_cache" / "topp" / "kernel.cubin"
        kernel.parent.mkdir(parents=True)
        kernel.write_bytes(b"sampler kernel, compiled at the first request")

    spec = ModelSpec(model=path, serve="local")
    with serving.start_local_server(path, spec, served_name="m", health_timeout_s=30, log_dir=str(roots),
                                    warm_up=warm_up) as server:
        cache = server.compile_cache
        assert cache is not None and cache.found == "cold"
        assert server.warm_up_s is not None and server.warm_up_s >= 0
    assert seen_at_warm_up == [False]  # nothing kept before the warm-up had run
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(cache.archive_key)), mode="r:gz") as tar:
        assert "vllm/torch_compile_cache/h1/triton_cache/topp/kernel.cubin" in tar.getnames()


def vllm_index(cache: CompileCache, artefacts: list[str], write: list[str] | None = None) -> Path:
    """A compiled model as vLLM 0.22 leaves it: artefacts beside an index (`vllm_compile_cache.py`, a Python
    literal written by pprint) that names each by its absolute path in the folder it was compiled in. `write`:
    the artefacts actually written (default: all)."""
    import pprint

    backbone = cache.folder / "vllm" / "torch_compile_cache" / "fed66f7c7a" / "rank_0_0" / "backbone"
    backbone.mkdir(parents=True)
    for name in artefacts if write is None else write:
        (backbone / name).write_bytes(b"inductor artefact " + name.encode())
    entries = {((1, 8192), i, "inductor_standalone"): {"cache_key": f"key{i}",
                                                       "graph_handle": (name, str(backbone / name))}
               for i, name in enumerate(artefacts)}
    (backbone / compile_cache.INDEX_NAME).write_text(pprint.pformat(entries, indent=4))
    return backbone / compile_cache.INDEX_NAME


def handles(index: Path) -> list[tuple[str, str]]:
    import ast

    return [entry["graph_handle"] for entry in ast.literal_eval(index.read_text()).values()]


def test_an_archive_compiled_in_another_folder_is_pointed_at_the_one_it_is_unpacked_in(
        roots: Path, volume: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.22 loads an artefact from the absolute path its index names: an archive made in a bench's temporary
    folder made a server on the H100 die at start (FileNotFoundError) until the index was pointed at its folder."""
    path = str(model(roots / "m"))
    names = ["artifact_compile_range_1_8192_subgraph_0", "artifact_compile_range_1_8192_subgraph_1"]
    first = CompileCache.for_model(path)
    assert first is not None and first.fetch() == "cold"
    vllm_index(first, names)
    first.keep()
    first.wait()
    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "elsewhere" / "machine-2"))
    second = CompileCache.for_model(path)
    assert second is not None and second.fetch() == "store"
    index = next(second.folder.rglob(compile_cache.INDEX_NAME))
    moved = handles(index)
    assert [name for name, _ in moved] == names
    for name, where in moved:
        assert Path(where) == index.parent / name and Path(where).is_file()
        assert str(first.folder) not in where
    # A folder moved on its machine (the local root moved with it) is pointed at its new place too.
    (roots / "elsewhere").rename(roots / "moved")
    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "moved" / "machine-2"))
    third = CompileCache.for_model(path)
    assert third is not None and third.fetch() == "local"
    assert all(Path(where).is_file() and "moved" in where
               for _, where in handles(next(third.folder.rglob(compile_cache.INDEX_NAME))))


@pytest.mark.parametrize("broken", ["an artefact absent", "an unreadable index"])
def test_an_archive_a_server_cannot_start_from_starts_cold_and_is_replaced(
        roots: Path, volume: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        broken: str) -> None:
    path = str(model(roots / "m"))
    first = CompileCache.for_model(path)
    assert first is not None and first.fetch() == "cold"
    index = vllm_index(first, ["subgraph_0", "subgraph_1"], write=["subgraph_0"] if broken == "an artefact absent"
                       else None)
    if broken == "an unreadable index":
        index.write_text("{(1, 8192): open('/etc/passwd')}")  # not a literal: vLLM's literal_eval fails on it too
    first.keep()
    first.wait()
    store = open_store(str(volume))
    bad = store.get_bytes(first.archive_key)
    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "machine-2"))
    second = CompileCache.for_model(path)
    assert second is not None
    with caplog.at_level("WARNING", logger="cudanalyst.runner.llm"):
        assert second.fetch() == "cold"
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "not usable" in said and compile_cache.INDEX_NAME in said
    assert ("subgraph_1" in said) if broken == "an artefact absent" else ("not an index" in said)
    assert not any(p.is_file() for p in second.folder.rglob("*"))  # nothing of the archive is left to vLLM
    vllm_index(second, ["subgraph_0"])  # what the cold start compiles
    second.keep()
    second.wait()
    good = store.get_bytes(second.archive_key)
    assert good != bad  # the unusable archive is replaced, so the next fresh machine does not start cold too
    monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "machine-3"))
    third = CompileCache.for_model(path)
    assert third is not None and third.fetch() == "store"


# vLLM as far as its start goes: dies on artefacts it cannot load (here: a file named `poison` anywhere in its
# cache folder), else compiles (writes an artefact) and answers /health.
DIES_ON_POISON = """
import os, pathlib, sys
root = pathlib.Path(os.environ["VLLM_CACHE_ROOT"])
if any(p.name == "poison" for p in root.rglob("*")):
    print("FileNotFoundError: an artefact the index names", flush=True)
    sys.exit(1)
(root / "torch_compile_cache" / "h1").mkdir(parents=True, exist_ok=True)
(root / "torch_compile_cache" / "h1" / "graph").write_bytes(b"compiled")
""" + HEALTHY


@pytest.mark.parametrize("found", ["store", "local"])
def test_a_server_that_dies_at_start_on_the_artefacts_found_is_started_again_cold(
        roots: Path, volume: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        found: str) -> None:
    """A cache never fails a run: whatever vLLM cannot start from (an archive of a vLLM that loads it otherwise, a
    file cut short) costs a cold start, not the run; the store's archive is replaced, the first start's log kept."""
    import sys

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm import serving

    path = str(model(roots / "m"))
    poisoned = CompileCache.for_model(path)
    assert poisoned is not None and poisoned.fetch() == "cold"
    (poisoned.folder / "vllm" / "poison").parent.mkdir(parents=True)
    (poisoned.folder / "vllm" / "poison").write_text("x")
    store = open_store(str(volume))
    if found == "store":
        poisoned.keep()
        poisoned.wait()
        monkeypatch.setenv(compile_cache.DIR_ENV, str(roots / "machine-2"))
    launches: list[str] = []
    launch = serving.launch_server

    def stand_in(cmd, endpoint, *, env=None, log_dir=None, unset=()):
        launches.append(env["VLLM_CACHE_ROOT"])
        port = endpoint.root.rsplit(":", 1)[1]
        return launch([sys.executable, "-c", DIES_ON_POISON, port], endpoint, env=env, log_dir=log_dir)

    monkeypatch.setattr(serving, "launch_server", stand_in)
    logs = roots / "logs"
    logs.mkdir()
    spec = ModelSpec(model=path, serve="local")
    with caplog.at_level("WARNING", logger="cudanalyst.runner.llm"), \
            serving.start_local_server(path, spec, served_name="m", health_timeout_s=30, log_dir=str(logs)) as server:
        assert server.healthy_after_s is not None and server.compile_cache is not None
        assert server.compile_cache.found == "cold"
    assert len(launches) == 2
    assert "starting it again cold" in caplog.text and found in caplog.text
    assert "FileNotFoundError" in caplog.text  # what the first start said, with or without a log folder
    assert "FileNotFoundError" in (logs / "vllm-m.first-start.log").read_text()
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(server.compile_cache.archive_key)), mode="r:gz") as tar:
        names = tar.getnames()
    assert "vllm/torch_compile_cache/h1/graph" in names and "vllm/poison" not in names


def test_a_cold_server_that_dies_at_start_is_not_started_again(roots: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm import serving

    path = str(model(roots / "m"))
    launches: list[int] = []
    launch = serving.launch_server

    def dies(cmd, endpoint, *, env=None, log_dir=None, unset=()):
        launches.append(1)
        return launch([sys.executable, "-c", "import sys; print('out of memory'); sys.exit(3)"], endpoint, env=env,
                      log_dir=log_dir)

    monkeypatch.setattr(serving, "launch_server", dies)
    spec = ModelSpec(model=path, serve="local")
    with pytest.raises(serving.ServingError, match="exited with status 3"), \
            serving.start_local_server(path, spec, served_name="m", health_timeout_s=30):
        pass
    assert launches == [1]
