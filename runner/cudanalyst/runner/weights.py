"""Model weights for `serve: local`: a local folder as is, or an s3:// prefix synced to local disk first.

vLLM reads weights from a folder, so an object-store prefix is copied once into the cache
(`$CUDANALYST_CACHE/weights/<digest of the URI>/`, default ~/.cache/cudanalyst) and reused while
the prefix lists the same objects. A bare name is a folder of `$CUDANALYST_CACHE/models/` (where
scripts/build_tiny_model.py puts the test models). Anything else is refused: the runner never
downloads weights from a hub.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from cudanalyst.cache import cache_root
from cudanalyst.store import ObjectStore, S3Settings, open_store

SYNC_MARKER = ".cudanalyst-sync.json"


class WeightsError(ValueError):
    """The model's weights cannot be found or fetched; the message names the path or URI."""


def resolve_model_path(model: str, s3: S3Settings | None = None, cache: Path | None = None) -> str:
    """A local folder holding the model (config.json), syncing it from S3 first when needed."""
    if model.startswith("s3://"):
        target = (cache or cache_root()) / "weights" / hashlib.sha256(model.encode()).hexdigest()[:16]
        return str(sync_prefix(open_store(model if model.endswith("/") else model + "/", s3), target, model))
    path = Path(model.removeprefix("file://"))
    cached = (cache or cache_root()) / "models" / model
    if not path.exists() and "/" not in model and cached.is_dir():
        # A bare name: a model prepared in the cache (scripts/build_tiny_model.py, a converted demo model).
        path = cached
    if not path.exists():
        raise WeightsError(f"model path {model!r} does not exist (give a local folder, an s3:// prefix, "
                           f"or the name of a folder in {cached.parent})")
    if not (path / "config.json").is_file():
        raise WeightsError(f"model path {model!r} is not a model folder: no config.json in it")
    return str(path.absolute())  # symlinks kept: the folder named in the spec is the one served


def sync_prefix(store: ObjectStore, target: Path, uri: str) -> Path:
    """Copy every object under the store's prefix into target; skipped when the listing is unchanged."""
    keys = sorted(store.list(""))
    if not keys:
        raise WeightsError(f"no objects under {uri}: nothing to serve")
    if "config.json" not in keys:
        raise WeightsError(f"{uri} holds no config.json: not a model folder")
    marker = target / SYNC_MARKER
    if marker.is_file():
        try:
            if json.loads(marker.read_text()).get("keys") == keys:
                return target
        except (OSError, json.JSONDecodeError):
            pass  # a damaged marker means: sync again
    target.mkdir(parents=True, exist_ok=True)
    for key in keys:
        dest = target.joinpath(*key.split("/"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Temp file + rename: a pod killed mid-copy never leaves a truncated weight file behind.
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(store.get_bytes(key))
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    marker.write_text(json.dumps({"uri": uri, "keys": keys}))
    return target
