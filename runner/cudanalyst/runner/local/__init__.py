"""The local executor: `cudanalyst run`, the operator's plan on one machine, shards as subprocesses.

The runner's top floor: it starts model servers, LLM-stage shards and kernel stages (the runner's) on this machine,
one lane per GPU, and it may import the runner and the core; nothing in the runner, the operator or the core
imports it (tests/test_import_direction.py). `executor.py` runs the stages, `gpus.py` picks the GPUs and spreads
the shards, `command.py` is the command (progress, report).
"""
