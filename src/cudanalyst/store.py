"""One object-store interface over ``s3://`` (boto3) and ``file://`` (or a plain path).

Every stage of a run talks to the store through :class:`ObjectStore` only, so a local folder and
an S3 bucket (AWS, MinIO, Ceph) behave the same:

- writes are atomic: a reader never sees a half-written object (temp file + ``os.replace``
  locally; an S3 PUT is atomic by nature);
- ``put_if_absent`` writes an object once, by key; a second write of the same key is a no-op
  that returns ``False`` (a retried pod skips what is done);
- ``list(prefix)`` is a paginated iterator of keys in lexicographic order;
- every failure is a :class:`StoreError` whose message names the URI and key and says what to check.

Credentials for S3 come, in this order, from explicit settings, from a mounted Secret folder
(``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` [/ ``AWS_SESSION_TOKEN``] files, or MinIO-style
``access-key`` / ``secret-key`` files), or from boto3's standard chain (environment, shared
config, web identity / IRSA, instance metadata). See docs/object-store.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "BucketNotFound",
    "FileStore",
    "InvalidKey",
    "ObjectNotFound",
    "ObjectStore",
    "S3Settings",
    "S3Store",
    "StoreAccessDenied",
    "StoreError",
    "StoreUnreachable",
    "open_store",
    "read_credentials_dir",
]


# ----------------------------------------------------------------------------------------- errors


class StoreError(Exception):
    """Any failure of the object store; the message names the URI/key and what to check."""


class ObjectNotFound(StoreError, KeyError):
    """The key does not exist."""

    def __init__(self, message: str, key: str = "") -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class StoreUnreachable(StoreError):
    """The endpoint cannot be reached (DNS, refused connection, timeout)."""


class StoreAccessDenied(StoreError):
    """Missing, unknown or wrong credentials, or a policy that forbids the operation."""


class BucketNotFound(StoreError):
    """The bucket named in the URI does not exist at the endpoint."""


class InvalidKey(StoreError, ValueError):
    """A key or URI that cannot name an object (empty, absolute, '..', malformed URI)."""


# --------------------------------------------------------------------------------------- settings


# Where a pod mounts spec.s3.credentialsSecret (the operator sets this up; cudanalyst.operator.jobs).
CREDENTIALS_DIR_ENV = "CUDANALYST_S3_CREDENTIALS_DIR"
# Attempts per store request in this process (S3Settings.max_attempts). The operator gives runner pods more than
# the default: a shard that gave up after a second of an unreachable or 5xx store exited 1, and only the Job's few
# retries saved the run (the chaos bench, issue 33); boto3's backoff (up to 20 s a wait) then waits out a minute or two.
MAX_ATTEMPTS_ENV = "CUDANALYST_S3_MAX_ATTEMPTS"


class S3Fields(Protocol):
    """A spec's `s3` block (cudanalyst.api.spec.S3Spec, of runs and recordings alike)."""

    endpoint: str
    region: str
    addressing_style: str


class S3Settings(BaseModel):
    """How to reach an S3-compatible endpoint. Empty fields fall back to boto3's defaults."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    endpoint: str = Field("", description="Endpoint URL for MinIO/Ceph (http://minio:9000); empty = AWS.")
    region: str = Field("", description="Region; empty = boto3's chain, else us-east-1.")
    credentials_dir: str = Field(
        "",
        description="Folder of a mounted Secret holding AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
        "(or access-key/secret-key) files; empty = boto3's standard credential chain.",
    )
    access_key_id: str = Field("", description="Explicit access key (tests, local use).")
    secret_access_key: str = Field("", description="Explicit secret key (tests, local use).")
    session_token: str = Field("", description="Explicit session token, if any.")
    addressing_style: str = Field(
        "auto", description="auto | path | virtual; MinIO and Ceph usually need path (set when endpoint is set)."
    )
    connect_timeout: float = Field(5.0, gt=0, description="Seconds to wait for a connection.")
    read_timeout: float = Field(60.0, gt=0, description="Seconds to wait for a response.")
    max_attempts: int = Field(3, ge=1, description="Attempts per request (retries on throttling, 5xx, lost connections).")

    @classmethod
    def from_spec(cls, s3: S3Fields) -> S3Settings:
        """A spec's `s3` block, with the credentials folder a pod has mounted (CREDENTIALS_DIR_ENV), if any."""
        raw = os.environ.get(MAX_ATTEMPTS_ENV, "").strip()
        if raw and not (raw.isdigit() and int(raw) >= 1):
            raise ValueError(f"{MAX_ATTEMPTS_ENV}={raw!r}: expected a whole number of attempts, 1 or more")
        return cls(endpoint=s3.endpoint, region=s3.region, addressing_style=s3.addressing_style,
                   credentials_dir=os.environ.get(CREDENTIALS_DIR_ENV, ""), max_attempts=int(raw) if raw else 3)


