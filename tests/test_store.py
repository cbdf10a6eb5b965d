"""Behaviour every store must show, run against a local folder and a real S3 endpoint (moto)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from cudanalyst.store import (
    FileStore,
    InvalidKey,
    ObjectNotFound,
    ObjectStore,
    S3Store,
    StoreError,
    open_store,
)


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "file":
        yield open_store(f"file://{tmp_path}/root/")
    else:
        yield request.getfixturevalue("s3_store")


def test_bytes_and_json_round_trip(store: ObjectStore) -> None:
    store.put_bytes("a/b.bin", b"\x00\x01payload")
    store.put_json("a/c.json", {"label": "pass", "speedup": 1.5, "text": "µs"})
    assert store.get_bytes("a/b.bin") == b"\x00\x01payload"
    assert store.get_json("a/c.json") == {"label": "pass", "speedup": 1.5, "text": "µs"}
    assert store.get_text("a/c.json").startswith("{")
    assert store.exists("a/b.bin") and not store.exists("a/nothing.json")


def test_pydantic_models_are_written_with_camel_case_aliases(store: ObjectStore) -> None:
    class Record(BaseModel):
        model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)
        evaluated_up_to: str
        gpu_seconds: float

    store.put_json("r.json", Record(evaluated_up_to="verify", gpu_seconds=2.5))
    assert store.get_json("r.json") == {"evaluatedUpTo": "verify", "gpuSeconds": 2.5}


def test_missing_key_names_the_key_and_the_store(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as info:
        store.get_bytes("outcomes/u-17.json")
    assert "outcomes/u-17.json" in str(info.value)
    assert store.uri in str(info.value)
    assert info.value.key == "outcomes/u-17.json"


def test_overwrite_replaces_whole_object(store: ObjectStore) -> None:
    store.put_bytes("k", b"x" * 10_000)
    store.put_bytes("k", b"short")
    assert store.get_bytes("k") == b"short"


def test_put_if_absent_writes_once(store: ObjectStore) -> None:
    assert store.put_json_if_absent("outcomes/u1.json", {"label": "fast"}) is True
    assert store.put_json_if_absent("outcomes/u1.json", {"label": "fail"}) is False
    assert store.get_json("outcomes/u1.json") == {"label": "fast"}
    assert store.put_if_absent("raw", b"one") is True
    assert store.put_if_absent("raw", b"two") is False
    assert store.get_bytes("raw") == b"one"


def test_put_if_absent_racing_writers_one_wins(store: ObjectStore) -> None:
    writers = 8
    barrier = threading.Barrier(writers)

    def write(i: int) -> bool:
        barrier.wait()
        return store.put_if_absent("unit", f"writer-{i}".encode())

    with ThreadPoolExecutor(writers) as pool:
        results = list(pool.map(write, range(writers)))
    assert results.count(True) == 1
    winner = results.index(True)
    assert store.get_bytes("unit") == f"writer-{winner}".encode()


def test_readers_never_see_a_partial_object(store: ObjectStore) -> None:
    # Two complete versions alternate while readers poll: every read is one of them, whole.
    size = 2_000_000 if isinstance(store, FileStore) else 300_000
    versions = [b"A" * size, b"B" * (size // 2)]
    store.put_bytes("big", versions[0])
    stop = threading.Event()
    seen: list[int] = []
    bad: list[int] = []

    def read() -> None:
        while not stop.is_set():
            data = store.get_bytes("big")
            (seen if data in versions else bad).append(len(data))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    for i in range(20):
        store.put_bytes("big", versions[i % 2])
    stop.set()
    for t in readers:
        t.join()
    assert seen and not bad


def test_list_is_lexicographic_and_filters_by_string_prefix(store: ObjectStore) -> None:
    keys = ["a0", "a-c", "a/b", "a/c/d", "outcomes/x.json", "outputs/y", "z"]
    for key in reversed(keys):
        store.put_bytes(key, b".")
    assert list(store.list()) == sorted(keys)
    assert list(store.list("a/")) == ["a/b", "a/c/d"]
    assert list(store.list("out")) == ["outcomes/x.json", "outputs/y"]
    assert list(store.list("outcomes/")) == ["outcomes/x.json"]
    assert list(store.list("nothing/")) == []


def test_child_view_is_relative_to_its_prefix(store: ObjectStore) -> None:
    run = store.child("runs/gemm-early")
    run.put_json("spec.json", {"k": 1})
    run.put_bytes("outcomes/u1.json", b"{}")
    assert store.get_json("runs/gemm-early/spec.json") == {"k": 1}
    assert list(run.list()) == ["outcomes/u1.json", "spec.json"]
    assert run.uri == store.uri + "runs/gemm-early/"
    assert run.uri_of("spec.json") == store.uri + "runs/gemm-early/spec.json"
    assert list(run.child("outcomes").list()) == ["u1.json"]


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put_bytes("gone", b"1")
    store.delete("gone")
    store.delete("gone")
    assert not store.exists("gone")
    with pytest.raises(ObjectNotFound):
        store.get_bytes("gone")


@pytest.mark.parametrize("key", ["", "/abs", "../escape", "a/../b", "a//b", "a/./b", "back\\slash"])
def test_invalid_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidKey) as info:
        store.put_bytes(key, b"x")
    assert repr(key) in str(info.value)


def test_invalid_json_names_the_object(store: ObjectStore) -> None:
    store.put_bytes("broken.json", b"{not json")
    with pytest.raises(StoreError, match="broken.json.*not valid JSON"):
        store.get_json("broken.json")


# ------------------------------------------------------------------------------- file specifics


def test_file_uris_and_plain_paths_open_the_same_folder(tmp_path: Path) -> None:
    a = open_store(f"file://{tmp_path}/x")
    b = open_store(str(tmp_path / "x"))
    c = open_store(tmp_path / "x")
    a.put_bytes("k", b"1")
    assert b.get_bytes("k") == c.get_bytes("k") == b"1"
    assert a.uri == b.uri == (tmp_path / "x").as_uri() + "/"


@pytest.mark.parametrize(
    ("uri", "message"),
    [("s3:///prefix", "must name a bucket"), ("gs://b/p", "unsupported store URI"),
     ("file://otherhost/x", "local folder"), ("", "invalid store URI"), ("s3://b/../x", "'..'")],
)
def test_bad_uris_are_refused_with_the_uri_named(uri: str, message: str) -> None:
    with pytest.raises(InvalidKey, match=message):
        open_store(uri)


def test_s3_uri_parses_bucket_and_prefix(s3_settings: Any) -> None:
    store = open_store("s3://my-bucket/runs/x", s3_settings)
    assert isinstance(store, S3Store)
    assert store.bucket == "my-bucket" and store.uri == "s3://my-bucket/runs/x/"


def test_failed_file_write_keeps_old_object_and_leaves_no_temp(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("obj", b"old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(StoreError, match="No space left"):
        store.put_bytes("obj", b"new" * 1000)
    monkeypatch.undo()
    assert store.get_bytes("obj") == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["obj"]


def test_temp_files_of_writes_in_flight_are_not_listed(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("outcomes/a.json", b"{}")
    (tmp_path / "outcomes" / ".b.json9x8y.tmp-w").write_bytes(b"{")  # a writer mid-flight
    assert list(store.list()) == ["outcomes/a.json"]


def test_a_file_in_place_of_a_folder_is_a_clear_error(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    store.put_bytes("a", b"file")
    with pytest.raises(StoreError, match="not a folder"):
        store.put_bytes("a/b", b"x")
