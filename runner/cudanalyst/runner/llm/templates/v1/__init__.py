"""Template set v1 (see docs/llm-stage.md)."""