# Kubernetes Secrets mounted as folders: one file per key. Both spellings are common.
_KEY_FILES = (
    ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"),
    ("access-key", "secret-key", "session-token"),
    ("accesskey", "secretkey", "sessiontoken"),
)


def read_credentials_dir(folder: str | os.PathLike[str]) -> tuple[str, str, str]:
    """Read (access key, secret key, session token or '') from a mounted Secret folder."""
    root = Path(folder)
    if not root.is_dir():
        raise StoreAccessDenied(
            f"S3 credentials folder {root} does not exist: check that the Secret named in "
            "spec.s3.credentialsSecret exists and is mounted"
        )
    for access_name, secret_name, token_name in _KEY_FILES:
        access, secret = root / access_name, root / secret_name
        if access.is_file() and secret.is_file():
            token = root / token_name
            return (
                access.read_text().strip(),
                secret.read_text().strip(),
                token.read_text().strip() if token.is_file() else "",
            )
    found = sorted(p.name for p in root.iterdir() if not p.name.startswith(".."))
    raise StoreAccessDenied(
        f"S3 credentials folder {root} holds {found or 'no files'}; expected the files "
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or access-key and secret-key)"
    )


# -------------------------------------------------------------------------------------------- keys


def _check_key(key: str) -> str:
    """Keys are '/'-separated relative names; refuse anything that could escape the store root."""
    if not isinstance(key, str) or not key:
        raise InvalidKey(f"invalid object key {key!r}: a key must be a non-empty string")
    if key.startswith("/") or "\\" in key or "\x00" in key:
        raise InvalidKey(f"invalid object key {key!r}: keys are relative, '/'-separated, without '\\'")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidKey(f"invalid object key {key!r}: empty, '.' or '..' path components are not allowed")
    return key


def _join_prefix(root: str, prefix: str) -> str:
    """Root prefix (ends with '/' or is empty) + a child prefix, normalised to end with '/'."""
    prefix = prefix.strip("/")
    if not prefix:
        return root
    _check_key(prefix)
    return f"{root}{prefix}/"


def _to_json_bytes(obj: Any) -> bytes:
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json", by_alias=True)
    return json.dumps(obj, ensure_ascii=False, indent=1).encode("utf-8") + b"\n"


# ------------------------------------------------------------------------------------- interface


class ObjectStore(ABC):
    """Keys are relative to this store's root (a bucket prefix or a folder)."""

    @property
    @abstractmethod
    def uri(self) -> str:
        """The root URI, ending with '/'."""

    def uri_of(self, key: str) -> str:
        return self.uri + _check_key(key)

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None: ...

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        """Write once: True if this call wrote the object, False if it already existed."""

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "", page_size: int = 1000) -> Iterator[str]:
        """Keys starting with ``prefix`` (a string prefix, like S3), in lexicographic order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; removing a missing object is not an error."""

    @abstractmethod
    def child(self, prefix: str) -> ObjectStore:
        """A view whose keys are relative to ``prefix`` (e.g. one run's folder)."""

    def get_text(self, key: str) -> str:
        return self.get_bytes(key).decode("utf-8")

    def get_json(self, key: str) -> Any:
        data = self.get_bytes(key)
        try:
            return json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreError(f"object {self.uri_of(key)} is not valid JSON: {exc}") from exc

    def put_json(self, key: str, obj: Any) -> None:
        """Write JSON (pydantic models are dumped with their camelCase aliases)."""
        self.put_bytes(key, _to_json_bytes(obj), "application/json")

    def put_json_if_absent(self, key: str, obj: Any) -> bool:
        return self.put_if_absent(key, _to_json_bytes(obj), "application/json")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.uri!r})"


