"""scripts/device/setup.sh's pycuda build, with stand-ins for python3 and nvidia-smi (the real build runs on the H200):
built in line by default, beside the caller's next steps with PYCUDA_BACKGROUND=1 (pipeline.sh --prepare, where the
models' conversion needs no pycuda), and pycuda_ready waits for it and fails when it failed."""
from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# python3 as setup.sh calls it: pip installs succeed (pycuda's after a pause, writing SITE/pycuda), `import pycuda`
# works once that folder exists, configure.py fails when FAIL_CONFIGURE is set.
PYTHON = """#!/usr/bin/env bash
echo "python3 $*" >> "$LOG"
case "$*" in
  *configure.py*) [ -z "${FAIL_CONFIGURE:-}" ] ;;
  *"pip install"*"--target $SETUP_SITE .") sleep 2; mkdir -p "$SITE_DIR/pycuda" "$SITE_DIR/pycuda-1.dist-info"; echo "pycuda installed" >> "$LOG" ;;
  *"pip install"*) exit 0 ;;
  *"import pycuda.driver"*) [ -d "$SITE_DIR/pycuda" ] && echo "pycuda sees the GPU" ;;
  *"import pycuda"*) [ -d "$SITE_DIR/pycuda" ] ;;
  *) exit 0 ;;
esac
"""


def checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "checkout"
    (root / "scripts" / "device").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "device" / "setup.sh", root / "scripts" / "device" / "setup.sh")
    for folder in ("src/cudanalyst", "operator/cudanalyst/operator", "runner/cudanalyst/runner"):
        (root / folder).mkdir(parents=True)
    (root / ".device" / "wheels").mkdir(parents=True)
    (root / ".device" / "wheels" / "a.whl").write_text("")
    (root / ".device" / "src").mkdir()
    (tmp_path / "pycuda-1").mkdir()
    with tarfile.open(root / ".device" / "src" / "pycuda-1.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "pycuda-1", arcname="pycuda-1")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(PYTHON)
    (bin_dir / "nvidia-smi").write_text("#!/usr/bin/env bash\necho 'NVIDIA H200 (stand-in)'\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"),
           "SETUP_SITE": str(tmp_path / "site"), "SITE_DIR": str(tmp_path / "site"),
           "SETUP_PKGS": str(tmp_path / "pkgs"), "OUT": str(tmp_path / "out")}
    return root, env


def source_setup(root: Path, env: dict[str, str], after: str) -> subprocess.CompletedProcess:
    script = f"source scripts/device/setup.sh || exit 7\n{after}"
    return subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)


def test_in_line_by_default_the_build_is_done_when_setup_returns(tmp_path: Path) -> None:
    root, env = checkout(tmp_path)
    run = source_setup(root, env, 'echo "next step" >> "$LOG"')
    assert run.returncode == 0, run.stdout + run.stderr
    log = (tmp_path / "log").read_text().splitlines()
    assert log.index("pycuda installed") < log.index("next step")
    assert "pycuda sees the GPU" in run.stdout
    assert (tmp_path / "out" / "pycuda-built.tgz").is_file()  # for the next machine (carried in .device)


def test_in_the_background_the_caller_goes_on_and_pycuda_ready_waits(tmp_path: Path) -> None:
    root, env = checkout(tmp_path)
    run = source_setup(root, {**env, "PYCUDA_BACKGROUND": "1"},
                       'echo "next step" >> "$LOG"; pycuda_ready || exit 8; echo "ready" >> "$LOG"')
    assert run.returncode == 0, run.stdout + run.stderr
    log = (tmp_path / "log").read_text().splitlines()
    assert log.index("next step") < log.index("pycuda installed") < log.index("ready")
    assert "in the background" in run.stdout and "pycuda sees the GPU" in run.stdout
    assert (tmp_path / "pkgs" / "cudanalyst" / "runner").is_dir()  # cudanalyst copied before the build


def test_a_failed_background_build_fails_pycuda_ready(tmp_path: Path) -> None:
    root, env = checkout(tmp_path)
    run = source_setup(root, {**env, "PYCUDA_BACKGROUND": "1", "FAIL_CONFIGURE": "1"},
                       'pycuda_ready || exit 8; echo "ready" >> "$LOG"')
    assert run.returncode == 8, run.stdout + run.stderr
    assert "pycuda build failed" in run.stdout
    assert "ready" not in (tmp_path / "log").read_text().splitlines()


