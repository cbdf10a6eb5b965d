"""Task inputs and references are made once for a pool of GPU workers (runner.kernels.references)."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import numpy as np

from cudanalyst.runner.kernels.workers.pool import WorkerPool
from cudanalyst.runner.kernels.workers.references import FOLDER_ENV, SharedArrays, task_inputs, task_reference
from cudanalyst.tasks import get_task

SMALL = get_task("jacobi-2d").with_sizes(N=16, TSTEPS=2)


def _slow_make(log: str) -> dict[str, np.ndarray]:
    with open(log, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(0.3)  # long enough that every process asks while the first still makes it
    return {"x": np.arange(5, dtype=np.float32)}


def _worker(folder: str, log: str, out: multiprocessing.Queue) -> None:
    shared = SharedArrays(folder)
    got = shared.get("inputs", SMALL, 7, lambda: _slow_make(log))
    out.put((shared.made, got["x"].tolist()))


def test_processes_sharing_a_folder_make_an_entry_once(tmp_path):
    log = str(tmp_path / "made.log")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), log, out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert len(Path(log).read_text().split()) == 1  # one maker; the others waited and loaded
    assert sorted(made for made, _ in results) == [0, 0, 0, 1]
    assert all(x == [0.0, 1.0, 2.0, 3.0, 4.0] for _, x in results)
    assert not list(tmp_path.glob(".tmp-*"))  # no torn temp files left behind


def test_a_second_process_loads_what_the_first_made(tmp_path):
    first, second = SharedArrays(tmp_path), SharedArrays(tmp_path)
    ins, want = task_reference(first, SMALL, 1000)
    ins2, want2 = task_reference(second, SMALL, 1000)
    assert first.made == 2 and second.made == 0  # inputs and reference, each made once
    expect_in = SMALL.make_inputs(1000)
    expect_out = SMALL.reference(expect_in)
    for name in expect_in:
        assert np.array_equal(ins2[name], expect_in[name]) and ins2[name].shape == expect_in[name].shape
    for name in expect_out:
        assert np.array_equal(want2[name], expect_out[name]) and want2[name].dtype == expect_out[name].dtype
    assert task_inputs(second, SMALL, 1000) is ins2  # kept in memory once loaded


def test_without_a_folder_entries_live_in_memory_and_old_ones_go(tmp_path):
    calls: list[int] = []
    shared = SharedArrays(None, keep=2)

    def make(seed: int) -> dict[str, np.ndarray]:
        calls.append(seed)
        return {"v": np.full(3, seed)}

    for seed in (1, 2, 1, 3, 1, 2):
        assert shared.get("inputs", SMALL, seed, lambda s=seed: make(s))["v"][0] == seed
    assert calls == [1, 2, 3, 2]  # 2 was evicted by 3 (1 was used more recently)
    assert shared.made == 4 and not list(tmp_path.iterdir())


def test_sizes_and_kinds_are_separate_entries(tmp_path):
    shared = SharedArrays(tmp_path)
    a = task_inputs(shared, SMALL, 1)
    b = task_inputs(shared, SMALL.with_sizes(N=20), 1)
    assert a["A"].shape == (16, 16) and b["A"].shape == (20, 20)
    assert len(list(tmp_path.glob("*.npz"))) == 2


def test_a_pool_hands_its_workers_one_folder_and_removes_it():
    with WorkerPool(2) as pool:
        folder = pool.shared_dir
        assert os.path.isdir(folder)
        for _ in range(2):
            reply = pool.call({"op": "environ"}, 60)
            assert reply["ok"] and FOLDER_ENV in reply["names"]
        assert {w.shared_dir for w in (*pool.workers, pool.timer)} == {folder}
    assert not os.path.exists(folder)
