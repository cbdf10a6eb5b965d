"""cudanalyst: attribute which feedback drives an LLM agent that writes CUDA kernels."""

__version__ = "0.1.0"
