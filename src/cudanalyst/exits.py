"""How cudanalyst's programs end: the exit statuses, dying with a message, and a missing extra named.

Neutral ground: the CLI, the runner and the console scripts all use it, and it imports nothing of theirs.
  0 success; 1 a failure while working (run again to resume); 2 invalid input or set-up (a bad spec, file, game
  or URI, a missing extra); 130 stopped by Ctrl-C, as a shell reports it.
A missing extra (the runner's OpenAI client, the operator's kopf...) is named with the command that installs
it, exit 2, instead of a traceback. Which extra brings a module is read from the package's own metadata
(pyproject.toml's optional-dependencies), never kept twice.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import cache
from importlib import metadata
from typing import NoReturn

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_INVALID = 2
EXIT_INTERRUPTED = 130  # what a shell reports for Ctrl-C


def die(message: str, code: int = EXIT_INVALID) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def _extra_of_distribution() -> dict[str, str]:
    """{distribution: the first extra that requires it}, in pyproject's order (dev last)."""
    found: dict[str, str] = {}
    try:
        requirements = metadata.requires("cudanalyst") or []
    except metadata.PackageNotFoundError:
        return found
    for req in requirements:
        marker = re.search(r"""extra\s*==\s*["']([^"']+)["']""", req)
        name = re.match(r"[A-Za-z0-9._-]+", req)
        if marker and name:
            found.setdefault(_canonical(name.group(0)), marker.group(1))
    return found


def extra_for(module: str | None) -> str | None:
    """The extra that installs top-level `module`, or None when no extra does."""
    if not module:
        return None
    top = module.split(".")[0]
    extras = _extra_of_distribution()
    installed = metadata.packages_distributions().get(top, [])
    for dist in (*installed, top):  # a missing module usually has its distribution's name
        if _canonical(dist) in extras:
            return extras[_canonical(dist)]
    return None


def missing_extra_message(program: str, exc: ModuleNotFoundError) -> str | None:
    """The line to print for a missing extra, or None when the missing module is not an extra's."""
    extra = extra_for(exc.name)
    if extra is None:
        return None
    return (f"{program}: the Python module {exc.name!r} is missing: it comes with the {extra!r} extra; "
            f"install it with: pip install 'cudanalyst[{extra}]'")


def guarded(program: str, call: Callable[[], object]) -> int:
    """Run `call` (a main function, or the import of one); a missing extra's module exits 2 with its name."""
    try:
        return int(call() or 0)  # type: ignore[call-overload]
    except ModuleNotFoundError as exc:
        message = missing_extra_message(program, exc)
        if message is None:
            raise
        print(message, file=sys.stderr)
        return EXIT_INVALID
