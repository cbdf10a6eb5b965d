"""Compile candidate sources with nvcc to a cubin for sm_90, with ptxas's resource report.

- `compile_source(source)` runs one nvcc subprocess (time-limited, scrubbed environment) and returns
  a `CompileResult`: the cubin, per-kernel resources, parsed diagnostics and the raw log.
- `compile_task_source(task, source)` prepends the task's prelude (sizes as #defines, then `#line 1`).
- `CompileCache` keys results by a hash of source + options + nvcc version, on disk (atomic writes).
- `CompilePool` runs N compiles at once on CPU threads (each compile is its own process), and
  compiles identical sources once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from cudanalyst.cache import compile_cache_dir
from cudanalyst.runner.kernels.compile.ptxas_report import (
    Diagnostic,
    KernelResources,
    parse_diagnostics,
    parse_ptxas,
    user_constant_bytes,
)
from cudanalyst.runner.kernels.compile.toolchain import Toolchain, find_toolchain

if TYPE_CHECKING:
    from cudanalyst.tasks.base import Task

SOURCE_NAME = "candidate.cu"
DEFAULT_ARCH = "sm_90"
# Variables nvcc and its host compiler need; everything else (AWS_*, tokens, ...) stays out.
_ENV_KEEP = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "CUDA_HOME", "CUDA_PATH")
# An include that names an absolute path or climbs out with ".." could echo any readable file into
# the diagnostics (which become feedback text), so such sources are refused before nvcc runs.
_UNSAFE_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?P<path>/[^>"]*|[^>"]*\.\.[^>"]*)[>"]', re.MULTILINE)


class CompileOptions(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    arch: str = DEFAULT_ARCH
    extra_flags: tuple[str, ...] = ()  # e.g. ("--use_fast_math",)
    timeout_s: float = 60.0


class CompileResult(BaseModel):
    """What one compile produced; `cubin` travels in memory only and is excluded from dumps."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    ok: bool
    key: str
    kernels: dict[str, KernelResources] = Field(default_factory=dict)
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    log: str = ""
    seconds: float = 0.0
    cached: bool = False
    timed_out: bool = False
    constant_bytes: int = 0
    toolchain: str = ""
    arch: str = DEFAULT_ARCH
    cubin: bytes | None = Field(default=None, exclude=True, repr=False)

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "error"]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]


