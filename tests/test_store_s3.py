"""S3-only behaviour through a real endpoint on loopback (moto's server mode), never a patched client."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Endpoint, free_port, start_moto_server

from cudanalyst.store import (
    BucketNotFound,
    ObjectNotFound,
    S3Settings,
    S3Store,
    StoreAccessDenied,
    StoreUnreachable,
    open_store,
    read_credentials_dir,
)


def test_listing_pages_past_1000_keys(s3_bucket: str, s3_settings: S3Settings) -> None:
    store = open_store(f"s3://{s3_bucket}/run/", s3_settings)
    keys = [f"outcomes/u{i:05d}.json" for i in range(1203)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: store.put_bytes(k, b"{}"), keys))
    store.put_bytes("spec.json", b"{}")

    assert isinstance(store, S3Store)
    pages: list[int] = []
    store.client.meta.events.register(
        "after-call.s3.ListObjectsV2", lambda parsed, **_: pages.append(len(parsed.get("Contents", [])))
    )
    listed = list(store.list("outcomes/"))
    assert listed == keys  # every key once, in order, relative to the store's prefix
    assert pages == [1000, 203]  # the server's 1000-key page limit was crossed
    pages.clear()
    assert len(list(store.list("outcomes/", page_size=250))) == 1203
    assert pages == [250, 250, 250, 250, 203]


def test_listing_is_lazy(s3_store: Any) -> None:
    for i in range(3):
        s3_store.put_bytes(f"k{i}", b".")
    it = s3_store.list()
    assert next(it) == "k0"  # an iterator, not a list built up front


def test_missing_bucket_names_the_bucket(s3_settings: S3Settings) -> None:
    store = open_store("s3://no-such-bucket-here/runs/", s3_settings)
    with pytest.raises(BucketNotFound, match="bucket 'no-such-bucket-here' does not exist"):
        store.put_bytes("spec.json", b"{}")
    with pytest.raises(BucketNotFound):
        list(store.list())


def test_missing_key_reports_the_full_s3_key(s3_bucket: str, s3_settings: S3Settings) -> None:
    store = open_store(f"s3://{s3_bucket}/runs/a/", s3_settings)
    with pytest.raises(ObjectNotFound, match=r"'plan.json'.*runs/a/plan.json"):
        store.get_json("plan.json")


def test_unreachable_endpoint_is_named(s3_settings: S3Settings) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    settings = s3_settings.model_copy(update={"endpoint": dead})
    store = open_store("s3://bucket/prefix/", settings)
    with pytest.raises(StoreUnreachable) as info:
        store.get_bytes("spec.json")
    message = str(info.value)
    assert dead in message and "s3://bucket/prefix/spec.json" in message and "spec.s3.endpoint" in message
    with pytest.raises(StoreUnreachable):
        store.put_if_absent("x", b"1")
    with pytest.raises(StoreUnreachable):
        list(store.list())


def test_settings_use_camel_case_aliases() -> None:
    settings = S3Settings.model_validate({"endpoint": "http://minio:9000", "credentialsDir": "/var/run/s3"})
    assert settings.credentials_dir == "/var/run/s3"
    assert settings.model_dump(by_alias=True)["maxAttempts"] == 3


# ---------------------------------------------------------------------------------- credentials


@pytest.fixture(scope="module")
def auth_endpoint() -> Iterator[tuple[S3Endpoint, str, str, str]]:
    """A second moto server that checks credentials: an IAM user with an access key and an
    s3:* policy, then authentication switched on through moto's /moto-api/reset-auth."""
    endpoint = start_moto_server()
    try:
        import boto3

        iam = boto3.session.Session().client(
            "iam", endpoint_url=endpoint.url, region_name="us-east-1",
            aws_access_key_id="setup", aws_secret_access_key="setup",
        )
        iam.create_user(UserName="runner")
        policy = iam.create_policy(
            PolicyName="s3-all",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}),
        )
        iam.attach_user_policy(UserName="runner", PolicyArn=policy["Policy"]["Arn"])
        key = iam.create_access_key(UserName="runner")["AccessKey"]
        bucket = f"auth-{uuid.uuid4().hex[:12]}"
        endpoint.client().create_bucket(Bucket=bucket)
        endpoint.post("/moto-api/reset-auth", b"0")  # from now on every request is authenticated
        yield endpoint, bucket, key["AccessKeyId"], key["SecretAccessKey"]
    finally:
        endpoint.stop()


def _settings(endpoint: S3Endpoint, **kw: Any) -> S3Settings:
    return S3Settings(endpoint=endpoint.url, region="us-east-1", max_attempts=1, connect_timeout=2, **kw)


def test_right_credentials_are_accepted(auth_endpoint: tuple[S3Endpoint, str, str, str]) -> None:
    endpoint, bucket, access, secret = auth_endpoint
    store = open_store(f"s3://{bucket}/", _settings(endpoint, access_key_id=access, secret_access_key=secret))
    store.put_json("ok.json", {"a": 1})
    assert store.get_json("ok.json") == {"a": 1}


def test_wrong_secret_is_access_denied(auth_endpoint: tuple[S3Endpoint, str, str, str]) -> None:
    endpoint, bucket, access, _ = auth_endpoint
    store = open_store(f"s3://{bucket}/", _settings(endpoint, access_key_id=access, secret_access_key="wrong"))
    with pytest.raises(StoreAccessDenied) as info:
        store.put_bytes("x", b"1")
    assert "SignatureDoesNotMatch" in str(info.value) and "credentialsSecret" in str(info.value)
    with pytest.raises(StoreAccessDenied):
        store.get_bytes("x")


def test_unknown_access_key_is_access_denied(auth_endpoint: tuple[S3Endpoint, str, str, str]) -> None:
    endpoint, bucket, _, _ = auth_endpoint
    store = open_store(f"s3://{bucket}/", _settings(endpoint, access_key_id="AKIANOBODY0000000000",
                                                   secret_access_key="nope"))
    with pytest.raises(StoreAccessDenied, match="InvalidAccessKeyId"):
        list(store.list())


@pytest.mark.parametrize("names", [("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("access-key", "secret-key")])
def test_credentials_from_a_mounted_secret_folder(auth_endpoint: tuple[S3Endpoint, str, str, str],
                                                  tmp_path: Path, names: tuple[str, str]) -> None:
    endpoint, bucket, access, secret = auth_endpoint
    # Kubernetes writes each Secret key to a file; values often end with a newline.
    (tmp_path / names[0]).write_text(access + "\n")
    (tmp_path / names[1]).write_text(secret + "\n")
    store = open_store(f"s3://{bucket}/", _settings(endpoint, credentials_dir=str(tmp_path)))
    assert store.put_if_absent(f"from-{names[0]}", b"1") is True


def test_a_secret_folder_without_keys_says_which_files_it_wanted(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("x")
    with pytest.raises(StoreAccessDenied, match=r"holds \['token'\].*AWS_ACCESS_KEY_ID"):
        read_credentials_dir(tmp_path)
    with pytest.raises(StoreAccessDenied, match="does not exist"):
        open_store("s3://b/", S3Settings(endpoint="http://127.0.0.1:9", credentials_dir=str(tmp_path / "no")))
