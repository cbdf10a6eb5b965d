"""Loading a script of bench/ or scripts/ as a module in a test (they are run as files, not imported as packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str) -> ModuleType:
    """The script at `path` as module `name`, registered in sys.modules (dataclasses look their module up by name
    while a class is made)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"{path}: not a Python file"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
