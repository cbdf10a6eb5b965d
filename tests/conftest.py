"""Shared test setup: plugins every test module may use."""

import sys
from pathlib import Path

# tests/ holds plugin modules (s3_server) that pytest imports by name.
sys.path.insert(0, str(Path(__file__).parent))

pytest_plugins = ["s3_server"]