# ------------------------------------------------------------------------------------------ files

# Temp files live beside their target (os.replace is atomic only within one filesystem);
# this pattern keeps them out of list().
_TMP_MARK = ".tmp-"
_TMP_RE = re.compile(r"^\..*\.tmp-[^/]*$")


class FileStore(ObjectStore):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).absolute()

    @property
    def root(self) -> Path:
        return self._root

    @property
    def uri(self) -> str:
        return self._root.as_uri().rstrip("/") + "/"

    def _path(self, key: str) -> Path:
        return self._root.joinpath(*_check_key(key).split("/"))

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ObjectNotFound(f"no object {key!r} in {self.uri} (file {path} does not exist)", key) from None
        except PermissionError as exc:
            raise StoreAccessDenied(f"cannot read {path} (key {key!r}): {exc.strerror}") from exc
        except OSError as exc:
            raise StoreError(f"cannot read {path} (key {key!r}): {exc}") from exc

    def _write_temp(self, path: Path, data: bytes) -> str:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}", suffix=_TMP_MARK + "w")
        except OSError as exc:
            raise self._os_error("create folder for", path, exc) from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())  # the rename must not outrun the data after a crash
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._os_error("write", path, exc) from exc
        return tmp

    def _os_error(self, verb: str, path: Path, exc: OSError) -> StoreError:
        if isinstance(exc, PermissionError):
            return StoreAccessDenied(f"cannot {verb} {path}: permission denied (check the folder's owner)")
        if isinstance(exc, (NotADirectoryError, FileExistsError)):
            return StoreError(f"cannot {verb} {path}: a parent of it is a file, not a folder")
        return StoreError(f"cannot {verb} {path}: {exc}")

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        path = self._path(key)
        tmp = self._write_temp(path, data)
        try:
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise self._os_error("write", path, exc) from exc

    def put_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        path = self._path(key)
        if path.exists():
            return False
        tmp = self._write_temp(path, data)
        try:
            # link() refuses to overwrite: the complete file appears under its name at most once.
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as exc:
            # Filesystems without hard links: fall back to rename; the race is harmless because
            # both writers hold the result for the same key.
            if path.exists():
                return False
            try:
                os.replace(tmp, path)
                tmp = ""
                return True
            except OSError:
                raise self._os_error("write", path, exc) from exc
        finally:
            if tmp:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "", page_size: int = 1000) -> Iterator[str]:
        if prefix:
            if prefix.startswith("/") or "\\" in prefix:
                raise InvalidKey(f"invalid prefix {prefix!r}: prefixes are relative and '/'-separated")
            head, _, _ = prefix.rpartition("/")
            if head:
                _check_key(head)
        else:
            head = ""
        start = self._root.joinpath(*head.split("/")) if head else self._root
        base = f"{head}/" if head else ""
        for key in self._walk(start, base):
            if key.startswith(prefix):
                yield key

    def _walk(self, folder: Path, base: str) -> Iterator[str]:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        except PermissionError as exc:
            raise StoreAccessDenied(f"cannot list {folder}: permission denied") from exc
        # A folder sorts as 'name/', which makes the walk yield keys in plain lexicographic order.
        named = sorted((e.name + "/" if e.is_dir() else e.name, e) for e in entries)
        for sort_name, entry in named:
            if sort_name.endswith("/"):
                yield from self._walk(Path(entry.path), base + sort_name)
            elif not _TMP_RE.match(entry.name):
                yield base + entry.name

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._os_error("delete", path, exc) from exc

    def child(self, prefix: str) -> FileStore:
        sub = _join_prefix("", prefix)
        return FileStore(self._root.joinpath(*sub.strip("/").split("/")) if sub else self._root)


