"""The runner: runs one shard of a plan (LLM stage, kernel stage). Never talks to the Kubernetes API."""
