"""The CUDA task suite: task definitions, contracts, references and baselines (no GPU code here)."""

from cudanalyst.tasks.base import DEFAULT_TOLERANCES, Kernel, Param, Role, Task, Tolerance
from cudanalyst.tasks.suite import UnknownTaskError, all_tasks, get_task, task_names

__all__ = [
    "DEFAULT_TOLERANCES",
    "Kernel",
    "Param",
    "Role",
    "Task",
    "Tolerance",
    "UnknownTaskError",
    "all_tasks",
    "get_task",
    "task_names",
]
