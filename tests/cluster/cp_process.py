"""One control-plane component as a child process: started with its output in a log file,
waited on with a deadline, and stopped (TERM, then KILL). Errors carry the tail of the log."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

LOG_TAIL_LINES = 40


class ComponentError(RuntimeError):
    """A component failed to start or to become ready; the message says which and why."""


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log written)"
    return "\n".join(text[-lines:]) or "(log is empty)"


def http_probe(url: str, *, ca_file: Path | None = None, cert: tuple[Path, Path] | None = None,
               insecure: bool = False, expect: Callable[[str], bool] = lambda _: True) -> Callable[[], str | None]:
    """A probe for `wait_ready`: None when `url` answers 200 and `expect(body)` holds, else why not."""
    context: ssl.SSLContext | None = None
    if url.startswith("https"):
        context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cert:
            context.load_cert_chain(str(cert[0]), str(cert[1]))

    def probe() -> str | None:
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                body = r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            return f"{url} answered {e.code}: {e.read()[:300].decode(errors='replace')}"
        except (OSError, urllib.error.URLError) as e:
            return f"{url}: {e}"
        return None if expect(body) else f"{url} answered {body[:300]!r}"

    return probe


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Component:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("wb") as out:
            # Own process group: a stop reaches anything the component forked, and a Ctrl-C
            # in the terminal reaches pytest first, which then stops components in order.
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env}, start_new_session=True,
            )
        return self

    def wait_ready(self, probe: Callable[[], str | None], deadline_s: float) -> None:
        """Polls `probe` until it returns None; raises with the last reason and the log tail."""
        assert self.process is not None, f"{self.name} was never started"
        end = time.monotonic() + deadline_s
        reason = "not probed yet"
        while time.monotonic() < end:
            code = self.process.poll()
            if code is not None:
                raise ComponentError(
                    f"{self.name} exited with status {code} before it was ready "
                    f"(command: {' '.join(self.argv[:3])} ...); last lines of {self.log}:\n{log_tail(self.log)}"
                )
            reason = probe() or ""
            if not reason:
                return
            time.sleep(0.2)
        raise ComponentError(
            f"{self.name} was not ready within {deadline_s:.0f} s: {reason}; "
            f"last lines of {self.log}:\n{log_tail(self.log)}"
        )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace_s)
