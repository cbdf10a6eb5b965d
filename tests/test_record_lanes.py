"""scripts/device/record_lanes.sh: several recordings side by side on one GPU, each lane's model server started once
the previous lane's is up, all stopped at one deadline. The lanes' commands are run here with the pipeline replaced
by a command that prints its RUN_TIMEOUT (the script itself runs on the GPU machine)."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "device" / "record_lanes.sh"
SPECS = ["examples/study-real/recordings/1.5b.yaml", "examples/study-real/recordings/1.5b-islands-diff.yaml"]


def lanes(tmp_path: Path, *specs: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *specs], capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "DRY_RUN": "1", "OUT": str(tmp_path / "out"), **env})


def run_lane(command: str) -> tuple[str, float]:
    """A lane's command with the pipeline replaced: (what it printed, seconds it took)."""
    started = time.monotonic()
    p = subprocess.run(["bash", "-c", command.replace("bash scripts/device/pipeline.sh", "printenv RUN_TIMEOUT; :")],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip(), time.monotonic() - started


def test_the_second_recording_waits_for_the_first_ones_server_and_both_stop_at_one_deadline(tmp_path: Path) -> None:
    p = lanes(tmp_path, *SPECS, RUN_DEADLINE="300", START_WAIT="30")
    assert p.returncode == 0, p.stderr
    first, second = p.stdout.splitlines()
    assert first.startswith("0.r1:RUN_TIMEOUT=") and first.endswith(SPECS[0])
    assert second.startswith("0.r2:") and second.endswith(SPECS[1])
    console = tmp_path / "out" / "lane0.r1" / "console.log"
    assert str(console) in second and str(console) not in first

    # Each lane stops STOP_MARGIN (default 70 s) before the deadline, so that its folder is packed by then.
    printed, _ = run_lane(first.split(":", 1)[1])
    assert 220 <= int(printed) <= 230
    # The first lane's server comes up after 2 s: the second lane starts then, with what is left of the deadline.
    console.parent.mkdir(parents=True)
    console.write_text("starting the model server\n")
    threading.Timer(2.0, lambda: console.write_text("starting the model server\nwarming up the model (x)\n")).start()
    printed, took = run_lane(second.split(":", 1)[1])
    assert 2.0 <= took < 20 and 200 <= int(printed) <= 228


def test_a_first_server_that_never_comes_up_holds_the_next_lane_only_so_long(tmp_path: Path) -> None:
    p = lanes(tmp_path, *SPECS, RUN_DEADLINE="300", START_WAIT="5")
    _, second = p.stdout.splitlines()
    _, took = run_lane(second.split(":", 1)[1])
    assert 4.0 <= took < 15


def test_a_lane_that_starts_past_the_deadline_gets_one_second_not_an_unlimited_run(tmp_path: Path) -> None:
    # `timeout 0` means no limit: a lane started late must still stop at once.
    p = lanes(tmp_path, SPECS[0], RUN_DEADLINE="60")  # less than the stop margin
    printed, _ = run_lane(p.stdout.split(":", 1)[1])
    assert printed == "1"


def test_a_missing_spec_is_named_with_exit_2(tmp_path: Path) -> None:
    p = lanes(tmp_path, SPECS[0], "examples/no-such.yaml")
    assert p.returncode == 2 and "no spec examples/no-such.yaml" in p.stderr


def test_the_stop_margin_is_the_callers_to_set(tmp_path: Path) -> None:
    p = lanes(tmp_path, SPECS[0], RUN_DEADLINE="300", STOP_MARGIN="10")
    printed, _ = run_lane(p.stdout.split(":", 1)[1])
    assert 280 <= int(printed) <= 290
