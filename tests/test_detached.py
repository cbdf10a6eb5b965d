"""scripts/device/detached.sh: a job that outlives the device call that started it (a new session), stopped the way
scripts/device/pipeline.sh needs: SIGTERM through its `timeout`, so that the script still packs the folder."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device" / "detached.sh"


def detached(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "DETACHED_DIR": str(tmp_path)})


@pytest.mark.parametrize("launcher", ["setsid", "python"])  # python: where the machine has no setsid(1)
def test_a_job_outlives_the_call_that_started_it_and_leaves_its_exit_status(tmp_path: Path, launcher: str) -> None:
    marker = tmp_path / "finished"
    # The call: a process group of its own, killed whole once it returns, as the device tool does.
    call = subprocess.Popen(["bash", "-c", f"bash {SCRIPT} start job 'sleep 2; touch {marker}; echo done; exit 7'"],
                            env={**os.environ, "DETACHED_DIR": str(tmp_path), "DETACHED_LAUNCHER": launcher},
                            start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    out, _ = call.communicate(timeout=30)
    assert call.returncode == 0 and "job started" in out
    if _group_alive(call.pid):
        os.killpg(call.pid, signal.SIGKILL)
    pid = int((tmp_path / "job" / "pid").read_text())
    assert os.getsid(pid) == pid  # the job leads a session of its own, not the call's
    assert detached(tmp_path, "status", "job").returncode == 3
    still = detached(tmp_path, "wait", "job", "0")
    assert still.returncode == 3 and "still running" in still.stdout
    ended = detached(tmp_path, "wait", "job", "30")
    assert ended.returncode == 0 and "done" in ended.stdout and "job exited 7" in ended.stdout
    assert marker.exists()
    again = detached(tmp_path, "wait", "job", "1")
    assert "done" not in again.stdout  # each wait prints only what is new
    status = detached(tmp_path, "status", "job")
    assert status.returncode == 0 and status.stdout.strip() == "exited 7"


def test_stop_goes_through_timeout_so_the_script_after_it_still_runs(tmp_path: Path) -> None:
    # As scripts/device/pipeline.sh runs `cudanalyst record` under timeout and packs the folder after it.
    # timeout sends SIGTERM to the child and then to its whole group, so the child gets it twice: it ignores the
    # second, as a program that stops on the first must (killed by it under load, timeout exits 143: seen in CI).
    child = ("import signal, sys, time; "
             "signal.signal(signal.SIGTERM, lambda *a: (signal.signal(signal.SIGTERM, signal.SIG_IGN), "
             "print('child stops', flush=True), sys.exit(3))); "
             "print('child runs', flush=True); [time.sleep(0.2) for _ in range(600)]")
    job = f'timeout --signal=TERM --kill-after=30 0 python3 -c "{child}"; echo "packed after exit $?"'
    assert detached(tmp_path, "start", "rec", job).returncode == 0
    for _ in range(100):
        if "child runs" in (tmp_path / "rec" / "console.log").read_text():
            break
        time.sleep(0.1)
    stopped = detached(tmp_path, "stop", "rec", "20")
    assert stopped.returncode == 0, stopped.stderr
    assert "child stops" in stopped.stdout and "packed after exit 3" in stopped.stdout
    assert "rec stopped (exit 0)" in stopped.stdout


def test_a_job_without_timeout_is_stopped_whole_and_killed_past_its_grace(tmp_path: Path) -> None:
    assert detached(tmp_path, "start", "plain", "sleep 300 & sleep 300; wait").returncode == 0
    pid = int((tmp_path / "plain" / "pid").read_text())
    stopped = detached(tmp_path, "stop", "plain", "10")
    assert stopped.returncode == 0 and "plain stopped" in stopped.stdout
    assert not _group_alive(pid)
    stubborn = "trap '' TERM; echo ignoring-term; sleep 300"
    assert detached(tmp_path, "start", "stubborn", stubborn).returncode == 0
    pid = int((tmp_path / "stubborn" / "pid").read_text())
    # Stopped before its trap is set, the job dies of SIGTERM (a loaded machine did once): wait for the trap.
    console = tmp_path / "stubborn" / "console.log"
    deadline = time.monotonic() + 30
    while "ignoring-term" not in (console.read_text() if console.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = detached(tmp_path, "stop", "stubborn", "1")
    assert "SIGKILL" in killed.stdout and "stubborn stopped (killed)" in killed.stdout
    time.sleep(0.5)
    assert not _group_alive(pid)


def test_bad_calls_exit_2(tmp_path: Path) -> None:
    assert detached(tmp_path, "wait", "never", "1").returncode == 2
    assert detached(tmp_path, "status", "never").returncode == 2
    assert detached(tmp_path, "start", "../escape", "true").returncode == 2
    assert detached(tmp_path, "wait", "x", "soon").returncode == 2
    assert detached(tmp_path, "start", "twice", "sleep 30").returncode == 0
    twice = detached(tmp_path, "start", "twice", "sleep 30")
    assert twice.returncode == 2 and "already running" in twice.stderr
    detached(tmp_path, "stop", "twice", "5")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    # A zombie still counts for killpg: the group is gone once no member is running.
    out = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout.split()
    return any(not s.startswith("Z") for s in out)


def test_keep_running_starts_once_brings_back_a_snapshot_each_call_and_the_jobs_files_at_its_end(
        tmp_path: Path) -> None:
    import tarfile

    keep = SCRIPT.parent / "keep_running.sh"
    runs = tmp_path / "runs"
    env = {**os.environ, "DETACHED_DIR": str(tmp_path / "dt"), "RUNS_DIR": str(runs), "JOB": "rec",
           "FOLDER": "rec-a rec-b cmp-measured"}
    job = (f"mkdir -p {runs}/rec-a/progress {runs}/cmp-measured && echo '{{}}' > {runs}/rec-a/spec.json && "
           f"echo 2 > {runs}/rec-a/progress/gemm.json && echo '{{}}' > {runs}/cmp-measured/rec-a.jsonl && "
           f"echo started >> {tmp_path}/starts && echo '{{\"runs\": 1}}' > $OUT/bench.json && "
           f"head -c 2000000 /dev/zero > $OUT/big.log && sleep 4 && "
           f"tar czf $OUT/run-rec-a.tgz -C {runs} rec-a/spec.json && pwd > $OUT/where && touch written-in-its-tree && "
           f"echo cache > $OUT/vllm-cache.tgz")

    checkout = tmp_path / "checkout"  # the call's working tree
    checkout.mkdir()
    (checkout / "marker-of-the-tree").write_text("x")

    def call(n: int, seconds: int, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(keep), *command], capture_output=True, text=True, timeout=120,
                              cwd=checkout,
                              env={**env, "OUT": str(tmp_path / f"out{n}"), "CALL_SECONDS": str(seconds)})

    first = call(1, 26, "bash", "-c", job)  # waits about 1 s: the job runs on after the call
    assert first.returncode == 3, first.stdout + first.stderr
    with tarfile.open(tmp_path / "out1" / "run-rec-a.tgz") as tar:
        assert tar.getnames()[:2] == ["rec-a/spec.json", "rec-a/progress/gemm.json"]
    # A folder that is no recording (a comparison's measured rows) comes back as it is, not only at the job's end.
    with tarfile.open(tmp_path / "out1" / "run-cmp-measured.tgz") as tar:
        assert "cmp-measured/rec-a.jsonl" in tar.getnames()
    # What the job has finished so far comes back too (a bench's JSON after its first run): a machine lost before
    # the job's end keeps it. Its console and small files, not a large log.
    with tarfile.open(tmp_path / "out1" / "job-progress.tgz") as tar:
        names = set(tar.getnames())
        assert {"./console.log", "./out/bench.json"} <= names and "./out/big.log" not in names
        assert tar.extractfile("./out/bench.json").read() == b'{"runs": 1}\n'
    second = call(2, 60, "bash", "-c", job)  # the same command again: it is not started twice
    assert second.returncode == 0, second.stdout + second.stderr
    assert (tmp_path / "starts").read_text().count("started") == 1
    with tarfile.open(tmp_path / "out2" / "job-rest.tgz") as tar:
        names = set(tar.getnames())
        assert {"./out/where", "./console.log"} <= names
        assert "./out/run-rec-a.tgz" not in names and "./out/vllm-cache.tgz" not in names
    # vLLM's compiled artefacts as a file of their own, beside job-rest.tgz, which they would take over 16 MiB.
    assert (tmp_path / "out2" / "vllm-cache.tgz").read_text() == "cache\n"
    with tarfile.open(tmp_path / "out2" / "run-rec-a.tgz") as tar:
        assert tar.getnames() == ["rec-a/spec.json"]  # the job's own pack, over the call's snapshot
    assert not (tmp_path / "out2" / "run-rec-b.tgz").exists()
    # It ran in its own copy of the tree, which the next call's sync of the tree leaves alone.
    tree = tmp_path / "dt" / "rec.tree"
    assert (tmp_path / "dt" / "rec" / "out" / "where").read_text().strip() == str(tree)
    assert (tree / "written-in-its-tree").exists() and (tree / "marker-of-the-tree").exists()
    assert call(3, 30).returncode == 0  # ended: no command needed to ask again
    none = subprocess.run(["bash", str(keep)], capture_output=True, text=True, timeout=60,
                          env={**env, "JOB": "other", "OUT": str(tmp_path / "out4")})
    assert none.returncode == 2 and "name the command" in none.stderr


def test_a_chain_gives_each_step_what_is_left_and_starts_none_without_enough(tmp_path: Path) -> None:
    chain = SCRIPT.parent / "chain.sh"
    steps = ['echo "first $RUN_TIMEOUT $STUDY_BUDGET $BENCH_TIMEOUT"; sleep 2', "exit 5", 'echo "third $RUN_TIMEOUT"']
    run = subprocess.run(["bash", str(chain), "100", *steps], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "MARGIN": "10", "MIN_STEP": "50"})
    assert run.returncode == 5  # the failed step's status; the steps after it still ran
    first = next(line for line in run.stdout.splitlines() if line.startswith("first"))
    _, timeout, budget, bench = first.split()
    assert timeout == budget == bench and 85 <= int(timeout) <= 90
    third = next(line for line in run.stdout.splitlines() if line.startswith("third"))
    assert int(third.split()[1]) <= 88  # the first step's seconds are gone
    short = subprocess.run(["bash", str(chain), "100", "echo ran"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "MARGIN": "10", "MIN_STEP": "95"})
    assert short.returncode == 0 and "not started: echo ran" in short.stdout and "\nran\n" not in short.stdout
    assert subprocess.run(["bash", str(chain), "soon", "true"], capture_output=True).returncode == 2


def test_keep_running_passes_each_word_of_its_command_as_given(tmp_path: Path) -> None:
    # As the README's call passes chain.sh its steps: words with spaces and quotes in them.
    keep = SCRIPT.parent / "keep_running.sh"
    chain = SCRIPT.parent / "chain.sh"
    env = {**os.environ, "DETACHED_DIR": str(tmp_path / "dt"), "RUNS_DIR": str(tmp_path / "runs"), "JOB": "steps",
           "FOLDER": "none", "OUT": str(tmp_path / "out"), "CALL_SECONDS": "60", "MIN_STEP": "1", "MARGIN": "5"}
    steps = ["echo \"one step\" > " + str(tmp_path / "a"), "X='two words' bash -c 'echo $X' > " + str(tmp_path / "b")]
    (tmp_path / "checkout").mkdir()
    run = subprocess.run(["bash", str(keep), "bash", str(chain), "50", *steps], capture_output=True, text=True,
                         timeout=120, env=env, cwd=tmp_path / "checkout")
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "a").read_text() == "one step\n" and (tmp_path / "b").read_text() == "two words\n"


def test_the_readmes_session_call_runs_its_steps_in_order(tmp_path: Path) -> None:
    # examples/study-real/README.md's call 1, as written there, on a checkout whose GPU scripts are stand-ins that
    # say what they were given: the steps run in order, in the job's own tree, and their folders come back.
    import re
    import shutil
    import tarfile

    readme = (SCRIPT.parents[2] / "examples" / "study-real" / "README.md").read_text()
    call = re.search(r"\n( +)PREPARE_TESTS=none PREPARE_TIMING=0 .*?keep_running\.sh.*?\.yaml\"\n", readme, re.S)
    assert call, "the README's call 1 is not where this test looks for it"
    # It refuses to start on a torn stash (tests/test_stash.py): a part left out by a refused call.
    assert readme[:call.start()].rstrip().endswith("bash scripts/device/stash.sh --check || exit 9")
    runs = tmp_path / "runs"
    command = "\n".join(line[len(call.group(1)):] for line in call.group(0).strip("\n").splitlines())
    command = command.replace("/tmp/runs", str(runs))
    folders = re.search(r'FOLDER="([^"]+)"', command)
    assert folders, "the README's call names no FOLDER"
    specs = re.findall(r"examples/study-real/[\w.-]+\.yaml", command.split("study.sh", 1)[1])
    assert specs, "the README's call runs no study role"
    checkout = tmp_path / "checkout"
    (checkout / "scripts" / "device").mkdir(parents=True)
    for name in ("detached.sh", "keep_running.sh", "chain.sh"):
        shutil.copy(SCRIPT.parent / name, checkout / "scripts" / "device" / name)
    shutil.copy(SCRIPT.parents[1] / "recording_archive.py", checkout / "scripts" / "recording_archive.py")
    # The kept recording the call unpacks, as a one-file stand-in with the layout of the real archive.
    kept = re.search(r"tar xJf (\S+)", command)
    assert kept, "the README's call unpacks no kept recording"
    (tmp_path / "rec" / "study-real-1-5b" / "trajectory").mkdir(parents=True)
    (tmp_path / "rec" / "study-real-1-5b" / "trajectory" / "index.json").write_text("{}")
    (checkout / kept.group(1)).parent.mkdir(parents=True)
    with tarfile.open(checkout / kept.group(1), "w:xz") as tar:
        tar.add(tmp_path / "rec" / "study-real-1-5b", arcname="study-real-1-5b")
    log = tmp_path / "steps.log"
    stand_ins = {
        "pipeline.sh": f'[ "${{2:-}}" = --prepare ] && exit 0; echo "record $1" >> {log}; exit 9',
        "study.sh": f'[ -f recordings/study-real-1-5b/trajectory/index.json ] || exit 9; '
                    f'echo "study $* $STUDY_BUDGET" >> {log}; for s in "$@"; do '
                    f'n=study-real-$(basename "$s" .yaml | tr . -); mkdir -p {runs}/$n; '
                    f'echo "{{}}" > {runs}/$n/spec.json; done',
    }
    for name, body in stand_ins.items():
        (checkout / "scripts" / "device" / name).write_text("set -u\n" + body + "\n")
    env = {**os.environ, "DETACHED_DIR": str(tmp_path / "dt"), "RUNS_DIR": str(runs), "MARGIN": "5", "MIN_STEP": "1"}

    first = subprocess.run(["bash", "-c", f"B=300\n{command}"], capture_output=True, text=True, timeout=120,
                           cwd=checkout, env={**env, "OUT": str(tmp_path / "out1")})
    assert first.returncode in (0, 3), first.stdout + first.stderr
    steps = [line.split() for line in log.read_text().splitlines()]
    assert [step[:-1] for step in steps] == [["study", *specs]]  # the study's roles in one step, in the README's order
    assert 0 < int(steps[0][-1]) <= 300  # bounded by what the call's B leaves
    tree = tmp_path / "dt" / "session.tree"
    # The kept recording is unpacked into the job's own tree, not the call's.
    assert (tree / "recordings" / "study-real-1-5b" / "trajectory").is_dir()
    assert not (checkout / "recordings").exists()
    out = tmp_path / "out1"
    assert {p.name for p in out.glob("run-*.tgz")} == {f"run-{name}.tgz" for name in folders.group(1).split()}
    with tarfile.open(out / "job-rest.tgz") as tar:
        assert "./console.log" in tar.getnames()
        console = tar.extractfile("./console.log").read().decode()  # type: ignore[union-attr]
    assert console.count("== chain ") == 2 and "exit 0: mkdir -p recordings" in console


def test_keep_running_brings_back_new_compiled_artefacts_while_the_job_still_runs(tmp_path: Path) -> None:
    # A machine lost mid-job (a call more than 30 s late) takes what the job's servers compiled with it, unless a
    # call has brought it back before: each call does, once the store holds an archive it was not seeded with.
    import tarfile

    keep = SCRIPT.parent / "keep_running.sh"
    store = tmp_path / "store"
    (store / "m1").mkdir(parents=True)
    (store / "m1" / "old.tar.gz").write_bytes(b"seeded")
    digest = hashlib.sha256(b"seeded").hexdigest()
    (tmp_path / "store.seeded").write_text(f"{digest}  ./m1/old.tar.gz\n")  # as models.sh's seed_vllm_store lists it
    env = {**os.environ, "DETACHED_DIR": str(tmp_path / "dt"), "RUNS_DIR": str(tmp_path / "runs"), "JOB": "srv",
           "FOLDER": "none", "VLLM_STORE": str(store)}
    checkout = tmp_path / "checkout"
    checkout.mkdir()

    def call(n: int, *command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(keep), *command], capture_output=True, text=True, timeout=60,
                              cwd=checkout, env={**env, "OUT": str(tmp_path / f"out{n}"), "CALL_SECONDS": "26"})

    # The job's first call: nothing new in the store yet, so nothing comes back.
    job = f"sleep 3 && mkdir -p {store}/m2 && echo new > {store}/m2/.a.tar.gztmp && echo new > {store}/m2/a.tar.gz " \
          f"&& sleep 30"
    try:
        first = call(1, "bash", "-c", job)
        assert first.returncode == 3 and not (tmp_path / "out1" / "vllm-cache.tgz").exists(), first.stdout
        time.sleep(4)
        second = call(2)  # the job still runs; the store now holds a new model's archive
        assert second.returncode == 3, second.stdout + second.stderr
        with tarfile.open(tmp_path / "out2" / "vllm-cache.tgz") as tar:
            assert sorted(tar.getnames()) == ["./m2/a.tar.gz"]  # the new archive alone: not the seeded, no temporary
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", "srv"], env=env, capture_output=True, timeout=60)
