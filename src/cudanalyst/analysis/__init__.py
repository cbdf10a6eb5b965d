"""Research analyses built on the core's public API (the study across run folders)."""