def test_lanes_that_skip_the_set_up_still_have_pycuda_ready(tmp_path: Path) -> None:
    # scripts/device/lanes.sh sets CUDANALYST_DEVICE_READY for its lanes, whose pipeline.sh calls pycuda_ready.
    root, env = checkout(tmp_path)
    (tmp_path / "site" / "pycuda").mkdir(parents=True)  # built by lanes.sh's own set-up
    script = 'source scripts/device/setup.sh || exit 7\npycuda_ready || exit 8'
    run = subprocess.run(["bash", "-c", script], cwd=root, env={**env, "CUDANALYST_DEVICE_READY": "1"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "pycuda sees the GPU" in run.stdout


def test_vllm_compiled_artefacts_travel_between_sessions(tmp_path: Path) -> None:
    # scripts/device/models.sh: the store the runner fetches a model's compile cache from is seeded from what an
    # earlier session brought back, and a call brings the store back only when a cold start here added to it.
    root = tmp_path / "checkout"
    (root / "scripts" / "device").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "device" / "models.sh", root / "scripts" / "device" / "models.sh")
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    kept = tmp_path / "kept" / "qwen-3f2a" / "vllm-0.22.0"
    kept.mkdir(parents=True)
    (kept / "nvidia-h200.tar.gz").write_bytes(b"compiled")
    (root / ".device").mkdir()
    with tarfile.open(root / ".device" / "vllm-cache.tgz", "w:gz") as tar:
        tar.add(tmp_path / "kept", arcname=".")
    env = {**os.environ, "VLLM_STORE": str(store), "OUT": str(out)}
    env.pop("CUDANALYST_VLLM_CACHE_URI", None)

    def session(after: str) -> subprocess.CompletedProcess:
        script = f'out="$OUT"; source scripts/device/models.sh; seed_vllm_store; {after}'
        return subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)

    first = session('echo "uri=$CUDANALYST_VLLM_CACHE_URI"; bring_back_vllm_cache')
    assert first.returncode == 0, first.stderr
    assert f"uri={store}" in first.stdout and "1 model(s) from .device/vllm-cache.tgz" in first.stdout
    assert (store / "qwen-3f2a" / "vllm-0.22.0" / "nvidia-h200.tar.gz").read_bytes() == b"compiled"
    assert not (out / "vllm-cache.tgz").exists()  # nothing new: nothing to bring back

    # A cold start of another model puts its cache into the store (compile_cache.py's keep): that archive alone comes
    # back, not the store it was seeded with (the whole store outgrew what a call brings back).
    added = 'mkdir -p "$VLLM_STORE/gemma-9c1d/vllm-0.22.0" && echo x > "$VLLM_STORE/gemma-9c1d/vllm-0.22.0/nvidia-h200.tar.gz"'
    second = session(f"{added}; bring_back_vllm_cache")
    assert second.returncode == 0 and "1 archive(s)" in second.stdout, second.stdout + second.stderr
    assert ".device/vllm-cache-" in second.stdout  # where the next session's checkout keeps it
    with tarfile.open(out / "vllm-cache.tgz") as tar:
        names = {n.lstrip("./") for n in tar.getnames() if n.endswith(".tar.gz")}
    assert names == {"gemma-9c1d/vllm-0.22.0/nvidia-h200.tar.gz"}

    # A start from an archive that compiled what it lacked puts the fuller one in its place (compile_cache.py): the
    # same name with other bytes comes back too.
    shutil.move(out / "vllm-cache.tgz", root / ".device" / "vllm-cache-20261205-1741.tgz")
    refreshed = 'echo fuller > "$VLLM_STORE/qwen-3f2a/vllm-0.22.0/nvidia-h200.tar.gz"'
    shutil.rmtree(store)
    third = session(f"{refreshed}; bring_back_vllm_cache")
    # The next session seeds from both archives it carries, the first session's and the one brought back.
    assert "1 model(s) from .device/vllm-cache-20261205-1741.tgz" in third.stdout, third.stdout
    assert (store / "gemma-9c1d" / "vllm-0.22.0" / "nvidia-h200.tar.gz").read_text() == "x\n"
    assert third.returncode == 0 and "1 archive(s)" in third.stdout, third.stdout + third.stderr
    with tarfile.open(out / "vllm-cache.tgz") as tar:
        assert [n.lstrip("./") for n in tar.getnames() if n.endswith(".tar.gz")] == [
            "qwen-3f2a/vllm-0.22.0/nvidia-h200.tar.gz"]
        member = tar.extractfile("./qwen-3f2a/vllm-0.22.0/nvidia-h200.tar.gz")
        assert member is not None and member.read() == b"fuller\n"

    # A later archive of a key takes the place of an earlier one: name order, after vllm-cache.tgz.
    shutil.move(out / "vllm-cache.tgz", root / ".device" / "vllm-cache-20261206-0900.tgz")
    shutil.rmtree(store)
    fourth = session("bring_back_vllm_cache")
    assert (store / "qwen-3f2a" / "vllm-0.22.0" / "nvidia-h200.tar.gz").read_text() == "fuller\n"
    assert fourth.returncode == 0 and not (out / "vllm-cache.tgz").exists(), fourth.stdout  # nothing new here
    (root / ".device" / "vllm-cache-20261205-1741.tgz").unlink()
    (root / ".device" / "vllm-cache-20261206-0900.tgz").unlink()

    # A torn copy costs a cold start, never the call.
    shutil.rmtree(store)
    (root / ".device" / "vllm-cache.tgz").write_bytes(b"not a tar")
    torn = session("true")
    assert torn.returncode == 0 and "is torn; servers start cold" in torn.stdout


