"""The bundled task suite: lookup by name."""

from __future__ import annotations

from cudanalyst.tasks.base import Task
from cudanalyst.tasks.datamining import DATAMINING_TASKS
from cudanalyst.tasks.dl import DL_TASKS
from cudanalyst.tasks.linalg import LINALG_TASKS
from cudanalyst.tasks.npb import NPB_TASKS
from cudanalyst.tasks.stencils import STENCIL_TASKS
from cudanalyst.tasks.xsbench import XSBENCH_TASKS

_TASKS: dict[str, Task] = {
    t.name: t
    for t in (*LINALG_TASKS, *DATAMINING_TASKS, *STENCIL_TASKS, *DL_TASKS, *XSBENCH_TASKS, *NPB_TASKS)
}


class UnknownTaskError(KeyError):
    """A task name that is not in the suite; the message names it and lists the known ones."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name
        self.known = tuple(_TASKS)

    def __str__(self) -> str:  # KeyError's own __str__ would print the repr of the key only
        return f"unknown task {self.name!r}; known tasks: {', '.join(self.known)}"


def task_names() -> tuple[str, ...]:
    return tuple(_TASKS)


def all_tasks() -> tuple[Task, ...]:
    return tuple(_TASKS.values())


def get_task(name: str) -> Task:
    try:
        return _TASKS[name]
    except KeyError:
        raise UnknownTaskError(name) from None
