"""cudanalyst.runner.lifeline: a child ends when the process that started it dies, even by SIGKILL, and even when
the thread that asked for it has ended long before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from cudanalyst.runner import lifeline

pytestmark = pytest.mark.skipif(not lifeline.supported(), reason="the parent-death signal is Linux only")

PARENT = textwrap.dedent("""
    import subprocess, sys, threading, time
    from cudanalyst.runner import lifeline
    got = []
    def start():
        if sys.argv[1] == "lifeline":
            got.append(lifeline.popen(["sleep", "300"], start_new_session=True))
        else:  # the tie made by hand, from a thread that then ends: what popen avoids
            got.append(subprocess.Popen(["sleep", "300"], start_new_session=True, preexec_fn=lifeline.preexec()))
    t = threading.Thread(target=start)
    t.start()
    t.join()  # the thread that asked for the child is gone from here on
    time.sleep(1.0)
    print(got[0].pid, flush=True)
    time.sleep(300)
""")


def gone(pid: int) -> bool:
    """No such process, or a zombie nobody reaped yet (it runs nothing either way)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pid: int, deadline_s: float = 30) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if gone(pid):
            return True
        time.sleep(0.1)
    return gone(pid)


def start_parent(mode: str) -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, mode], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_child_outlives_the_asking_thread_and_dies_with_the_killed_parent():
    parent, child = start_parent("lifeline")
    try:
        assert not gone(child)  # the thread that asked ended a second ago; the child runs on
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        assert wait_gone(child), f"child {child} still runs after its parent was killed"
    finally:
        parent.kill()
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_tie_made_on_a_short_lived_thread_ends_with_that_thread():
    # Why popen forks on a thread of its own: the kernel signals the child when the forking *thread* ends.
    parent, child = start_parent("by-hand")
    try:
        assert wait_gone(child)
        assert parent.poll() is None  # the parent itself still runs
    finally:
        parent.kill()
        parent.wait(30)


def test_a_parent_already_gone_ends_the_child_at_once():
    code = "from cudanalyst.runner.lifeline import die_with_parent; die_with_parent(9, parent_pid=1); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL and "alive" not in done.stdout


def test_popen_keeps_a_given_preexec_fn_and_raises_the_child_errors_on_any_thread():
    import threading

    base = os.nice(0)
    proc = lifeline.popen([sys.executable, "-c", "import os; print(os.nice(0))"], stdout=subprocess.PIPE,
                          text=True, preexec_fn=lambda: os.nice(3))
    assert int(proc.communicate(timeout=60)[0]) == min(19, base + 3)

    errors: list[BaseException] = []

    def missing() -> None:
        try:
            lifeline.popen(["/no/such/program"])
        except FileNotFoundError as exc:
            errors.append(exc)

    t = threading.Thread(target=missing)
    t.start()
    t.join(60)
    assert len(errors) == 1 and "/no/such/program" in str(errors[0])


def test_stop_groups_terms_each_group_and_kills_what_ignores_it():
    # One child stops on SIGTERM; the other ignores it and holds a grandchild in its group: SIGKILL after the
    # grace ends both, so nothing started by a stopped child is left behind.
    polite = lifeline.popen(["sleep", "300"], start_new_session=True)
    stubborn_code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                     "p = subprocess.Popen(['sleep', '300']); print(p.pid, flush=True); time.sleep(300)")
    stubborn = lifeline.popen([sys.executable, "-c", stubborn_code], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout is not None
    grandchild = int(stubborn.stdout.readline())
    try:
        lifeline.stop_groups([polite, stubborn], grace_s=1.0)
        assert polite.returncode == -signal.SIGTERM
        assert stubborn.returncode == -signal.SIGKILL
        assert wait_gone(grandchild), f"grandchild {grandchild} outlived its group's SIGKILL"
    finally:
        for p in (polite, stubborn):
            if p.poll() is None:
                p.kill()