# python3 as models.sh calls it for a model's conversion: slow, logged with its niceness, cached by a marker file.
CONVERTER = """#!/usr/bin/env bash
case "$*" in
  *prepare_model.py*)
    name=$2
    if [ -e "$DONE/$name" ]; then echo "already prepared $name"; echo "cached $name" >> "$LOG"; exit 0; fi
    echo "start $name nice=$(nice)" >> "$LOG"; sleep 1; touch "$DONE/$name"; echo "end $name" >> "$LOG" ;;
  *"import vllm"*) echo "import vllm" >> "$LOG"; echo "vllm 0.22.0 pydantic 2" ;;
  *importlib.metadata*) echo "metadata" >> "$LOG"; echo "vllm 0.22.0 pydantic 2 (installed by an earlier call)" ;;
  *) exit 0 ;;
esac
"""


def models_checkout(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "checkout"
    (root / "scripts" / "device").mkdir(parents=True)
    # models.sh checks a set's parts with stash.sh beside it before joining them.
    for script in ("models.sh", "stash.sh"):
        shutil.copy(ROOT / "scripts" / "device" / script, root / "scripts" / "device" / script)
    stand_in = tmp_path / "python3"
    stand_in.write_text(CONVERTER)
    stand_in.chmod(0o755)
    stash = tmp_path / "stash"
    for name in ("m1", "m2"):
        (stash / "models" / name).mkdir(parents=True)
        (stash / "models" / name / f"{name}.gguf.part00").write_text(name)
    (tmp_path / "done").mkdir()
    env = {**os.environ, "LOG": str(tmp_path / "log"), "DONE": str(tmp_path / "done"), "PY": str(stand_in),
           "VLLM_STORE": str(tmp_path / "store"), "VLLM_SITE": str(tmp_path / "vllm-site"),
           # The joined GGUFs in the test's own folder: in the default /tmp one left by an earlier run would be
           # taken as joined, and the parts' check never run.
           "CUDANALYST_GGUF_DIR": str(tmp_path / "gguf")}
    (tmp_path / "gguf").mkdir()
    env.pop("CUDANALYST_VLLM_CACHE_URI", None)
    return root, env


def run_models(root: Path, env: dict[str, str], stash: Path, after: str) -> subprocess.CompletedProcess:
    # A spec here is a file naming its models (spec_models reads the real spec in study.sh).
    script = (f'py="$PY"; source scripts/device/models.sh; stash={stash}; spec_models() {{ cat "$1"; }}\n'
              f'step() {{ echo "== $*"; }}\n{after}')
    return subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=60)


def test_later_specs_models_convert_ahead_at_low_priority_and_once(tmp_path: Path) -> None:
    root, env = models_checkout(tmp_path)
    (root / "first.spec").write_text("m1\n")
    (root / "second.spec").write_text("m2\n")
    (root / "third.spec").write_text("m1\n")
    # study.sh's turn order: the second and third specs' models convert in the background while the first runs;
    # the second spec's own turn comes while m2 is still converting, waits for it, then finds it cached.
    result = run_models(root, env, tmp_path / "stash",
                        'prepare_models_ahead second.spec third.spec > ahead.log 2>&1\n'
                        # The foreground's turn once the background's conversion of m2 has begun (a fixed 0.3 s was
                        # not always enough on a loaded machine: the foreground then converted m2 itself).
                        'for i in $(seq 600); do grep -q "^start m2" "$LOG" 2>/dev/null && break; sleep 0.05; done\n'
                        'prepare_models m2 || exit 5; wait "$ahead_pid"; prepare_models m1; cat ahead.log')
    assert result.returncode == 0, result.stdout + result.stderr
    log = (tmp_path / "log").read_text().splitlines()
    # m2 converted once, in the background at niceness 10; the foreground's m2 waited for the lock and took the
    # cache; m1 (the third spec, the same model as the first) converted once, by whichever came first.
    assert log.count("start m2 nice=10") == 1 and log.index("end m2") < log.index("cached m2")
    assert sum(line.startswith("start m1") for line in log) == 1 and "cached m1" in log
    assert log.index("end m2") < next(i for i, line in enumerate(log) if line.startswith("start m1"))  # one at a time