# --------------------------------------------------------------------------------------------- S3

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_DENIED = {
    "AccessDenied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
    "403",
    "AllAccessDisabled",
}


class S3Store(ObjectStore):
    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None,
                 client: Any | None = None) -> None:
        self._bucket = bucket
        self._prefix = prefix  # '' or ends with '/'
        self._settings = settings or S3Settings()
        self._client = client if client is not None else _make_client(self._settings)

    @property
    def bucket(self) -> str:
        return self._bucket

    @property
    def client(self) -> Any:
        """The boto3 client (shared by every store opened with the same settings)."""
        return self._client

    @property
    def uri(self) -> str:
        return f"s3://{self._bucket}/{self._prefix}"

    def _where(self) -> str:
        return self._settings.endpoint or "the default AWS endpoint"

    def _error(self, exc: Exception, key: str, verb: str) -> StoreError:
        """Translate a botocore failure into the store's family, saying what to check."""
        from botocore.exceptions import (
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
            ReadTimeoutError,
        )

        target = f"{self.uri}{key}" if key else self.uri
        if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError)):
            return StoreUnreachable(
                f"cannot {verb} {target}: S3 endpoint {self._where()} is unreachable ({exc}); "
                "check spec.s3.endpoint, DNS and network policies"
            )
        if isinstance(exc, ReadTimeoutError):
            return StoreUnreachable(f"cannot {verb} {target}: {self._where()} did not answer in time ({exc})")
        if isinstance(exc, (NoCredentialsError, PartialCredentialsError)):
            return StoreAccessDenied(
                f"cannot {verb} {target}: no S3 credentials found; set spec.s3.credentialsSecret "
                "(a Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or the AWS_* environment"
            )
        if isinstance(exc, ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "NoSuchBucket":
                return BucketNotFound(
                    f"cannot {verb} {target}: bucket {self._bucket!r} does not exist at {self._where()}; "
                    "create it or fix the bucket in the URI"
                )
            if code in _NOT_FOUND or status == 404:
                return ObjectNotFound(f"no object {key!r} in {self.uri} (S3 key {self._prefix}{key})", key)
            if code in _DENIED or status == 403:
                return StoreAccessDenied(
                    f"cannot {verb} {target}: access denied by {self._where()} ({code}); check the "
                    "access key and secret key (spec.s3.credentialsSecret) and the bucket policy"
                )
            return StoreError(f"cannot {verb} {target}: {code or status}: {err.get('Message', exc)}")
        return StoreError(f"cannot {verb} {target}: {exc}")

    def _call(self, verb: str, key: str, fn: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            raise self._error(exc, key, verb) from exc

    def get_bytes(self, key: str) -> bytes:
        full = self._prefix + _check_key(key)
        resp = self._call("read", key, self._client.get_object, Bucket=self._bucket, Key=full)
        try:
            return resp["Body"].read()
        except Exception as exc:  # a connection dropped mid-body
            raise StoreUnreachable(f"cannot read {self.uri_of(key)}: connection lost ({exc})") from exc

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        full = self._prefix + _check_key(key)
        self._call("write", key, self._client.put_object, Bucket=self._bucket, Key=full, Body=data,
                   ContentType=content_type)

    def put_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._prefix + _check_key(key)
        try:
            # Conditional write: the server refuses it (412) when the key exists.
            self._client.put_object(Bucket=self._bucket, Key=full, Body=data, ContentType=content_type,
                                    IfNoneMatch="*")
            return True
        except ClientError as exc:
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            if code == "NotImplemented" or status == 501:
                # An older S3-compatible server: check, then write. Two racing writers store
                # the result for the same key, so the race costs nothing.
                if self.exists(key):
                    return False
                self.put_bytes(key, data, content_type)
                return True
            raise self._error(exc, key, "write") from exc
        except BotoCoreError as exc:
            raise self._error(exc, key, "write") from exc

    def exists(self, key: str) -> bool:
        full = self._prefix + _check_key(key)
        try:
            self._call("check", key, self._client.head_object, Bucket=self._bucket, Key=full)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str = "", page_size: int = 1000) -> Iterator[str]:
        if prefix.startswith("/") or "\\" in prefix:
            raise InvalidKey(f"invalid prefix {prefix!r}: prefixes are relative and '/'-separated")
        paginator = self._client.get_paginator("list_objects_v2")
        pages = paginator.paginate(Bucket=self._bucket, Prefix=self._prefix + prefix,
                                   PaginationConfig={"PageSize": page_size})
        cut = len(self._prefix)
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    yield obj["Key"][cut:]
        except (BotoCoreError, ClientError) as exc:
            raise self._error(exc, prefix, "list") from exc

    def delete(self, key: str) -> None:
        full = self._prefix + _check_key(key)
        self._call("delete", key, self._client.delete_object, Bucket=self._bucket, Key=full)

    def child(self, prefix: str) -> S3Store:
        return S3Store(self._bucket, _join_prefix(self._prefix, prefix), self._settings, self._client)


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _make_client(settings: S3Settings) -> Any:
    """One client per distinct settings: building one loads the S3 model (~0.5 s); clients are thread-safe."""
    cache_key = settings.model_dump_json()
    with _clients_lock:
        client = _clients.get(cache_key)
        if client is None:
            client = _clients[cache_key] = _new_client(settings)
        return client


def _new_client(settings: S3Settings) -> Any:
    import boto3
    from botocore.config import Config

    access, secret, token = settings.access_key_id, settings.secret_access_key, settings.session_token
    if not access and settings.credentials_dir:
        access, secret, token = read_credentials_dir(settings.credentials_dir)
    if bool(access) != bool(secret):
        raise StoreAccessDenied("S3 settings give only one of access key and secret key; give both")
    style = settings.addressing_style
    if style == "auto" and settings.endpoint:
        style = "path"  # MinIO and Ceph rarely have wildcard DNS for virtual-hosted buckets
    config = Config(
        connect_timeout=settings.connect_timeout,
        read_timeout=settings.read_timeout,
        retries={"max_attempts": settings.max_attempts, "mode": "standard"},
        s3={"addressing_style": style},
    )
    session = boto3.session.Session()
    region = settings.region or session.region_name or "us-east-1"
    return session.client(
        "s3",
        endpoint_url=settings.endpoint or None,
        region_name=region,
        aws_access_key_id=access or None,
        aws_secret_access_key=secret or None,
        aws_session_token=token or None,
        config=config,
    )


# ------------------------------------------------------------------------------------------- open


def open_store(uri: str | os.PathLike[str], s3: S3Settings | None = None) -> ObjectStore:
    """Open ``s3://bucket/prefix/``, ``file:///abs/folder/`` or a plain folder path."""
    if isinstance(uri, os.PathLike):
        return FileStore(uri)
    if not isinstance(uri, str) or not uri.strip():
        raise InvalidKey(f"invalid store URI {uri!r}: expected s3://bucket/prefix, file:///folder or a path")
    parsed = urlparse(uri)
    scheme = parsed.scheme.lower()
    if scheme == "s3":
        if not parsed.netloc:
            raise InvalidKey(f"invalid store URI {uri!r}: an s3:// URI must name a bucket (s3://bucket/prefix/)")
        prefix = parsed.path.strip("/")
        if prefix:
            _check_key(prefix)
        return S3Store(parsed.netloc, f"{prefix}/" if prefix else "", s3)
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidKey(f"invalid store URI {uri!r}: file URIs name a local folder (file:///abs/path)")
        return FileStore(unquote(parsed.path))
    if scheme and len(scheme) > 1:  # one letter would be a Windows drive
        raise InvalidKey(f"unsupported store URI {uri!r}: use s3://bucket/prefix, file:///folder or a path")
    return FileStore(uri)
