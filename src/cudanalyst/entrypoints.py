"""The console scripts: the top of the package, the one place that may see every room.

`cudanalyst` is the core's CLI with the local executor's commands (`run`, `record`) handed to it here, so the
CLI never names the runner and the runner never imports the CLI (tests/test_import_direction.py). Each script
imports its part of the package only when called, so that a missing extra is named with the command that
installs it, exit status 2, instead of a traceback (cudanalyst.exits).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cudanalyst.cli import Register
from cudanalyst.exits import extra_for, guarded

__all__ = ["cli", "extra_for", "local_commands", "operator", "runner"]


def local_commands() -> Mapping[str, Register]:
    """`run` and `record`, where this build has the runner (the operator's image has not: none then)."""
    try:
        from cudanalyst.runner.local.commands import COMMANDS
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("cudanalyst.runner"):
            return {}
        raise
    return COMMANDS


def cli(argv: Sequence[str] | None = None) -> int:
    """`cudanalyst` (the core; subcommands that need an extra say so themselves)."""
    from cudanalyst.cli import main

    return guarded("cudanalyst", lambda: main(argv, local_commands()))


def runner() -> int:
    """`cudanalyst-runner`: needs the `runner` extra."""

    def shard() -> int:
        from cudanalyst.runner.shard import main

        return main()

    return guarded("cudanalyst-runner", shard)


def operator() -> int:
    """`cudanalyst-operator`: needs the `operator` extra."""

    def operate() -> int:
        from cudanalyst.operator.main import main

        return main()

    return guarded("cudanalyst-operator", operate)