def test_a_spec_whose_parts_are_not_stashed_is_said_and_the_others_convert(tmp_path: Path) -> None:
    root, env = models_checkout(tmp_path)
    (root / "a.spec").write_text("nothere\n")
    (root / "b.spec").write_text("m2\n")
    result = run_models(root, env, tmp_path / "stash",
                        'prepare_models_ahead a.spec b.spec > ahead.log 2>&1; wait "$ahead_pid"; cat ahead.log')
    assert result.returncode == 0, result.stderr
    assert "no stashed parts in" in result.stdout and "ahead: a.spec's models not prepared" in result.stdout
    assert "end m2" in (tmp_path / "log").read_text()


def test_vllm_is_imported_once_per_machine(tmp_path: Path) -> None:
    # The first call checks and imports vLLM (about 14 s each on the H200) and leaves a marker; a later call on the
    # same warm machine reads the versions from the packages' metadata instead.
    root, env = models_checkout(tmp_path)
    first = run_models(root, env, tmp_path / "stash", 'pkgs=p site=s; vllm_from_wheelhouse')
    assert first.returncode == 0, first.stdout + first.stderr
    assert (tmp_path / "vllm-site" / ".cudanalyst-installed").exists()
    assert (tmp_path / "log").read_text().count("import vllm") == 2  # the check, then the version line
    (tmp_path / "log").unlink()
    second = run_models(root, env, tmp_path / "stash", 'pkgs=p site=s; vllm_from_wheelhouse')
    assert second.returncode == 0 and "installed by an earlier call" in second.stdout, second.stdout + second.stderr
    assert (tmp_path / "log").read_text().splitlines() == ["metadata"]


def test_without_flock_nothing_converts_ahead_and_each_spec_converts_in_its_turn(tmp_path: Path) -> None:
    root, env = models_checkout(tmp_path)
    (root / "b.spec").write_text("m2\n")
    bin_dir = tmp_path / "bin-without-flock"
    bin_dir.mkdir()
    # The last five: stash.sh --check, which models.sh runs before joining the parts.
    for tool in ("bash", "cat", "ls", "mv", "mkdir", "grep", "tail", "sleep", "touch", "nice", "renice", "env",
                 "dirname", "basename", "wc", "sha256sum", "cut"):
        found = shutil.which(tool)
        assert found, tool
        (bin_dir / tool).symlink_to(found)
    env["PATH"] = str(bin_dir)
    result = run_models(root, env, tmp_path / "stash",
                        'prepare_models_ahead b.spec; echo "pid=$ahead_pid"; prepare_models m2')
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no flock on this machine" in result.stdout and "pid=none" in result.stdout
    assert (tmp_path / "log").read_text().splitlines() == ["start m2 nice=0", "end m2"]


# python3 on a fresh machine: vLLM is not importable until the wheelhouse is installed; compileall is logged.
FRESH = """#!/usr/bin/env bash
case "$*" in
  *"import vllm"*) [ -e "$DONE/installed" ] || exit 1; echo "vllm 0.22.0 pydantic 2" ;;
  *"pip install"*) touch "$DONE/installed" ;;
  *compileall*) sleep 1; echo "compileall nice=$(nice) $*" >> "$LOG" ;;
  *) exit 0 ;;
esac
"""


def test_a_fresh_install_compiles_vllms_bytecode_in_the_background_at_low_priority(tmp_path: Path) -> None:
    # Installed with --no-compile, the machine's first model server compiled vLLM in both of its processes.
    root, env = models_checkout(tmp_path)
    (tmp_path / "python3").write_text(FRESH)
    wheels = tmp_path / "stash" / "wheelhouse"
    wheels.mkdir(parents=True)
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "vllm-0.22.0-py3-none-any.whl").write_text("")
    with tarfile.open(wheels / "part00", "w") as tar:
        tar.add(tmp_path / "w" / "vllm-0.22.0-py3-none-any.whl", arcname="vllm-0.22.0-py3-none-any.whl")
    # The caller goes on at once (the compile is out of its way and out of its job table), then waits for it here.
    proc = run_models(root, env, tmp_path / "stash", 'pkgs=p site=s; vllm_from_wheelhouse; echo "jobs: $(jobs -rp | wc -l)"'
                      f'; for _ in $(seq 50); do [ -e "{tmp_path}/vllm-site/.cudanalyst-compiled" ] && break; sleep 0.2; done')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "vLLM installed in" in proc.stdout and "jobs: 0" in proc.stdout, proc.stdout
    assert (tmp_path / "vllm-site" / ".cudanalyst-compiled").read_text().strip().endswith(" s")
    [line] = (tmp_path / "log").read_text().splitlines()
    assert line.startswith("compileall nice=10 ") and f"-j 0 {tmp_path}/vllm-site" in line, line