def cache_key(source: str, options: CompileOptions, toolchain_version: str) -> str:
    blob = json.dumps(
        {
            "source": source,
            "arch": options.arch,
            "flags": list(options.extra_flags),
            "nvcc": toolchain_version,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class CompileCache:
    """A folder of `<key>.json` (the result) + `<key>.cubin`; safe for concurrent writers."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]
        return folder / f"{key}.json", folder / f"{key}.cubin"

    def get(self, key: str) -> CompileResult | None:
        meta, cubin = self._paths(key)
        try:
            result = CompileResult.model_validate_json(meta.read_text())
            blob = cubin.read_bytes() if result.ok else None
        except (OSError, ValueError):
            return None  # absent, or a half-written entry from a killed process: compile again
        return result.model_copy(update={"cubin": blob, "cached": True})

    def put(self, result: CompileResult) -> None:
        meta, cubin = self._paths(result.key)
        meta.parent.mkdir(parents=True, exist_ok=True)
        # The cubin first, then the metadata that points at it: a reader never sees json without cubin.
        if result.ok and result.cubin is not None:
            _atomic_write(cubin, result.cubin)
        _atomic_write(meta, result.model_dump_json(by_alias=True).encode())


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def shared_cache() -> CompileCache:
    """The on-disk cache every compile of this machine shares (cudanalyst.cache.compile_cache_dir)."""
    return CompileCache(compile_cache_dir())


def _scrubbed_env() -> dict[str, str]:
    return {k: os.environ[k] for k in _ENV_KEEP if k in os.environ}


def niced(cmd: Sequence[str], nice: int) -> list[str]:
    """`cmd` at a lower CPU priority (for side jobs that must not slow what runs beside them)."""
    wrapper = shutil.which("nice") if nice > 0 else None
    return [wrapper, "-n", str(nice), *cmd] if wrapper else list(cmd)


def _run(cmd: Sequence[str], cwd: str, timeout_s: float) -> tuple[int | None, str]:
    """Run nvcc in its own process group so a timeout kills cicc / ptxas / the host compiler too."""
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=_scrubbed_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


def _refusal(source: str, key: str, options: CompileOptions, version: str) -> CompileResult | None:
    m = _UNSAFE_INCLUDE.search(source)
    if m is None:
        return None
    line = source.count("\n", 0, m.start()) + 1
    diag = Diagnostic(
        tool="nvcc",
        severity="error",
        file=SOURCE_NAME,
        line=line,
        message=f"include of {m['path']!r} refused: only headers on the compiler's include path may be included",
    )
    return CompileResult(
        ok=False, key=key, diagnostics=[diag], log=diag.render(), toolchain=version, arch=options.arch
    )


def compile_source(
    source: str,
    options: CompileOptions | None = None,
    cache: CompileCache | None = None,
    toolchain: Toolchain | None = None,
    nice: int = 0,
) -> CompileResult:
    """Compile one translation unit to a cubin; never raises for a bad source (see `ok`, `diagnostics`).
    `nice` > 0 runs nvcc at that lower CPU priority."""
    options = options or CompileOptions()
    tc = toolchain or find_toolchain()
    key = cache_key(source, options, tc.version)
    if cache is not None and (hit := cache.get(key)) is not None:
        return hit
    if (refused := _refusal(source, key, options, tc.version)) is not None:
        return refused
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cudanalyst-nvcc-") as work:
        src = Path(work) / SOURCE_NAME
        src.write_text(source)
        out = Path(work) / "candidate.cubin"
        cmd = [str(tc.nvcc), "-cubin", f"-arch={options.arch}", "-Xptxas", "-v", *options.extra_flags]
        cmd += [f"-I{d}" for d in tc.include_dirs]
        cmd += ["-o", str(out), SOURCE_NAME]
        code, log = _run(niced(cmd, nice), work, options.timeout_s)
        log = log.replace(work + os.sep, "")  # temp paths would make identical results differ
        cubin = out.read_bytes() if code == 0 and out.is_file() else None
    seconds = time.perf_counter() - started
    diagnostics = parse_diagnostics(log)
    if code is None:
        diagnostics.append(
            Diagnostic(
                tool="nvcc", severity="error", message=f"compile timed out after {options.timeout_s:g} s"
            )
        )
    elif code != 0 and not any(d.severity == "error" for d in diagnostics):
        diagnostics.append(
            Diagnostic(tool="nvcc", severity="error", message=f"nvcc exited with status {code}")
        )
    result = CompileResult(
        ok=cubin is not None,
        key=key,
        kernels=parse_ptxas(log) if cubin is not None else {},
        diagnostics=diagnostics,
        log=log,
        seconds=seconds,
        timed_out=code is None,
        constant_bytes=user_constant_bytes(cubin) if cubin else 0,
        toolchain=tc.version,
        arch=options.arch,
        cubin=cubin,
    )
    if cache is not None and not result.timed_out:  # a timeout may be load, not the source: retry later
        cache.put(result)
    return result


def task_translation_unit(task: Task, source: str) -> str:
    """What nvcc compiles for a candidate of `task`: the prelude, then the source as is."""
    return task.prelude() + source


def compile_task_source(
    task: Task, source: str, options: CompileOptions | None = None, cache: CompileCache | None = None
) -> CompileResult:
    return compile_source(task_translation_unit(task, source), options, cache)


class CompilePool:
    """N compiles at once. Threads suffice: each compile is an nvcc process; identical work is shared."""

    def __init__(
        self,
        workers: int | None = None,
        cache: CompileCache | None = None,
        options: CompileOptions | None = None,
        nice: int = 0,
    ) -> None:
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.cache = cache
        self.options = options or CompileOptions()
        self.nice = nice
        self._executor = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="nvcc")
        self._inflight: dict[str, Future[CompileResult]] = {}
        self._lock = threading.Lock()
        self._toolchain = find_toolchain()

    def submit(self, source: str, options: CompileOptions | None = None) -> Future[CompileResult]:
        opts = options or self.options
        key = cache_key(source, opts, self._toolchain.version)
        with self._lock:
            if (fut := self._inflight.get(key)) is not None:
                return fut
            fut = self._executor.submit(compile_source, source, opts, self.cache, self._toolchain, self.nice)
            self._inflight[key] = fut
        fut.add_done_callback(lambda _f, k=key: self._forget(k))
        return fut

    def _forget(self, key: str) -> None:
        with self._lock:
            self._inflight.pop(key, None)

    def map(self, sources: Iterable[str], options: CompileOptions | None = None) -> list[CompileResult]:
        """Compile all, results in input order."""
        futures = [self.submit(s, options) for s in sources]
        return [f.result() for f in futures]

    def close(self, drop_queued: bool = False) -> None:
        """Wait for running compiles; with drop_queued, compiles not started yet are cancelled."""
        self._executor.shutdown(wait=True, cancel_futures=drop_queued)

    def __enter__(self) -> CompilePool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
