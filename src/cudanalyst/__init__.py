"""cudanalyst: attribute which feedback drives an LLM agent that writes CUDA kernels."""

import pkgutil

# The components live in their own source roots at the checkout root (operator/, runner/; see setup.py). An install
# maps them; this also finds them when those roots are on sys.path without one (PYTHONPATH=src:operator:runner).
__path__ = pkgutil.extend_path(__path__, __name__)

__version__ = "0.1.0"
